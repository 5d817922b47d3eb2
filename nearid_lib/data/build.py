"""Build the NearID-mini world into the on-disk schema (see ``nearid_lib.data.schema``).

Determinism: every item draws its randomness from ``make_rng(seed, <stage>, <item id>, ...)``,
never from the order of work, so the bytes written do not depend on ``n_workers`` or on how
many times the build was interrupted and resumed.

Atomicity / resumability: each job (one identity with its views and distractors, one MTG pair,
one grid anchor, one FPR gallery subject) writes its files atomically and then appends one line to a
progress log (``_progress/<stage>.jsonl``, a :class:`~nearid_lib.io_utils.Manifest`) holding the
table rows it produced. A restart skips logged jobs. Tables are written from the logs at the
end and ``manifest.json`` last; it is deleted before any work starts, so a partially written
dataset never looks complete. A build whose world config differs from the one on disk starts
from scratch (the old progress is discarded), except when only the FPR galleries' settings or
code differ (:data:`GALLERY_KEYS`, :mod:`.galleries`): then only the galleries are rendered again.

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
from tqdm.auto import tqdm

from ..io_utils import Manifest, atomic_write, write_csv, write_json
from ..paths import data_dir
from ..runtime.runmeta import code_fingerprint
from . import backgrounds as B
from .draws import (
    WORLD_SPLITS,
    MAX_PERTURB_TRIES,
    identity_list,
    background_for,
    distractor_instance,
    parse_source,
    positive_view,
    source_splits,
)
from .galleries import fpr_view, gallery_items, gallery_job
from .jobs import GRID_FACTORS, job_grid, job_identity, job_mtg, mtg_split_of
from .schema import COLUMNS, SCHEMA_VERSION

__all__ = ["build_world", "manifest_splits", "parse_source", "world_fingerprint", "GRID_FACTORS", "positive_view",
           "fpr_view", "background_for", "distractor_instance", "MAX_PERTURB_TRIES", "source_splits"]

# The code that decides the world's bytes: a change to any of it rebuilds the world.
WORLD_CODE = ("data/world.py", "data/identity.py", "data/perturb.py", "data/parts.py", "data/views.py",
              "data/render.py", "data/backgrounds.py", "data/build.py", "data/draws.py", "data/jobs.py",
              "generate/procedural.py", "generate/base.py", "runtime/seeding.py")
# The FPR galleries' bytes also follow their own module; a change there rebuilds the galleries only.
GALLERY_CODE = ("data/galleries.py", *WORLD_CODE)
# world.* fields that only the FPR galleries read (nearid_lib.data.galleries)
GALLERY_KEYS = ("n_species", "ids_per_species", "refs_per_id", "gallery_per_id", "gallery_dup_p", "gallery_spread",
                "gallery_view_strength", "gallery_object_frac", "gallery_bg_salience", "gallery_bg_blur")


def world_fingerprint(cfg) -> dict[str, Any]:
    """What determines the bytes of the world (n_workers and compression excluded): seed, world
    config, schema version and the fingerprint of the code that renders it; the FPR galleries'
    own settings and code under ``"galleries"`` (:func:`build_world` re-renders only the galleries
    when only that part changes)."""
    w = asdict(cfg.world)
    for k in ("n_workers", "nearid_repo", "nearid_sources", "mtg_repo", "source", "released_masks"):
        w.pop(k, None)
    gal = {k: w.pop(k) for k in GALLERY_KEYS}
    return {"seed": int(cfg.seed), "world": json.loads(json.dumps(w)), "schema_version": SCHEMA_VERSION,
            "code": code_fingerprint(*WORLD_CODE),
            "galleries": {"world": json.loads(json.dumps(gal)), "code": code_fingerprint(*GALLERY_CODE)}}


def _without_galleries(fp: dict | None) -> dict | None:
    return None if fp is None else {k: v for k, v in fp.items() if k != "galleries"}


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
    bar = tqdm(total=len(jobs), initial=len(jobs) - len(todo), desc=f"world/{name}", disable=not progress)
    if n_workers > 1 and len(todo) > 4:
        # fork: workers inherit the loaded photo pool; results are seeded per item, so the
        # completion order does not matter.
        ctx = mp.get_context("fork")
        with ctx.Pool(n_workers) as pool:
            for key, res in pool.imap_unordered(fn, todo, chunksize=2):
                man.add(key, **res)
                if bar is not None:
                    bar.update(1)
    else:
        for a in todo:
            key, res = fn(a)
            man.add(key, **res)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return man


def _selected_splits(splits) -> tuple[str, ...]:
    """``splits`` in the canonical order (train, val, test); None = all three."""
    if splits is None:
        return WORLD_SPLITS
    splits = (splits,) if isinstance(splits, str) else tuple(splits)
    bad = sorted(set(splits) - set(WORLD_SPLITS))
    if bad or not splits:
        raise ValueError(f"build_world: splits {list(splits)}: unknown {bad}; choose from {', '.join(WORLD_SPLITS)}")
    return tuple(s for s in WORLD_SPLITS if s in splits)


def manifest_splits(manifest: dict) -> tuple[str, ...]:
    """The splits a dataset's manifest says it holds: all three for a complete dataset, the listed
    ones for a finished split-selected build (``partial``), none otherwise."""
    if manifest.get("complete"):
        return WORLD_SPLITS
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
    full = sel == WORLD_SPLITS
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
                full = sel == WORLD_SPLITS
                graded = graded or has_graded or full
        except json.JSONDecodeError:
            pass
    # From here on the dataset is incomplete: remove the marker first.
    if man_path.exists():
        man_path.unlink()
    old_fp = json.loads(fp_path.read_text()) if fp_path.exists() else None
    if force or _without_galleries(old_fp) != _without_galleries(fp):
        for sub in ("_progress", "pos", "mask", "dist", "mtg", "grids", "fpr", "distractors"):
            shutil.rmtree(root / sub, ignore_errors=True)
    elif old_fp != fp:
        # only the galleries' settings or code changed: every NearID item stays as rendered
        shutil.rmtree(root / "fpr", ignore_errors=True)
        (root / "_progress" / "fpr.jsonl").unlink(missing_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    write_json(fp, fp_path)
    prog = root / "_progress"
    n_workers = int(n_workers if n_workers is not None else wc.n_workers)
    t0 = time.time()
    B.photo_pool()                                   # load once before forking

    idents = [r for r in identity_list(cfg) if r["split"] in sel]
    man = _run_stage("identities", job_identity,
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

    mtg_ids = [i for i in range(wc.n_mtg_pairs) if mtg_split_of(cfg, i) in sel]
    man = _run_stage("mtg", job_mtg, [(f"mtg_{i:05d}", (cfg, root, i))
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
        man = _run_stage(stage, job_grid, [(f"{prefix}_{i:04d}", (cfg, root, i, prefix))
                                            for i in range(n)], prog, n_workers, progress)
        recs = {r["id"]: r for r in man.records()}
        write_csv(_df([row for i in range(n) for row in recs[f"{prefix}_{i:04d}"]["rows"]],
                      COLUMNS["grids.csv"]), root / f"{stage}.csv")

    fjobs = [(name, (cfg, root, (name, sp))) for name, sp in (gallery_items(cfg, "test") if "test" in sel else [])]
    man = _run_stage("fpr", gallery_job, fjobs, prog, n_workers, progress)
    recs = {r["id"]: r for r in man.records()}
    write_csv(_df([row for k, _ in fjobs for row in recs[k]["train"]], COLUMNS["fpr"]),
              root / "fpr" / "train_data.csv")
    write_csv(_df([row for k, _ in fjobs for row in recs[k]["gallery"]], COLUMNS["fpr"]),
              root / "fpr" / "gallery_data.csv")

    ids = pd.DataFrame(id_rows)
    counts = {
        "identities": {s: int((ids.split == s).sum()) for s in WORLD_SPLITS},
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
