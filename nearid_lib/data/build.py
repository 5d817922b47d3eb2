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

import numpy as np
import pandas as pd
from PIL import Image

from ..io_utils import Manifest, atomic_write, write_csv, write_json
from ..runmeta import code_fingerprint
from ..paths import data_dir
from ..seeding import make_rng
from . import backgrounds as B
from . import world as W
from .schema import COLUMNS, SCHEMA_VERSION

__all__ = ["build_world", "parse_source", "world_fingerprint", "GRID_FACTORS", "positive_view",
           "fpr_view", "background_for", "distractor_instance", "MAX_PERTURB_TRIES", "source_splits"]

GRID_FACTORS = ("background", "viewpoint", "lighting")
_SPLITS = ("train", "val", "test")


def parse_source(name: str) -> tuple[str, bool]:
    """``"marking_hr"`` -> (``"marking"``, True): perturbation family and high-resolution flag."""
    fam, hr = (name[:-3], True) if name.endswith("_hr") else (name, False)
    if fam not in W.PERTURBATIONS:
        raise ValueError(f"distractor source {name!r}: unknown family {fam!r}; valid: "
                         f"{', '.join(W.PERTURBATIONS)} (optionally with suffix '_hr')")
    return fam, hr


# The code that decides the world's bytes: a change to any of it rebuilds the world.
WORLD_CODE = ("data/world.py", "data/identity.py", "data/perturb.py", "data/parts.py", "data/views.py",
              "data/render.py", "data/backgrounds.py", "data/build.py", "generate/procedural.py",
              "generate/base.py", "seeding.py")


def world_fingerprint(cfg) -> dict[str, Any]:
    """What determines the bytes of the world (n_workers and compression excluded): seed, world
    config, schema version and the fingerprint of the code that renders it."""
    w = asdict(cfg.world)
    for k in ("n_workers", "nearid_repo", "nearid_sources", "mtg_repo", "source"):
        w.pop(k, None)
    return {"seed": int(cfg.seed), "world": json.loads(json.dumps(w)), "schema_version": SCHEMA_VERSION,
            "code": code_fingerprint(*WORLD_CODE)}


# --------------------------------------------------------------------------- job helpers
def _df(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    """Rows as a table; an empty stage still gets its header (a readable, empty CSV)."""
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=columns)


def _save_png(root: Path, rel: str, arr: np.ndarray, level: int) -> str:
    mode = "L" if arr.ndim == 2 else "RGB"
    if arr.dtype == bool:
        arr = arr.astype(np.uint8) * 255
    im = Image.fromarray(arr, mode)
    atomic_write(root / rel, lambda p: im.save(p, format="PNG", compress_level=level))
    return rel


def _classes(wc) -> tuple[str, ...]:
    if not 1 <= wc.n_classes <= len(W.CLASSES):
        raise ValueError(f"world.n_classes={wc.n_classes}: must be in 1..{len(W.CLASSES)}")
    return W.CLASSES[:wc.n_classes]


def _background(seed: int, held_out: bool, size: int, *keys) -> np.ndarray:
    spec = B.sample_background_spec(make_rng(seed, "bg", *keys), held_out=held_out)
    return B.render_background(spec, size)


def positive_view(cfg, identity_id: str, k: int) -> dict[str, float]:
    """The pose + lighting of view ``k`` (1-based) of identity ``identity_id``: the one place
    that derives it, so generators re-rendering a distractor use exactly the builder's view."""
    wc = cfg.world
    return W.sample_view(make_rng(cfg.seed, "view", identity_id, k), tuple(wc.object_frac),
                         wc.view_strength)


MAX_PERTURB_TRIES = 20


def source_splits(wc, source: str) -> tuple[str, ...]:
    """Splits whose identities get distractors of ``source``: every split for a training source,
    ``world.unseen_source_splits`` for the others."""
    return _SPLITS if source in wc.train_sources else tuple(wc.unseen_source_splits)


def distractor_instance(cfg, ident: dict[str, Any], source: str, identity_id: str, k: int,
                        view: dict[str, float], ref_layer: dict[str, Any] | None = None
                        ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The near-identity instance of ``source`` for view ``k`` of an identity and its object layer
    (rendered at the source's resolution): the one derivation shared by the builder and by
    generators that re-render a source. The perturbation is redrawn (same rng stream, so the
    result is deterministic) until it changes at least ``world.min_visible_px`` pixels of the view
    at the stored resolution: a distractor nobody could tell apart measures nothing."""
    wc = cfg.world
    fam, hr = parse_source(source)
    S = int(wc.image_size)
    size = int(wc.source_resolutions[-1]) if hr else S
    ref = ref_layer if ref_layer is not None else W.render_object(ident, view, S, with_parts=False)
    need = W.min_visible_px(S)
    rng = make_rng(cfg.seed, "perturb", source, identity_id, k)
    for _ in range(MAX_PERTURB_TRIES):
        d_ident, _ = W.perturb(ident, fam, rng)
        layer = W.render_object(d_ident, view, size, with_parts=False)
        if W.visible_change(ref, layer) >= need:
            return d_ident, layer
    raise RuntimeError(f"{identity_id} view {k} source {source}: no visible {fam!r} perturbation in "
                       f"{MAX_PERTURB_TRIES} draws (>= {need} changed pixels at {S} px)")


def fpr_view(cfg, name: str, k: int) -> dict[str, float]:
    """The view of the k-th (0-based; references first) image of FPR identity ``name``."""
    wc = cfg.world
    return W.sample_view(make_rng(cfg.seed, "fpr_view", name, k), tuple(wc.object_frac),
                         wc.view_strength)


def background_for(cfg, held_out: bool, *keys) -> np.ndarray:
    """The float RGB background the builder draws for ``keys`` (e.g. ``(identity_id, k)``)."""
    return _background(cfg.seed, held_out, cfg.world.image_size, *keys)


def _identity_list(cfg) -> list[dict[str, Any]]:
    wc = cfg.world
    classes = _classes(wc)
    out = []
    for split, n in zip(_SPLITS, (wc.n_train_ids, wc.n_val_ids, wc.n_test_ids)):
        for i in range(n):
            iid = f"{split}_{i:05d}"
            rng = make_rng(cfg.seed, "identity", iid)
            # Round-robin classes keep them balanced in every split (small smoke splits too).
            cls = classes[i % len(classes)]
            three = len(wc.views_per_id) > 1 and rng.random() < wc.p_three_views
            n_views = max(wc.views_per_id) if three else min(wc.views_per_id)
            out.append({"id": iid, "split": split, "class_name": cls, "n_views": int(n_views),
                        "params": W.sample_identity(rng, cls)})
    return out


# --------------------------------------------------------------------------- jobs
def _job_identity(args) -> tuple[str, dict]:
    cfg, root, rec = args
    wc, seed, S, lvl = cfg.world, cfg.seed, cfg.world.image_size, cfg.world.png_compress
    from ..generate.base import get_backend

    fill = get_backend("procedural")
    iid, split, ident = rec["id"], rec["split"], rec["params"]
    held = bool(wc.held_out_backgrounds and split == "test")
    hr_size = int(wc.source_resolutions[-1])
    pos = {"id": iid, "split": split}
    dist: dict[str, dict] = {s: {"id": iid, "split": split} for s in wc.distractor_sources}
    for k in range(1, 4):
        if k > rec["n_views"]:
            pos[f"img{k}"] = pos[f"mask{k}"] = ""
            for s in dist:
                dist[s][f"nimg{k}"] = ""
            continue
        view = positive_view(cfg, iid, k)
        bg = _background(seed, held, S, iid, k)
        ref = W.render_object(ident, view, S, with_parts=False)
        img, mask = W.composite(bg, ref), ref["alpha"] > 0      # == W.render_scene(ident, view, bg)
        img8 = W.to_uint8(img)
        pos[f"img{k}"] = _save_png(root, f"pos/{iid}_{k}.png", img8, lvl)
        pos[f"mask{k}"] = _save_png(root, f"mask/{iid}_{k}.png", mask, lvl)
        img_pil = Image.fromarray(img8)
        mask_pil = Image.fromarray(mask.astype(np.uint8) * 255)
        for src in wc.distractor_sources:
            if split not in source_splits(wc, src):
                dist[src][f"nimg{k}"] = ""
                continue
            fam, hr = parse_source(src)
            d_ident, layer = distractor_instance(cfg, ident, src, iid, k, view, ref)
            fseed = int(make_rng(seed, "fill", src, iid, k).integers(2**31))
            if hr:
                # The generator works at a higher resolution: upsample the view, fill there,
                # Lanczos back down (outside the mask this costs a little resampling blur,
                # like the paper's *_1024 sources).
                big = img_pil.resize((hr_size, hr_size), Image.LANCZOS)
                bmask = mask_pil.resize((hr_size, hr_size), Image.NEAREST)
                out = fill.fill(big, bmask, W.describe(d_ident), fseed, instance=layer,
                                where=f"{iid} view {k} source {src}")
                out8 = np.asarray(out.resize((S, S), Image.LANCZOS))
            else:
                out8 = np.asarray(fill.fill(img_pil, mask_pil, W.describe(d_ident), fseed,
                                            instance=layer, where=f"{iid} view {k} source {src}"))
            dist[src][f"nimg{k}"] = _save_png(root, f"dist/{src}/{iid}_{k}.png", out8, lvl)
    ident_row = {"id": iid, "split": split, "class_name": rec["class_name"],
                 "description": W.describe(ident), "n_views": rec["n_views"]}
    return iid, {"identity": ident_row, "positives": pos, "distractors": dist, "params": ident}


def _mtg_split(cfg, i: int) -> str:
    fr = np.asarray(cfg.world.mtg_split, float)
    cum = np.cumsum(fr / fr.sum()) * cfg.world.n_mtg_pairs
    return _SPLITS[int(np.searchsorted(cum, i, side="right"))]


def _job_mtg(args) -> tuple[str, dict]:
    cfg, root, i = args
    wc, seed, S, lvl = cfg.world, cfg.seed, cfg.world.image_size, cfg.world.png_compress
    pid = f"mtg_{i:05d}"
    split = _mtg_split(cfg, i)
    rng = make_rng(seed, "mtg", pid)
    classes = _classes(wc)
    cls = classes[i % len(classes)]
    ident = W.sample_identity(rng, cls)
    held = bool(wc.held_out_backgrounds and split == "test")
    views = [W.sample_view(make_rng(seed, "mtg_view", pid, k), tuple(wc.object_frac),
                           wc.view_strength) for k in (1, 2)]
    bgs = [_background(seed, held, S, pid, k) for k in (1, 2)]
    layers = [W.render_object(ident, v, S) for v in views]
    # A part visible in both views (>= 1% of the object), so both oracles are informative.
    parts = W.editable_parts(ident)
    order = [parts[j] for j in rng.permutation(len(parts))]
    part = next((p for p in order if all(
        L["parts"][p].sum() >= 0.01 * (L["alpha"] > 0).sum() for L in layers)), order[0])
    edited, part = W.part_edit(ident, rng, part)
    row = {"pair_id": pid, "split": split, "class_name": cls, "part": part}
    for k, (v, bg, L) in enumerate(zip(views, bgs, layers), start=1):
        obj = L["alpha"] > 0
        orig = W.to_uint8(W.composite(bg, L))
        # In-place edit: re-rendering the edited identity under the same view changes pixels only
        # inside the part mask (geometry is untouched), so the oracle below is exact.
        ed = W.to_uint8(W.composite(bg, W.render_object(edited, v, S, with_parts=False)))
        pm = L["parts"][part] & obj
        row[f"image_{k}_original"] = _save_png(root, f"mtg/{pid}_{k}_original.png", orig, lvl)
        row[f"image_{k}_inpainted"] = _save_png(root, f"mtg/{pid}_{k}_inpainted.png", ed, lvl)
        row[f"image_{k}_object_mask"] = _save_png(root, f"mtg/{pid}_{k}_object_mask.png", obj, lvl)
        row[f"image_{k}_part_mask"] = _save_png(root, f"mtg/{pid}_{k}_part_mask.png", pm, lvl)
        row[f"oracle_{k}"] = float(1.0 - pm.sum() / max(int(obj.sum()), 1))
    return pid, {"row": row}


def _job_grid(args) -> tuple[str, dict]:
    cfg, root, i = args
    wc, seed, S, lvl = cfg.world, cfg.seed, cfg.world.image_size, cfg.world.png_compress
    aid = f"grid_{i:04d}"
    rng = make_rng(seed, "grid", aid)
    classes = _classes(wc)
    cls = classes[i % len(classes)]
    anchor = W.sample_identity(rng, cls)
    target = W.sample_identity(rng, cls)
    held = bool(wc.held_out_backgrounds)
    v0 = W.sample_view(make_rng(seed, "grid_view", aid, 0), tuple(wc.object_frac), strength=0.3)
    far = W.sample_view(make_rng(seed, "grid_view", aid, 1), tuple(wc.object_frac))
    far["rot"] = round(v0["rot"] + (0.9 if v0["rot"] <= 0 else -0.9), 4)
    far["flip"] = not v0["flip"]
    far["persp"] = round(0.3 if v0["persp"] <= 0 else -0.3, 4)
    lit = dict(v0, gain=round(v0["gain"] * 0.6, 4), contrast=0.65, temp=0.3 if v0["temp"] < 0 else -0.3,
               shade=0.55)
    bg0 = _background(seed, held, S, aid, 0)
    bg1 = _background(seed, held, S, aid, 1)
    L = wc.grid_levels
    ts = [j / (L - 1) if L > 1 else 0.0 for j in range(L)]
    rows = []
    for gi, grid in enumerate(GRID_FACTORS):
        for a, ti in enumerate(ts):
            ident = W.perturb_strength(anchor, target, ti)
            for b, tf in enumerate(ts):
                view, bg = v0, bg0
                if grid == "background":
                    bg = (1 - tf) * bg0 + tf * bg1
                elif grid == "viewpoint":
                    view = W.interpolate_view(v0, far, tf, ("rot", "sx", "sy", "persp", "flip",
                                                             "cx", "cy", "scale"))
                else:
                    view = W.interpolate_view(v0, lit, tf, ("gain", "contrast", "temp", "shade"))
                img, mask, _ = W.render_scene(ident, view, bg)
                base = f"grids/{aid}/{grid}_{a}_{b}"
                rows.append({"anchor_id": aid, "split": "test", "grid": grid, "identity_level": a,
                             "factor_level": b, "identity_change": round(ti, 6),
                             "factor_change": round(tf, 6),
                             "path": _save_png(root, base + ".png", W.to_uint8(img), lvl),
                             "mask": _save_png(root, base + "_mask.png", mask, lvl)})
    return aid, {"rows": rows}


def _job_fpr(args) -> tuple[str, dict]:
    cfg, root, (si, j) = args
    wc, seed, S, lvl = cfg.world, cfg.seed, cfg.world.image_size, cfg.world.png_compress
    species = _classes(wc)[si % len(_classes(wc))] + (f"{si // len(_classes(wc))}" if si >= len(_classes(wc)) else "")
    cls = _classes(wc)[si % len(_classes(wc))]
    name = f"fpr_{species}_{j:03d}"
    # Fine-grained species: identities are halfway between a species prototype and a random
    # identity of its class, so they share the prototype's look and differ in detail.
    proto = W.sample_identity(make_rng(seed, "fpr_species", species), cls)
    ident = W.perturb_strength(proto, W.sample_identity(make_rng(seed, "fpr_id", name), cls), 0.55)
    held = bool(wc.held_out_backgrounds)
    rows = {"train": [], "gallery": []}
    n_tot = wc.refs_per_id + wc.gallery_per_id
    ref0 = ""
    for k in range(n_tot):
        kind = "train" if k < wc.refs_per_id else "gallery"
        view = fpr_view(cfg, name, k)
        img, mask, _ = W.render_scene(ident, view, _background(seed, held, S, name, k))
        tag = "ref" if kind == "train" else "gal"
        p = _save_png(root, f"fpr/img/{name}_{tag}{k}.png", W.to_uint8(img), lvl)
        m = _save_png(root, f"fpr/mask/{name}_{tag}{k}.png", mask, lvl)
        ref0 = ref0 or p
        rows[kind].append({"name": name, "species": species, "file_path": p, "ref_path": ref0,
                           "mask_path": m})
    return name, rows


# --------------------------------------------------------------------------- driver
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


def build_world(cfg, root: str | os.PathLike | None = None, n_workers: int | None = None,
                progress: bool = True, force: bool = False) -> Path:
    """Build (or finish building) the NearID-mini world for profile ``cfg`` into ``root``
    (default ``data_dir(cfg.name) / "nearid"``) and return ``root``.

    A complete dataset with the same world fingerprint is returned untouched (unless ``force``).
    ``n_workers`` defaults to ``cfg.world.n_workers``; the output bytes do not depend on it."""
    root = Path(root) if root is not None else data_dir(cfg.name) / "nearid"
    wc = cfg.world
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
            if m.get("complete") and m.get("fingerprint") == fp:
                return root
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

    idents = _identity_list(cfg)
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

    man = _run_stage("mtg", _job_mtg, [(f"mtg_{i:05d}", (cfg, root, i))
                                       for i in range(wc.n_mtg_pairs)], prog, n_workers, progress)
    recs = {r["id"]: r for r in man.records()}
    write_csv(_df([recs[f"mtg_{i:05d}"]["row"] for i in range(wc.n_mtg_pairs)],
                  COLUMNS["mtg.csv"] + ["part"]), root / "mtg.csv")

    man = _run_stage("grids", _job_grid, [(f"grid_{i:04d}", (cfg, root, i))
                                          for i in range(wc.n_grid_anchors)], prog, n_workers, progress)
    recs = {r["id"]: r for r in man.records()}
    write_csv(_df([row for i in range(wc.n_grid_anchors) for row in recs[f"grid_{i:04d}"]["rows"]],
                  COLUMNS["grids.csv"]), root / "grids.csv")

    fjobs = []
    for si in range(wc.n_species):
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
        "mtg_pairs": int(wc.n_mtg_pairs),
        "grid_images": int(wc.n_grid_anchors * len(GRID_FACTORS) * wc.grid_levels ** 2),
        "fpr_identities": len(fjobs),
        "fpr_images": len(fjobs) * (wc.refs_per_id + wc.gallery_per_id),
    }
    write_json({"complete": True, "schema_version": SCHEMA_VERSION, "profile": cfg.name,
                "seed": int(cfg.seed), "counts": counts, "fingerprint": fp, "generator": "procedural",
                "build_seconds": round(time.time() - t0, 2), "n_workers": n_workers}, man_path)
    return root


def _job_fpr_key(cfg, si: int, j: int) -> str:
    classes = _classes(cfg.world)
    species = classes[si % len(classes)] + (f"{si // len(classes)}" if si >= len(classes) else "")
    return f"fpr_{species}_{j:03d}"
