"""The procedural world's distractor sources regenerated through the generation runner (notebook 02).

:func:`world_request_fn` draws every item's instance and fill seed exactly as the world builder
does, so :func:`~nearid_lib.generate.runner.generate_source` with :func:`world_source_backend`
reproduces the world's distractors; :func:`regenerate_world_sources` runs one source per process;
:func:`world_pixel_check` counts the regenerated images that equal the world's pixel for pixel.
"""
from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd
from PIL import Image

from ..runtime.allocator import tune_allocator
from ..generate.items import VIEWS, GenItem, item_seed
from ..generate.procedural import ResampledBackend
from ..generate.runner import generate_source
from ..runtime.seeding import make_rng
from .build import distractor_instance, parse_source, positive_view
from .generators import fill_backend

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["world_request_fn", "world_source_backend", "regenerate_world_sources", "world_pixel_check"]


def world_request_fn(cfg: Profile, root: str | Path, source: str):
    """Per-item requests of the procedural NearID-mini world for ``source``: the rendered
    near-identity instance and the fill seed, drawn exactly as ``nearid_lib.data.build`` draws
    them (``make_rng(seed, "perturb"|"view"|"fill", ...)``), so regenerating a source through
    :func:`generate_source` reproduces the world's distractors. Returns ``(request_fn,
    resolution)``; wrap the backend in :class:`ResampledBackend` when resolution differs from
    the image size ("_hr" sources)."""
    fam, hr = parse_source(source)
    size = int(cfg.world.source_resolutions[-1] if hr else cfg.world.image_size)
    params = {}
    for line in (Path(root) / "identity_params.jsonl").read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            params[rec["id"]] = rec["params"]
    seed = cfg.seed

    def request(it: GenItem, attempt: int) -> tuple[int, dict]:
        if it.id not in params:
            raise KeyError(f"item {it.item_id!r}: no parameters in identity_params.jsonl")
        view = positive_view(cfg, it.id, it.k)  # the builder's own view derivation
        _, layer = distractor_instance(cfg, params[it.id], source, it.id, it.k, view)
        fseed = int(make_rng(seed, "fill", source, it.id, it.k).integers(2**31))
        if attempt:
            fseed = item_seed(it.item_id, fseed, attempt)
        return fseed, {"instance": layer}

    return request, size


def world_source_backend(cfg: Profile, root: str | Path, source: str):
    """``(backend, request_fn)`` that regenerate the world's ``source`` through
    :func:`~nearid_lib.generate.runner.generate_source`: the procedural backend in the source's
    generator look (:func:`~nearid_lib.data.generators.fill_backend`; resampled for the
    ``_hr`` sources) and :func:`world_request_fn`'s per-item requests."""
    request_fn, size = world_request_fn(cfg, root, source)
    backend = fill_backend(source)                       # the source's generator look
    return (backend if size == cfg.world.image_size else ResampledBackend(backend, size)), request_fn


def _regenerate_in_worker(cfg: Profile, root: str, out_root: str, source: str, items, quality,
                          batch_size: int) -> str:
    tune_allocator(cfg.runtime.tune_malloc)            # a spawned process starts with glibc's defaults
    backend, request_fn = world_source_backend(cfg, root, source)
    generate_source(backend, items, out_root, source, seed=cfg.seed, shard=(0, 1), quality=quality, retries=0,
                    batch_size=batch_size, progress=False, input_root=root, request_fn=request_fn)
    return source


def regenerate_world_sources(cfg: Profile, root: str | Path, out_root: str | Path, sources: Sequence[str],
                             items: Sequence[GenItem], quality=None, workers: int | None = None,
                             batch_size: int = 1) -> None:
    """Regenerate the world's ``sources`` for ``items`` into ``out_root`` (no retries), one source
    per process in ``workers`` spawned processes (default ``cfg.runtime.workers``). Every item is
    seeded on its own, so the images do not depend on ``workers``; the runner resumes, so a later
    :func:`~nearid_lib.generate.runner.generate_source` call for the same source finds it done."""
    workers = cfg.runtime.workers if workers is None else int(workers)
    args = [(cfg, str(root), str(out_root), s, list(items), quality, batch_size) for s in sources]
    if workers <= 1 or len(sources) <= 1:
        for a in args:
            _regenerate_in_worker(*a)
        return
    with ProcessPoolExecutor(min(workers, len(sources)), mp_context=get_context("spawn")) as ex:
        for f in as_completed([ex.submit(_regenerate_in_worker, *a) for a in args]):
            f.result()                      # a failed source raises here, with the worker's error


def world_pixel_check(table, source: str, regen_root: str | Path, world_root: str | Path) -> dict[str, Any]:
    """How many distractors of a regenerated world ``source`` equal the world's own, pixel for pixel.

    ``table``: the regenerated source's ``distractors/<source>.csv`` rows (what
    :func:`~nearid_lib.generate.merge.merge_source` returns; its ``nimg<k>`` relative to
    ``regen_root``), row-aligned with the world's ``<world_root>/distractors/<source>.csv``. A view
    is compared where both have an image (a rejected fill is an empty cell). Returns ``{"source",
    "n_compared", "n_pixel_identical"}``."""
    regen_root, world_root = Path(regen_root), Path(world_root)
    world = pd.read_csv(world_root / "distractors" / f"{source}.csv", dtype=str, keep_default_na=False)
    same = n = 0
    for k in VIEWS:
        for a, b in zip(table[f"nimg{k}"], world[f"nimg{k}"]):
            if a and b:
                n += 1
                same += np.array_equal(np.asarray(Image.open(regen_root / a)), np.asarray(Image.open(world_root / b)))
    return {"source": source, "n_compared": n, "n_pixel_identical": same}
