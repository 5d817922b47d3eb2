"""The paper's workload in numbers and the projection of a full run from measured rates.

Everything here is arithmetic on the paper's stated sizes (NearID Sec. 4.1, App. D) and on rates
that ``bench_paper_scale.py`` measures; the few figures that are not stated in the paper are derived
and named as such (``derived``). Nothing here times anything.
"""
from __future__ import annotations

import math

# ---- stated by the paper (NearID Sec. 3-4.1, App. B/D, Table 5)
PAPER = dict(
    ids_total=19_386, ids_2views=12_943, ids_3views=6_433, images_total=45_215, distractors_total=316_505,
    ids_train=18_786, ids_test=500, train_sources=4, eval_sources=9, mtg_repeat=4, mtg_test_pairs=100,
    epochs=11, steps=3_350, batch=128, mask_p=(0.5, 0.2, 0.6),
    s_per_step=7.0, train_hours=6.5, eval_min_per_ckpt=10.0,
    tokens=729, dim=1152, heads=16, mlp=4304, image_size=384, layers=27, patch=14,
)
# ---- assumptions used only for the GPU projections made without a GPU (edit here; copied into results)
GPU_ASSUMED = {
    "A100-80GB": {"bf16_peak_tflops": 312.0, "backbone_mfu": 0.45, "head_mfu": 0.30},
    "H100-SXM": {"bf16_peak_tflops": 989.0, "backbone_mfu": 0.45, "head_mfu": 0.30},
}
# A published measurement to check the assumed utilisation against (not ours): timm's inference
# benchmark, vit_so400m_patch14_siglip_384, AMP, batch 512, RTX 4090 (165 dense fp16 TFLOP/s):
TIMM_4090 = {"img_per_s": 160.62, "source": "huggingface/pytorch-image-models results/"
             "benchmark-infer-amp-nchw-pt291-cu128-4090.csv @ 90cae8c5", "peak_tflops": 165.2}


def workload(p: dict = PAPER) -> dict:
    """Images, slots and (image, variant) grids of the paper's training run and of one evaluation."""
    f3 = p["ids_3views"] / p["ids_total"]
    views = 2 * (1 - f3) + 3 * f3                              # mean views per identity (2.33)
    K = p["train_sources"]
    train_pos = p["ids_train"] * views                         # positive images of the train split
    rows_epoch = p["steps"] * p["batch"] / p["epochs"]         # derived: ~3,350 steps over 11 epochs
    mtg_pairs = (rows_epoch - p["ids_train"]) / p["mtg_repeat"]    # derived: MTG rows fill the rest
    mtg_rows = mtg_pairs * p["mtg_repeat"]
    nearid_slots = p["ids_train"] * (views + K)                # anchor + other views + K distractors
    mtg_slots = mtg_rows * 4                                   # anchor, positive, 2 part edits
    slots_epoch = nearid_slots + mtg_slots
    slots_step = p["batch"] * slots_epoch / rows_epoch
    images = {"positives": train_pos, "distractors": K * train_pos, "mtg": 4 * mtg_pairs}
    used = _grids_used(p, f3, mtg_pairs)
    n_img = sum(images.values())
    test_views = p["ids_test"] * views
    eval_images = test_views * (1 + p["eval_sources"]) + 4 * p["mtg_test_pairs"]
    return {
        "mean_views": views, "train_images": images, "train_images_total": n_img,
        "mtg_pairs_derived": mtg_pairs, "rows_per_epoch": rows_epoch, "slots_per_step": slots_step,
        "slot_forwards_total": slots_step * p["steps"], "grids_both_variants": 2 * n_img,
        "grids_used_lazy": used["total"], "grids_used_by_kind": used,
        "eval_images": eval_images, "eval_grids": 2 * eval_images,     # full + FG-only
    }


def _grids_used(p: dict, f3: float, mtg_pairs: float) -> dict:
    """Expected (image, variant) grids that 11 epochs of random role-aware masking ever read (what a
    lazily filled store ends up holding)."""
    pa, pp, pd = p["mask_p"]
    E = p["epochs"]
    out = {}
    pos = dis = 0.0
    for v, frac in ((2, 1 - f3), (3, f3)):
        n_id = p["ids_train"] * frac
        # a view is the anchor with prob. 1/v per epoch, else a positive
        q_fg = pa / v + pp * (1 - 1 / v)
        q_full = (1 - pa) / v + (1 - pp) * (1 - 1 / v)
        pos += n_id * v * ((1 - (1 - q_fg) ** E) + (1 - (1 - q_full) ** E))
        # its distractors are read only when the view is the anchor
        dis += n_id * v * p["train_sources"] * ((1 - (1 - pd / v) ** E) + (1 - (1 - (1 - pd) / v) ** E))
    R = p["mtg_repeat"]        # MTG: originals are anchor R/2 and positive R/2 times an epoch, edits R times
    orig = 2 * mtg_pairs * ((1 - ((1 - pa) * (1 - pp)) ** (R / 2 * E)) + (1 - (pa * pp) ** (R / 2 * E)))
    edit = 2 * mtg_pairs * ((1 - (1 - pd) ** (R * E)) + (1 - pd ** (R * E)))
    out.update(positives=pos, distractors=dis, mtg=orig + edit, total=pos + dis + orig + edit)
    return out


def budget_curve(w: dict, grid_bytes: float, budgets_gb=(0, 25, 50, 100, 200, 400)) -> list[dict]:
    """Backbone forwards of the whole run when a disk budget is spent on the most-read grids first
    (MTG, then positives, then distractors: :func:`nearid_lib.nearid.prefill_step.train_items` order) and
    every other slot streams the backbone. ``slot_hit`` = share of slots served by the store."""
    imgs, total = w["train_images"], w["slot_forwards_total"]
    share = _slot_shares(w)
    out = []
    for gb in budgets_gb:
        left = gb * 1e9 / grid_bytes
        fw = hit = 0.0
        for k in ("mtg", "positives", "distractors"):
            grids = 2 * imgs[k]
            stored = min(grids, left)
            left -= stored
            frac = stored / grids
            fw += stored + (1 - frac) * share[k] * total       # stored once, the rest at every slot
            hit += frac * share[k]
        out.append({"budget_gb": gb, "backbone_forwards": fw, "slot_hit": hit,
                    "vs_full_store": fw / w["grids_both_variants"]})
    return out


def _slot_shares(w: dict) -> dict:
    """Share of all training slots that read each kind of image."""
    p = PAPER
    slots = {"mtg": 4 * (w["rows_per_epoch"] - p["ids_train"]),
             "positives": p["ids_train"] * w["mean_views"],          # anchor or positive: every view
             "distractors": p["ids_train"] * p["train_sources"]}
    tot = sum(slots.values())
    return {k: v / tot for k, v in slots.items()}


def gpu_rates(flops_img: float, head_flops_step: float, head_ref_flops_step: float) -> dict:
    """Backbone images/s and head seconds per step on GPUs from FLOPs at the assumed utilisation."""
    out = {}
    for name, g in GPU_ASSUMED.items():
        peak = g["bf16_peak_tflops"] * 1e12
        out[name] = {"backbone_img_s": peak * g["backbone_mfu"] / flops_img,
                     "head_fast_step_s": head_flops_step / (peak * g["head_mfu"]),
                     "head_ref_step_s": head_ref_flops_step / (peak * g["head_mfu"]), **g}
    out["timm-4090 (published)"] = {"backbone_img_s": TIMM_4090["img_per_s"],
                                    "implied_mfu": TIMM_4090["img_per_s"] * flops_img / (TIMM_4090["peak_tflops"] * 1e12)}
    return out


def project(w: dict, r: dict, grid_bytes: dict, budget_gb: float | None = None) -> dict:
    """Training time (minutes) of the paper run under each data path, from rates ``r``:

    ``backbone_img_s``; ``head_fast_step_s`` / ``head_ref_step_s`` (one optimiser step over a step's
    slots); ``read_s_per_grid`` {dtype: seconds to read + decode one grid}. No overlap between
    reading and compute is assumed (StreamFeatures reads synchronously)."""
    steps, S = PAPER["steps"], w["slots_per_step"]
    bb = r["backbone_img_s"]
    fwd_stream = w["slot_forwards_total"]
    out = {
        "authors: backbone every slot, reference head": steps * (S / bb + r["head_ref_step_s"]),
        "stream: backbone every slot (bf16), fast head": steps * (S / bb + r["head_fast_step_s"]),
        "fp16 cache of both variants, built up front": (w["grids_both_variants"] / bb
                                                       + steps * (S * r["read_s_per_grid"]["float16"] + r["head_fast_step_s"])),
        "ours: lazy int8 store, no budget": (w["grids_used_lazy"] / bb
                                             + steps * (S * r["read_s_per_grid"]["int8"] + r["head_fast_step_s"])),
    }
    if budget_gb is not None:
        c = budget_curve(w, grid_bytes["int8"], (budget_gb,))[0]
        out[f"ours: int8 store, {budget_gb:g} GB budget (most-read first)"] = (
            c["backbone_forwards"] / bb
            + steps * (S * c["slot_hit"] * r["read_s_per_grid"]["int8"] + r["head_fast_step_s"]))
    res = {k: v / 60 for k, v in out.items()}
    res["_backbone_forwards"] = {"stream": fwd_stream, "lazy_int8": w["grids_used_lazy"],
                                 "fp16_both": w["grids_both_variants"]}
    if budget_gb is not None:
        res["_backbone_forwards"]["budget_int8"] = c["backbone_forwards"]
    return res


def disk_sensitivity(w: dict, r: dict, grid_bytes: dict, gbps=(0.5, 1.0, 3.0, 6.0)) -> dict:
    """The lazy int8 store path and one evaluation at assumed disk read rates (GB/s; decoding free,
    as on a GPU), next to streaming; ``break_even_GBps``: the read rate at which reading a grid
    costs as much as computing it (below it, streaming the backbone is faster per slot)."""
    gb = grid_bytes["int8"]
    rows = []
    for g in gbps:
        rr = {**r, "read_s_per_grid": {"int8": gb / (g * 1e9), "float16": grid_bytes["float16"] / (g * 1e9)}}
        t = project(w, rr, grid_bytes)
        rows.append({"read_GBps": g, "lazy_int8_min": t["ours: lazy int8 store, no budget"],
                     "eval_min": eval_minutes(w, rr)["per_checkpoint_min"]})
    return {"rows": rows, "break_even_GBps": gb * r["backbone_img_s"] / 1e9,
            "stream_min": project(w, r, grid_bytes)["stream: backbone every slot (bf16), fast head"]}


def eval_minutes(w: dict, r: dict) -> dict:
    """One checkpoint over all sources (test split, full + FG-only) from a store of test grids:
    read + decode + head forward per grid, plus the SSR/PA arithmetic; and the one-time store build."""
    per_grid = r["read_s_per_grid"]["int8"] + r["head_eval_s_per_grid"]
    return {"per_checkpoint_min": (w["eval_grids"] * per_grid + r.get("metrics_s", 0.0)) / 60,
            "one_time_store_build_min": w["eval_grids"] / r["backbone_img_s"] / 60,
            "authors_min": PAPER["eval_min_per_ckpt"]}


def fmt_min(m: float) -> str:
    """Minutes as 'x min', 'x h' or 'x d'."""
    if not math.isfinite(m):
        return "-"
    if m < 120:
        return f"{m:.1f} min"
    if m < 48 * 60:
        return f"{m / 60:.1f} h"
    return f"{m / 1440:.0f} d"
