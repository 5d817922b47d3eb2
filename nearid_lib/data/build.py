"""Build the NearID-mini world into the on-disk schema (see ``nearid_lib.data.schema``).

Determinism: every item draws its randomness from ``make_rng(seed, <stage>, <item id>, ...)``,
never from the order of work, so the bytes written do not depend on ``n_workers`` or on how
many times the build was interrupted and resumed.

Atomicity / resumability: each job (one identity with its views and distractors, one MTG pair,
one grid anchor, one FPR identity) writes its files atomically and then appends one line to a
progress log (``_progress/<stage>.jsonl``, a :class:`~nearid_lib.io_utils.Manifest`) holding the
table rows it produced. A restart skips logged jobs. Tables are written from the logs at the
end and ``manifest.json`` last; it is deleted before any work starts, so a partially written
dataset never looks complete. A build whose world config differs from the one on disk starts
from scratch (the old progress is discarded).

Split selection (``splits=("test",)``, what :func:`nearid_lib.score_encoder` builds): only the jobs
of those splits run (identities of the splits with their distractors, MTG pairs of the splits)
plus, with ``"test"``, the evaluation-only sets (edit grids, FPR galleries). Since every item is
seeded by its id, those files are byte-identical to a full build's and the tables hold exactly the
full build's rows of those splits, in the same order. Such a dataset's manifest says
``"complete": false, "partial": true, "splits": [...]``, so nothing that expects the whole world
takes it for one (``load_nearid`` refuses it unless asked for those splits); a later full build
resumes from its progress logs and renders only the rest.

This module is the driver (stages, progress logs, tables, manifest); the per-item draws it shares
with the generators live in :mod:`.draws`, the jobs in :mod:`.jobs`. Their public names are
re-exported here.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from ..io_utils import Manifest, atomic_write, write_csv, write_json
from ..paths import data_dir
from ..runmeta import code_fingerprint
from . import backgrounds as B
from .draws import (
    _SPLITS,
    MAX_PERTURB_TRIES,
    _identity_list,
    background_for,
    distractor_instance,
    fpr_view,
    parse_source,
    positive_view,
    source_splits,
)
from .jobs import GRID_FACTORS, _job_fpr, _job_fpr_key, _job_grid, _job_identity, _job_mtg, _mtg_split
from .schema import COLUMNS, SCHEMA_VERSION

__all__ = ["build_world", "manifest_splits", "parse_source", "world_fingerprint", "GRID_FACTORS", "positive_view",
           "fpr_view", "background_for", "distractor_instance", "MAX_PERTURB_TRIES", "source_splits"]

# The code that decides the world's bytes: a change to any of it rebuilds the world.
WORLD_CODE = ("data/world.py", "data/identity.py", "data/perturb.py", "data/parts.py", "data/views.py",
              "data/render.py", "data/backgrounds.py", "data/build.py", "data/draws.py", "data/jobs.py",
              "generate/procedural.py", "generate/base.py", "seeding.py")


def world_fingerprint(cfg) -> dict[str, Any]:
    """What determines the bytes of the world (n_workers and compression excluded): seed, world
    config, schema version and the fingerprint of the code that renders it."""
    w = asdict(cfg.world)
    for k in ("n_workers", "nearid_repo", "nearid_sources", "mtg_repo", "source", "released_masks"):
        w.pop(k, None)
    return {"seed": int(cfg.seed), "world": json.loads(json.dumps(w)), "schema_version": SCHEMA_VERSION,
            "code": code_fingerprint(*WORLD_CODE)}


# --------------------------------------------------------------------------- driver
def _df(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    """Rows as a table; an empty stage still gets its header (a readable, empty CSV)."""
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=columns)


def _run_stage(name: str, fn: Callable, jobs: list[tuple[str, Any]], prog: Path,
               n_workers: int, progress: bool) -> Manifest:
    man = Manifest(prog / f"{name}.jsonl")
    todo = [a for key, a in jobs if key not in man]
    if not todo:
        return man
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        tqdm = None
    bar = tqdm(total=len(jobs), initial=len(jobs) - len(todo), desc=f"world/{name}",
               disable=not progress) if tqdm else None
    if n_workers > 1 and len(todo) > 4:
        # fork: workers inherit the loaded photo pool; results are seeded per item, so the
        # completion order does not matter.
        ctx = mp.get_context("fork")
        with ctx.Pool(n_workers) as pool:
            for key, res in pool.imap_unordered(fn, todo, chunksize=2):
                man.add(key, **res)
                if bar:
                    bar.update(1)
    else:
        for a in todo:
            key, res = fn(a)
            man.add(key, **res)
            if bar:
                bar.update(1)
    if bar:
        bar.close()
    return man


def _selected_splits(splits) -> tuple[str, ...]:
    """``splits`` in the canonical order (train, val, test); None = all three."""
    if splits is None:
        return _SPLITS
    splits = (splits,) if isinstance(splits, str) else tuple(splits)
    bad = sorted(set(splits) - set(_SPLITS))
    if bad or not splits:
        raise ValueError(f"build_world: splits {list(splits)}: unknown {bad}; choose from {', '.join(_SPLITS)}")
    return tuple(s for s in _SPLITS if s in splits)


def manifest_splits(manifest: dict) -> tuple[str, ...]:
    """The splits a dataset's manifest says it holds: all three for a complete dataset, the listed
    ones for a finished split-selected build (``partial``), none otherwise."""
    if manifest.get("complete"):
        return _SPLITS
    if manifest.get("partial"):
        return tuple(manifest.get("splits", ()))
    return ()


def build_world(cfg, root: str | os.PathLike | None = None, n_workers: int | None = None,
                progress: bool = True, force: bool = False, splits=None, graded: bool = True) -> Path:
    """Build (or finish building) the NearID-mini world for profile ``cfg`` into ``root``
    (default ``data_dir(cfg.name) / "nearid"``) and return ``root``.

    A complete dataset with the same world fingerprint is returned untouched (unless ``force``).
    ``n_workers`` defaults to ``cfg.world.n_workers``; the output bytes do not depend on it.
    ``splits`` (e.g. ``("test",)``): build only those splits' items (see the module docstring);
    a dataset on disk that already holds them (a full one included) is returned untouched.
    ``graded=False`` leaves the graded set (ID-Sim's Subjects2k / DreamBench++ analogue, which
    :func:`nearid_lib.score_encoder` does not score) out of a split-selected build; a full build,
    and any later build asking for it, adds it (its items are seeded by id like every other)."""
    root = Path(root) if root is not None else data_dir(cfg.name) / "nearid"
    sel = _selected_splits(splits)
    full = sel == _SPLITS
    wc = cfg.world
    graded = bool(graded) or full
    if wc.source != "procedural":
        raise ValueError(f"build_world builds the procedural world; profile {cfg.name!r} has "
                         f"world.source={wc.source!r} (use nearid_lib.data.released instead)")
    for s in wc.distractor_sources:
        parse_source(s)
    unknown = set(wc.train_sources) - set(wc.distractor_sources)
    if unknown:
        raise ValueError(f"world.train_sources {sorted(unknown)} are not in world.distractor_sources")
    fp = world_fingerprint(cfg)
    man_path = root / "manifest.json"
    fp_path = root / "_progress" / "fingerprint.json"
    if man_path.exists() and not force:
        try:
            m = json.loads(man_path.read_text())
            if m.get("fingerprint") == fp:
                has_graded = "graded_images" in m.get("counts", {})
                needs_graded = graded and "test" in sel and int(wc.n_graded_anchors) > 0 and not has_graded
                if set(sel) <= set(manifest_splits(m)) and not needs_graded:
                    return root
                # a split-selected world grows: its tables keep the splits (and sets) it already holds
                sel = _selected_splits(set(sel) | set(manifest_splits(m)))
                full = sel == _SPLITS
                graded = graded or has_graded or full
        except json.JSONDecodeError:
            pass
    # From here on the dataset is incomplete: remove the marker first.
    if man_path.exists():
        man_path.unlink()
    old_fp = json.loads(fp_path.read_text()) if fp_path.exists() else None
    if force or old_fp != fp:
        for sub in ("_progress", "pos", "mask", "dist", "mtg", "grids", "fpr", "distractors"):
            shutil.rmtree(root / sub, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    write_json(fp, fp_path)
    prog = root / "_progress"
    n_workers = int(n_workers if n_workers is not None else wc.n_workers)
    t0 = time.time()
    B.photo_pool()                                   # load once before forking

    idents = [r for r in _identity_list(cfg) if r["split"] in sel]
    man = _run_stage("identities", _job_identity,
                     [(r["id"], (cfg, root, r)) for r in idents], prog, n_workers, progress)
    recs = {r["id"]: r for r in man.records()}
    order = [r["id"] for r in idents]
    id_rows = [recs[i]["identity"] for i in order]
    write_csv(pd.DataFrame(id_rows), root / "identities.csv")
    write_csv(pd.DataFrame([recs[i]["positives"] for i in order]), root / "positives.csv")
    for src in wc.distractor_sources:
        write_csv(pd.DataFrame([recs[i]["distractors"][src] for i in order]),
                  root / "distractors" / f"{src}.csv")
    with_params = "\n".join(json.dumps({"id": i, "params": recs[i]["params"]}) for i in order)
    atomic_write(root / "identity_params.jsonl", lambda p: p.write_text(with_params + "\n"))
    write_json({"sources": list(wc.distractor_sources), "train_sources": list(wc.train_sources),
                "source_splits": {s: list(source_splits(wc, s)) for s in wc.distractor_sources},
                "resolutions": {s: int(wc.source_resolutions[-1] if parse_source(s)[1]
                                       else wc.image_size) for s in wc.distractor_sources}},
               root / "sources.json")

    mtg_ids = [i for i in range(wc.n_mtg_pairs) if _mtg_split(cfg, i) in sel]
    man = _run_stage("mtg", _job_mtg, [(f"mtg_{i:05d}", (cfg, root, i))
                                       for i in mtg_ids], prog, n_workers, progress)
    recs = {r["id"]: r for r in man.records()}
    write_csv(_df([recs[f"mtg_{i:05d}"]["row"] for i in mtg_ids],
                  COLUMNS["mtg.csv"] + ["part"]), root / "mtg.csv")

    # edit grids and FPR galleries are evaluation-only sets: they come with the test split. The
    # graded set (ID-Sim's Subjects2k / DreamBench++ analogue) has grids of anchors of its own.
    n_grids = wc.n_grid_anchors if "test" in sel else 0
    n_graded = int(wc.n_graded_anchors) if "test" in sel and graded else 0
    stages = [("grids", "grid", n_grids)] + ([("graded", "graded", n_graded)] if n_graded else [])
    for stage, prefix, n in stages:
        man = _run_stage(stage, _job_grid, [(f"{prefix}_{i:04d}", (cfg, root, i, prefix))
                                            for i in range(n)], prog, n_workers, progress)
        recs = {r["id"]: r for r in man.records()}
        write_csv(_df([row for i in range(n) for row in recs[f"{prefix}_{i:04d}"]["rows"]],
                      COLUMNS["grids.csv"]), root / f"{stage}.csv")

    fjobs = []
    for si in range(wc.n_species if "test" in sel else 0):
        for j in range(wc.ids_per_species):
            res = _job_fpr_key(cfg, si, j)
            fjobs.append((res, (cfg, root, (si, j))))
    man = _run_stage("fpr", _job_fpr, fjobs, prog, n_workers, progress)
    recs = {r["id"]: r for r in man.records()}
    write_csv(_df([row for k, _ in fjobs for row in recs[k]["train"]], COLUMNS["fpr"]),
              root / "fpr" / "train_data.csv")
    write_csv(_df([row for k, _ in fjobs for row in recs[k]["gallery"]], COLUMNS["fpr"]),
              root / "fpr" / "gallery_data.csv")

    ids = pd.DataFrame(id_rows)
    counts = {
        "identities": {s: int((ids.split == s).sum()) for s in _SPLITS},
        "positive_images": int(ids.n_views.sum()),
        "distractor_images": int(ids.n_views.sum()) * len(wc.distractor_sources),
        "mtg_pairs": len(mtg_ids),
        "grid_images": int(n_grids * len(GRID_FACTORS) * wc.grid_levels ** 2),
        **({"graded_images": int(n_graded * len(GRID_FACTORS) * wc.grid_levels ** 2)} if n_graded else {}),
        "fpr_identities": len(fjobs),
        "fpr_images": len(fjobs) * (wc.refs_per_id + wc.gallery_per_id),
    }
    # a full build's manifest is unchanged; a split-selected one is never "complete"
    head = {"complete": True} if full else {"complete": False, "partial": True, "splits": list(sel)}
    write_json({**head, "schema_version": SCHEMA_VERSION, "profile": cfg.name,
                "seed": int(cfg.seed), "counts": counts, "fingerprint": fp, "generator": "procedural",
                "build_seconds": round(time.time() - t0, 2), "n_workers": n_workers}, man_path)
    return root
