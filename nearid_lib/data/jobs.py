"""The world builder's jobs: one identity with its views and distractors, one MTG pair, one
grid anchor, one FPR identity. Each job writes its images atomically and returns its key and the
table rows it produced (the driver, ``nearid_lib.data.build``, logs them for resuming).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from ..io_utils import atomic_write
from ..runtime.seeding import make_rng
from . import world as W
from .draws import (
    WORLD_SPLITS,
    draw_background,
    world_classes,
    distractor_instance,
    parse_source,
    positive_view,
    reshoot_background,
    reshoot_view,
    source_splits,
    view_background,
)
from .generators import fill_backend

__all__ = ["GRID_FACTORS"]

GRID_FACTORS = ("background", "viewpoint", "lighting")


def save_png(root: Path, rel: str, arr: np.ndarray, level: int) -> str:
    mode = "L" if arr.ndim == 2 else "RGB"
    if arr.dtype == bool:
        arr = arr.astype(np.uint8) * 255
    im = Image.fromarray(arr, mode)
    atomic_write(root / rel, lambda p: im.save(p, format="PNG", compress_level=level))
    return rel


# --------------------------------------------------------------------------- jobs
def job_identity(args) -> tuple[str, dict]:
    cfg, root, rec = args
    wc, seed, S, lvl = cfg.world, cfg.seed, cfg.world.image_size, cfg.world.png_compress
    fills = {s: fill_backend(s) for s in wc.distractor_sources}     # each source's generator look
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
        bg = view_background(cfg, held, iid, k)
        ref = W.render_object(ident, view, S, with_parts=False)
        img, mask = W.composite(bg, ref), ref["alpha"] > 0      # == W.render_scene(ident, view, bg)
        img8 = W.to_uint8(img)
        pos[f"img{k}"] = save_png(root, f"pos/{iid}_{k}.png", img8, lvl)
        pos[f"mask{k}"] = save_png(root, f"mask/{iid}_{k}.png", mask, lvl)
        img_pil = Image.fromarray(img8)
        mask_pil = Image.fromarray(mask.astype(np.uint8) * 255)
        big = None                                   # the view at hr_size, made once for its _hr sources
        for src in wc.distractor_sources:
            if split not in source_splits(wc, src):
                dist[src][f"nimg{k}"] = ""
                continue
            fam, hr = parse_source(src)
            fill = fills[src]
            d_ident, layer = distractor_instance(cfg, ident, src, iid, k, view, ref)
            fseed = int(make_rng(seed, "fill", src, iid, k).integers(2**31))
            if hr:
                # The generator works at a higher resolution: upsample the view, fill there,
                # Lanczos back down (outside the mask this costs a little resampling blur,
                # like the paper's *_1024 sources).
                if big is None:
                    big = img_pil.resize((hr_size, hr_size), Image.LANCZOS)
                    bmask = mask_pil.resize((hr_size, hr_size), Image.NEAREST)
                out = fill.fill(big, bmask, W.describe(d_ident), fseed, instance=layer,
                                where=f"{iid} view {k} source {src}")
                out8 = np.asarray(out.resize((S, S), Image.LANCZOS))
            else:
                out8 = np.asarray(fill.fill(img_pil, mask_pil, W.describe(d_ident), fseed,
                                            instance=layer, where=f"{iid} view {k} source {src}"))
            dist[src][f"nimg{k}"] = save_png(root, f"dist/{src}/{iid}_{k}.png", out8, lvl)
    ident_row = {"id": iid, "split": split, "class_name": rec["class_name"],
                 "description": W.describe(ident), "n_views": rec["n_views"], "reshoot": ""}
    if split in wc.scene_reshoots:
        shot = W.composite(reshoot_background(cfg, held, iid),
                           W.render_object(ident, reshoot_view(cfg, iid), S, with_parts=False))
        ident_row["reshoot"] = save_png(root, f"reshoot/{iid}.png", W.to_uint8(shot), lvl)
    return iid, {"identity": ident_row, "positives": pos, "distractors": dist, "params": ident}


def mtg_split_of(cfg, i: int) -> str:
    fr = np.asarray(cfg.world.mtg_split, float)
    cum = np.cumsum(fr / fr.sum()) * cfg.world.n_mtg_pairs
    return WORLD_SPLITS[int(np.searchsorted(cum, i, side="right"))]


def job_mtg(args) -> tuple[str, dict]:
    cfg, root, i = args
    wc, seed, S, lvl = cfg.world, cfg.seed, cfg.world.image_size, cfg.world.png_compress
    pid = f"mtg_{i:05d}"
    split = mtg_split_of(cfg, i)
    rng = make_rng(seed, "mtg", pid)
    classes = world_classes(wc)
    cls = classes[i % len(classes)]
    ident = W.sample_identity(rng, cls)
    held = bool(wc.held_out_backgrounds and split == "test")
    views = [W.sample_view(make_rng(seed, "mtg_view", pid, k), tuple(wc.object_frac),
                           wc.view_strength) for k in (1, 2)]
    bgs = [draw_background(cfg, held, pid, k) for k in (1, 2)]
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
        row[f"image_{k}_original"] = save_png(root, f"mtg/{pid}_{k}_original.png", orig, lvl)
        row[f"image_{k}_inpainted"] = save_png(root, f"mtg/{pid}_{k}_inpainted.png", ed, lvl)
        row[f"image_{k}_object_mask"] = save_png(root, f"mtg/{pid}_{k}_object_mask.png", obj, lvl)
        row[f"image_{k}_part_mask"] = save_png(root, f"mtg/{pid}_{k}_part_mask.png", pm, lvl)
        row[f"oracle_{k}"] = float(1.0 - pm.sum() / max(int(obj.sum()), 1))
    return pid, {"row": row}


def job_grid(args) -> tuple[str, dict]:
    cfg, root, i, prefix = args
    wc, seed, S, lvl = cfg.world, cfg.seed, cfg.world.image_size, cfg.world.png_compress
    aid = f"{prefix}_{i:04d}"
    rng = make_rng(seed, "grid", aid)
    classes = world_classes(wc)
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
    bg0 = draw_background(cfg, held, aid, 0)
    bg1 = draw_background(cfg, held, aid, 1)
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
                             "path": save_png(root, base + ".png", W.to_uint8(img), lvl),
                             "mask": save_png(root, base + "_mask.png", mask, lvl)})
    return aid, {"rows": rows}
