"""Sharded, resumable generation of one distractor source into the NearID schema.

One *item* is one view of one identity: ``item_id = "<id>/<k>"`` (k = 1..3). For source ``S`` the
runner writes, under the dataset root::

    distractors/S/<id>_<k>.png            the distractor of view k (atomic writes)
    distractors/S.work/manifest_rank<r>.jsonl   one line per finished item (ok or rejected)
    distractors/S.work/quality_report.csv       rejections per backend (after the merge)
    distractors/S.csv                     id, split, nimg1, nimg2, nimg3 - row-aligned with
                                          positives.csv (empty cell = no view k, or rejected)

Guarantees:
- per-item seeds are ``derive_seed(item_id, base=seed)`` (retries: ``derive_seed(item_id,
  "retry", a, base=seed)``), never the order of work, so any sharding / batching-by-item order /
  restart gives the same bytes;
- a killed run restarted with the same command skips the items in the manifests (of every rank,
  so a restart may even use a different number of ranks) and ends byte-identical;
- inputs of the pending items are checked before anything is generated (bad image/mask ->
  :class:`FillInputError` naming the item and field, nothing written);
- :func:`merge_source` assembles the row-aligned CSV only when every item was done exactly once.

Scale-out: run the module under ``accelerate launch --num_processes N``; each process takes
``items[rank::N]`` of the id-sorted item list (``accelerate.PartialState``), and the main process
merges after everyone finished::

    accelerate launch --num_processes 8 -m nearid_lib.generate.runner --profile paper --source SDXL
"""
from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from PIL import Image

from ..io_utils import atomic_save_image, write_csv, write_json
from ..seeding import derive_seed
from .base import FillBackend, FillInputError, FillRequest, validate_fill_inputs
from .prompts import near_identity_prompt
from .quality import QualityFilter, rejection_report

__all__ = ["GenItem", "items_from_dataset", "generate_source", "merge_source", "item_seed",
           "shard_items", "load_manifest_records", "register_source", "work_dir", "main",
           "ResampledBackend", "world_request_fn"]

VIEWS = (1, 2, 3)


@dataclass(frozen=True)
class GenItem:
    """One view to repaint: its positive image/mask (paths relative to the root) and prompt."""

    item_id: str    # "<id>/<k>"
    id: str
    split: str
    k: int
    image: str
    mask: str
    prompt: str


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", s)


def _nonempty(v: Any) -> bool:
    return isinstance(v, str) and v.strip() != ""


def items_from_dataset(root: str | Path, seed: int = 0,
                       prompt_fn: Callable[[str, str, str, int], str] | None = None) -> list[GenItem]:
    """Every (identity, view) of ``positives.csv`` with a non-empty ``img_k``, in positives order.

    ``prompt_fn(class_name, description, identity_id, seed)`` defaults to
    :func:`near_identity_prompt` (one same-class, different-instance prompt per identity)."""
    import pandas as pd

    root = Path(root)
    pos = pd.read_csv(root / "positives.csv", dtype=str, keep_default_na=False)
    ids = pd.read_csv(root / "identities.csv", dtype=str, keep_default_na=False)
    for col in ("id", "split", *(f"img{k}" for k in VIEWS), *(f"mask{k}" for k in VIEWS)):
        if col not in pos.columns:
            raise KeyError(f"{root / 'positives.csv'}: missing column {col!r}")
    meta = ids.set_index("id")
    prompt_fn = prompt_fn or (lambda c, d, i, s: near_identity_prompt(c, d, item_id=i, seed=s))
    items = []
    for row_no, row in enumerate(pos.itertuples(index=False), start=2):  # +header, 1-based
        rid = row.id
        if rid not in meta.index:
            raise KeyError(f"{root / 'positives.csv'} row {row_no}: id {rid!r} not in identities.csv")
        m = meta.loc[rid]
        prompt = prompt_fn(m.get("class_name", ""), m.get("description", ""), rid, seed)
        for k in VIEWS:
            img, msk = getattr(row, f"img{k}"), getattr(row, f"mask{k}")
            if not _nonempty(img):
                continue
            if not _nonempty(msk):
                raise FillInputError(f"{root / 'positives.csv'} row {row_no} (id {rid!r}): field "
                                     f"'mask{k}' is empty but 'img{k}' is {img!r}")
            items.append(GenItem(f"{rid}/{k}", rid, row.split, k, img, msk, prompt))
    return items


def item_seed(item_id: str, seed: int, attempt: int = 0) -> int:
    """The per-item seed (attempt 0) or the seed of retry ``attempt`` - order-independent."""
    if attempt == 0:
        return derive_seed(item_id, base=seed)
    return derive_seed(item_id, "retry", attempt, base=seed)


def shard_items(items: Sequence[GenItem], rank: int, world_size: int) -> list[GenItem]:
    """Rank ``rank``'s share: every ``world_size``-th item of the id-sorted list (balanced, and
    independent of the order the items were listed in)."""
    if not (0 <= rank < world_size):
        raise ValueError(f"shard rank {rank} not in [0, {world_size})")
    ordered = sorted(items, key=lambda it: it.item_id)
    return ordered[rank::world_size]


def work_dir(out_root: str | Path, source_name: str) -> Path:
    return Path(out_root) / "distractors" / f"{source_name}.work"


def load_manifest_records(out_root: str | Path, source_name: str) -> list[tuple[str, dict]]:
    """All (manifest file name, record) of every rank; torn last lines are skipped."""
    out = []
    for f in sorted(work_dir(out_root, source_name).glob("manifest_rank*.jsonl")):
        for line in f.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill; that item is simply redone
            out.append((f.name, rec))
    return out


def _append(path: Path, rec: dict) -> None:
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(json.dumps(rec, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _load_inputs(root: Path, it: GenItem) -> tuple[Image.Image, Image.Image]:
    where = f"item {it.item_id!r}"
    try:
        image = Image.open(root / it.image)
        image.load()
    except (OSError, FileNotFoundError) as e:
        raise FillInputError(f"{where}: field 'img{it.k}' ({it.image}) cannot be read: {e}") from e
    try:
        mask = Image.open(root / it.mask)
        mask.load()
    except (OSError, FileNotFoundError) as e:
        raise FillInputError(f"{where}: field 'mask{it.k}' ({it.mask}) cannot be read: {e}") from e
    try:
        return validate_fill_inputs(image, mask, where=f"{where} ({it.image}, {it.mask})")
    except FillInputError as e:
        # name the dataset column, not just the interface argument
        msg = str(e).replace("field 'image'", f"field 'img{it.k}'").replace(
            "field 'mask'", f"field 'mask{it.k}'")
        raise FillInputError(msg) from None


def generate_source(backend: FillBackend, items: Sequence[GenItem], out_root: str | Path,
                    source_name: str, seed: int = 0, shard: tuple[int, int] | None = None,
                    batch_size: int = 1, settings: dict[str, Any] | None = None,
                    quality: QualityFilter | None = None, retries: int = 0,
                    progress: bool = True, on_item: Callable[[str, dict], None] | None = None,
                    input_root: str | Path | None = None,
                    request_fn: Callable[[GenItem, int], tuple[int, dict]] | None = None,
                    ) -> dict[str, Any]:
    """Generate this rank's share of ``items`` for ``source_name``; returns a summary dict.

    Args:
        backend: any :class:`FillBackend` (``get_backend(name, ...)``).
        items: from :func:`items_from_dataset` (all ranks pass the same list).
        out_root: dataset root; images go to ``distractors/<source>/``.
        seed: base seed; item seeds are ``derive_seed(item_id, base=seed)``.
        shard: ``(rank, world_size)``; ``None`` asks ``accelerate.PartialState``.
        batch_size: requests per ``backend.fill_batch`` call.
        settings: backend settings added to every request.
        quality: a :class:`QualityFilter` or ``None`` (accept everything).
        retries: extra attempts with fresh derived seeds for rejected outputs.
        on_item: called with ``(item_id, record)`` after each item is recorded (progress hooks;
            the tests raise ``KeyboardInterrupt`` here to simulate a kill).
        input_root: where the positives live (default: ``out_root``).
        request_fn: ``(item, attempt) -> (seed, per-item settings)``, for generators whose
            requests depend on the item beyond its image (the procedural world's rendered
            instance, see :func:`world_request_fn`); default ``(item_seed(...), {})``.
    """
    from tqdm.auto import tqdm

    out_root = Path(out_root)
    in_root = Path(input_root) if input_root is not None else out_root
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", source_name):
        raise ValueError(f"source name {source_name!r} must match [A-Za-z0-9_.-]+")
    seen: set[str] = set()
    for it in items:
        if it.item_id in seen:
            raise ValueError(f"item {it.item_id!r} listed twice")
        seen.add(it.item_id)
    if shard is None:
        from accelerate import PartialState

        state = PartialState()
        shard = (state.process_index, state.num_processes)
    rank, world = shard
    mine = shard_items(items, rank, world)
    done = {rec["id"] for _, rec in load_manifest_records(out_root, source_name)}
    pending = [it for it in mine if it.item_id not in done]
    # Pre-flight: every pending input is checked before the first output is written.
    for it in pending:
        _load_inputs(in_root, it)

    manifest = work_dir(out_root, source_name) / f"manifest_rank{rank}.jsonl"
    img_dir = out_root / "distractors" / source_name
    settings = dict(settings or {})
    t0 = time.perf_counter()
    n_new = {"ok": 0, "rejected": 0}
    bar = tqdm(total=len(mine), initial=len(mine) - len(pending), position=rank,
               desc=f"{source_name} rank {rank}/{world}", disable=not progress, leave=True)
    try:
        for start in range(0, len(pending), batch_size):
            batch = pending[start:start + batch_size]
            inputs = {it.item_id: _load_inputs(in_root, it) for it in batch}
            todo = list(batch)
            final: dict[str, dict] = {}
            for attempt in range(retries + 1):
                reqs = []
                for it in todo:
                    if request_fn is None:
                        s_item, extra = item_seed(it.item_id, seed, attempt), {}
                    else:
                        s_item, extra = request_fn(it, attempt)
                    reqs.append(FillRequest(it.item_id, *inputs[it.item_id], it.prompt,
                                            int(s_item), {**settings, **extra}))
                outs = backend.fill_batch(reqs)
                if len(outs) != len(reqs):
                    raise RuntimeError(f"backend {backend.name!r} returned {len(outs)} images "
                                       f"for {len(reqs)} requests")
                again = []
                for it, req, out in zip(todo, reqs, outs):
                    image, mask = inputs[it.item_id]
                    if not isinstance(out, Image.Image) or out.size != image.size:
                        raise RuntimeError(
                            f"item {it.item_id!r}: backend {backend.name!r} returned "
                            f"{getattr(out, 'size', type(out).__name__)}, expected {image.size}")
                    out = out.convert("RGB")
                    rec: dict[str, Any] = {"id": it.item_id, "seed": req.seed, "attempt": attempt,
                                           "backend": backend.name}
                    if quality is not None:
                        q = quality.check(image, out, mask)
                        rec.update(in_mask_diff=round(q.in_mask_diff, 6),
                                   out_mask_drift=round(q.out_mask_drift, 6))
                        if not q.ok:
                            rec.update(status="rejected", reason=q.reason, path=None)
                            final[it.item_id] = rec
                            if attempt < retries:
                                again.append(it)
                            continue
                    rel = f"distractors/{source_name}/{_safe(it.id)}_{it.k}.png"
                    rec.update(status="ok", reason=None, path=rel, _image=out)
                    final[it.item_id] = rec
                todo = again
                if not todo:
                    break
            for it in batch:  # record in item order: manifests are identical across restarts
                rec = final[it.item_id]
                img = rec.pop("_image", None)
                if img is not None:
                    atomic_save_image(out_root / rec["path"], img)
                _append(manifest, rec)
                n_new[rec["status"]] += 1
                bar.update(1)
                if on_item is not None:
                    on_item(it.item_id, rec)
    finally:
        bar.close()
    return {"source": source_name, "backend": backend.name, "rank": rank, "world_size": world,
            "n_shard": len(mine), "n_skipped": len(mine) - len(pending), "n_new_ok": n_new["ok"],
            "n_new_rejected": n_new["rejected"], "seconds": time.perf_counter() - t0}


def merge_source(out_root: str | Path, source_name: str, items: Sequence[GenItem] | None = None,
                 profile: str = "", backend: str | None = None,
                 input_root: str | Path | None = None):
    """Assemble ``distractors/<source>.csv`` row-aligned with ``positives.csv``.

    Checks that every item of ``items`` (default: all views of positives.csv) was recorded
    exactly once over all rank manifests and that every accepted image exists; rejected items
    become empty cells. Also writes ``<source>.work/quality_report.csv``. Returns
    ``(table, report)`` DataFrames. ``input_root``: where positives.csv lives (default
    ``out_root``)."""
    import pandas as pd

    out_root = Path(out_root)
    in_root = Path(input_root) if input_root is not None else out_root
    pos = pd.read_csv(in_root / "positives.csv", dtype=str, keep_default_na=False)
    if items is None:
        items = items_from_dataset(in_root, prompt_fn=lambda *a: "")
    expected = {it.item_id for it in items}
    recs: dict[str, dict] = {}
    where: dict[str, str] = {}
    for fname, rec in load_manifest_records(out_root, source_name):
        iid = rec["id"]
        if iid in recs:
            raise RuntimeError(f"{source_name}: item {iid!r} was done more than once "
                               f"({where[iid]} and {fname})")
        recs[iid] = rec
        where[iid] = fname
    missing = sorted(expected - set(recs))
    if missing:
        raise RuntimeError(f"{source_name}: {len(missing)} item(s) not done yet, e.g. "
                           f"{missing[:5]}; rerun the generation (it resumes)")
    extra = sorted(set(recs) - expected)
    if extra:
        raise RuntimeError(f"{source_name}: manifests hold items not in positives.csv: {extra[:5]}")
    rows = []
    for row in pos.itertuples(index=False):
        out = {"id": row.id, "split": row.split}
        for k in VIEWS:
            rec = recs.get(f"{row.id}/{k}")
            path = rec.get("path") if rec and rec.get("status") == "ok" else None
            if path and not (out_root / path).is_file():
                raise RuntimeError(f"{source_name}: manifest says {rec['id']!r} is done but "
                                   f"{path} is missing; delete its manifest line and rerun")
            out[f"nimg{k}"] = path or ""
        rows.append(out)
    table = pd.DataFrame(rows, columns=["id", "split", *(f"nimg{k}" for k in VIEWS)])
    write_csv(table, out_root / "distractors" / f"{source_name}.csv")
    bname = backend or (next(iter(recs.values())).get("backend", "") if recs else "")
    report = rejection_report([recs[i] for i in sorted(recs)], source_name, bname, profile)
    write_csv(report, work_dir(out_root, source_name) / "quality_report.csv")
    return table, report


class ResampledBackend(FillBackend):
    """Run ``inner`` at ``resolution`` px (input Lanczos-upsampled, mask nearest) and Lanczos the
    output back to the input size - how a generator working at a higher resolution than the
    dataset (the ``*_1024`` / ``*_hr`` sources) produces same-size distractors."""

    def __init__(self, inner: FillBackend, resolution: int):
        self.inner = inner
        self.resolution = int(resolution)
        self.name = inner.name

    def fill(self, image, mask, prompt, seed, **settings):
        image, mask = validate_fill_inputs(image, mask, where=settings.get("where", ""))
        wh = (self.resolution, round(self.resolution * image.height / image.width))
        big = self.inner.fill(image.resize(wh, Image.LANCZOS), mask.resize(wh, Image.NEAREST),
                              prompt, seed, **settings)
        return big.resize(image.size, Image.LANCZOS)


def world_request_fn(cfg, root: str | Path, source: str):
    """Per-item requests of the procedural NearID-mini world for ``source``: the rendered
    near-identity instance and the fill seed, drawn exactly as ``nearid_lib.data.build`` draws
    them (``make_rng(seed, "perturb"|"view"|"fill", ...)``), so regenerating a source through
    :func:`generate_source` reproduces the world's distractors. Returns ``(request_fn,
    resolution)``; wrap the backend in :class:`ResampledBackend` when resolution differs from
    the image size ("_hr" sources)."""
    from ..data import world as W
    from ..data.build import distractor_instance, parse_source, positive_view
    from ..seeding import make_rng

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
        view = positive_view(cfg, it.id, it.k)  # the builder's own view and instance derivation
        _, layer = distractor_instance(cfg, params[it.id], source, it.id, it.k, view)
        fseed = int(make_rng(seed, "fill", source, it.id, it.k).integers(2**31))
        if attempt:
            fseed = item_seed(it.item_id, fseed, attempt)
        return fseed, {"instance": layer}

    return request, size


def register_source(root: str | Path, source_name: str, train: bool = False) -> dict:
    """Add ``source_name`` to ``sources.json`` (and to ``train_sources`` if ``train``)."""
    path = Path(root) / "sources.json"
    data = json.loads(path.read_text()) if path.exists() else {"sources": [], "train_sources": []}
    if source_name not in data["sources"]:
        data["sources"].append(source_name)
    if train and source_name not in data.setdefault("train_sources", []):
        data["train_sources"].append(source_name)
    write_json(data, path)
    return data


# --------------------------------------------------------------------------- CLI
def _parse(argv: Iterable[str] | None):
    p = argparse.ArgumentParser(
        prog="python -m nearid_lib.generate.runner",
        description="Generate one NearID distractor source (run under `accelerate launch`).")
    p.add_argument("--profile", default="paper")
    p.add_argument("--source", required=True, help="source name, e.g. SDXL, Flux_1024, Qwen")
    p.add_argument("--backend", default=None, help="backend name (default: from the source name)")
    p.add_argument("--resolution", default=None, help="'native' or an int (default: from source)")
    p.add_argument("--root", default=None, help="dataset root (default: data_dir(profile)/nearid)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--retries", type=int, default=None)
    p.add_argument("--settings", default="{}", help="JSON dict of backend settings")
    p.add_argument("--no-merge", action="store_true")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="profile override, e.g. generate.mixed_precision=bf16")
    return p.parse_args(list(argv) if argv is not None else None)


def main(argv: Iterable[str] | None = None) -> dict[str, Any]:
    """CLI entry point; under accelerate each process generates its shard, rank 0 merges."""
    from accelerate import PartialState

    from ..config import get_profile
    from ..paths import data_dir
    from .base import get_backend
    from .diffusers_backends import NEARID_SOURCES

    args = _parse(argv)
    cfg = get_profile(args.profile, **dict(kv.split("=", 1) for kv in args.set))
    g = cfg.generate
    backend_name, resolution = NEARID_SOURCES.get(args.source, (None, "native"))
    backend_name = args.backend or backend_name
    if backend_name is None:
        raise SystemExit(f"--source {args.source!r} is not a NearID source; pass --backend")
    if args.resolution is not None:
        resolution = args.resolution if args.resolution == "native" else int(args.resolution)
    root = Path(args.root) if args.root else data_dir(cfg.name) / "nearid"
    seed = cfg.seed if args.seed is None else args.seed
    state = PartialState()
    kw: dict[str, Any] = {}
    if backend_name != "procedural":
        kw = dict(resolution=resolution, mixed_precision=g.mixed_precision,
                  hub_ids=dict(g.hub_ids), device=str(state.device))
    backend = get_backend(backend_name, **kw)
    items = items_from_dataset(root, seed=seed)
    summary = generate_source(
        backend, items, root, args.source, seed=seed,
        shard=(state.process_index, state.num_processes),
        batch_size=args.batch_size or g.batch_size, settings=json.loads(args.settings),
        quality=QualityFilter(g.reject_unchanged_below, g.reject_drift_above),
        retries=g.retries if args.retries is None else args.retries)
    print(json.dumps(summary))
    state.wait_for_everyone()
    if state.is_main_process and not args.no_merge:
        _, report = merge_source(root, args.source, items, profile=cfg.name, backend=backend_name)
        print(report.to_string(index=False))
    return summary


if __name__ == "__main__":
    main()
