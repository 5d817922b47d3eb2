"""Calibrate the mini world on the **frozen** encoder (issue 23, item 1): build the **val** split of
the procedural world with one or more world levers changed, score the frozen EfficientNet-Lite0
GAP baseline (and a random-init network of the same class, the chance reference) on it, and
compare with the targets fixed before any head result:

==========================  ============================  ======================
frozen baseline, val split  target (paper's frozen SigLIP2)  source
==========================  ============================  ======================
NearID SSR, full image      30.7 +- 5                     NearID Table 1
NearID PA, full image       48.8 +- 8                     NearID Table 1
NearID SSR, FG only         64.7 +- 8                     NearID Table 7
MTG SSR                     <= 5                          NearID Table 1
MTG M-O                     near 0.18                     NearID Table 1
==========================  ============================  ======================

Levers are properties of the world only (``world.*``: pose and lighting change between views,
object size, distractor and part-edit magnitude, background mix), never of a head or a loss. No
head is trained here. NearID SSR/PA pool the Table 1 sources (training + unseen fill-based; the
structure-conditioned ``edges`` sources are not built). Each lever's world is built into its own
folder (``build/mini/calibration/<lever>``) and its scores appended to the results table, so an
interrupted sweep resumes; finished levers are skipped.

    .venv/bin/python benchmarks/calibrate_world.py --levers default,frac_large
    .venv/bin/python benchmarks/calibrate_world.py --list

Writes ``benchmarks/results/calibrate_world.{csv,md}``.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd

from nearid_lib.config import get_profile, with_overrides
from nearid_lib.data.build import build_world
from nearid_lib.data.schema import load_nearid
from nearid_lib.models.registry import load_backbone
from nearid_lib.features import Embedder
from nearid_lib.nearid.evaluate import evaluate_encoder, source_groups, summary_row
from nearid_lib.nearid.scorers import EmbeddingBenchEncoder
from nearid_lib.nearid.tables import FROZEN_SOURCE_RANGE
from nearid_lib.paths import out_dir
from lever_cli import lever_args  # benchmarks/, beside this script

# Table 1's sources of the mini profile (training + unseen fill generators; issue 38 replaced the
# earlier one-family sources "recolor" ... "hard" by fill generators, nearid_lib.data.generators).
_MINI = get_profile("mini").world
MAIN_SOURCES = tuple(source_groups(_MINI.distractor_sources, _MINI.train_sources)["main"])

# The world before calibration; every lever below but "mini" changes it (the mini profile's world
# is lever A since the calibration).
BEFORE = {"world.shared_scene_p": 0.0, "world.bg_blur": 0.0, "world.object_frac": (0.5, 0.62),
          "world.view_strength": 0.6, "world.distractor_mag": 1.0}

# name -> (description, world overrides on BEFORE)
LEVERS: dict[str, tuple[str, dict]] = {
    "mini": ("the mini profile's world as it is now (not on BEFORE)", {}),
    "mini_generators": ("the mini world with fill-generator sources (issue 38; not on BEFORE)",
                        {"world.fill_kinds": ("recolor", "pattern", "marking", "shape"), "world.bg_salience": 0.3}),
    "mini_generators_hard": ("fill generators that also draw one-attribute ('hard') edits (not on BEFORE)",
                             {"world.fill_kinds": ("recolor", "pattern", "marking", "shape", "hard"),
                              "world.bg_salience": 0.3}),
    # PA 57.0 missed its band (<= 56.8) by 0.2: more salient backgrounds fool the frozen encoder more
    # (the P-levers); the smallest step that meets every target is taken
    "mini_generators_hard_bg0.35": ("as mini_generators_hard, backgrounds at 35% of their contrast (not on BEFORE)",
                                    {"world.fill_kinds": ("recolor", "pattern", "marking", "shape", "hard"),
                                     "world.bg_salience": 0.35}),
    "mini_generators_hard_bg0.4": ("as mini_generators_hard, backgrounds at 40% of their contrast (not on BEFORE)",
                                   {"world.fill_kinds": ("recolor", "pattern", "marking", "shape", "hard"),
                                    "world.bg_salience": 0.4}),
    # The levers above had the "grainy" look (SOURCE_RANGE); these have its replacement "lifted".
    # Rule, declared before they were scored: the first, in this order (smallest change from
    # mini_generators_hard_bg0.35 first), that meets every target and SOURCE_RANGE.
    "mini_gen2_hard_bg0.35": ("lifted look; one-attribute edits among the kinds, 35% contrast (not on BEFORE)",
                         {"world.fill_kinds": ("recolor", "pattern", "marking", "shape", "hard"),
                          "world.bg_salience": 0.35}),
    "mini_gen2_bg0.35": ("lifted look; recolor, pattern, marking, shape; 35% contrast (not on BEFORE)",
                    {"world.fill_kinds": ("recolor", "pattern", "marking", "shape"), "world.bg_salience": 0.35}),
    "mini_gen2_bg0.3": ("lifted look; recolor, pattern, marking, shape; 30% contrast (not on BEFORE)",
                   {"world.fill_kinds": ("recolor", "pattern", "marking", "shape"), "world.bg_salience": 0.3}),
    # None of the three met every target (bg0.35: SSR 25.3, 0.4 below its band; bg0.3: FG-only 73.0,
    # 0.3 above). Next, declared before scoring: smaller colour shifts lower the object-only cue;
    # the first of these two that meets everything, else the closest mini_gen2 lever (largest miss
    # as a share of its band's half-width).
    "mini_gen2_bg0.3_mag0.7": ("as mini_gen2_bg0.3 with 0.7x the distractors' colour shifts (not on BEFORE)",
                               {"world.fill_kinds": ("recolor", "pattern", "marking", "shape"),
                                "world.bg_salience": 0.3, "world.distractor_mag": 0.7}),
    "mini_gen2_bg0.25_mag0.7": ("as mini_gen2_bg0.3_mag0.7, backgrounds at 25% contrast (not on BEFORE)",
                                {"world.fill_kinds": ("recolor", "pattern", "marking", "shape"),
                                 "world.bg_salience": 0.25, "world.distractor_mag": 0.7}),
    "before": ("the mini world before calibration", {}),
    "views_0.3": ("half the pose/lighting change between views", {"world.view_strength": 0.3}),
    "frac_0.7": ("larger objects (70-85% of the image side)", {"world.object_frac": (0.7, 0.85)}),
    "frac_0.7_views_0.3": ("larger objects + half the view change",
                           {"world.object_frac": (0.7, 0.85), "world.view_strength": 0.3}),
    "frac_0.6": ("objects 60-75% of the image side", {"world.object_frac": (0.6, 0.75)}),
    "frac_0.6_views_0.4": ("objects 60-75% + view strength 0.4",
                           {"world.object_frac": (0.6, 0.75), "world.view_strength": 0.4}),
    "frac_0.7_views_0.4": ("objects 70-85% + view strength 0.4",
                           {"world.object_frac": (0.7, 0.85), "world.view_strength": 0.4}),
    "blur_0.01": ("backgrounds out of focus (sigma 1% of the side)", {"world.bg_blur": 0.01}),
    "blur_0.02_views_0.3": ("backgrounds out of focus (sigma 2%) + half the view change",
                            {"world.bg_blur": 0.02, "world.view_strength": 0.3}),
    "blur_0.02_frac_0.7_views_0.3": ("out of focus (2%) + larger objects + half the view change",
                                     {"world.bg_blur": 0.02, "world.object_frac": (0.7, 0.85),
                                      "world.view_strength": 0.3}),
    "scene_0.5_views_0.3": ("half the later views in view 1's scene + half the view change",
                            {"world.shared_scene_p": 0.5, "world.view_strength": 0.3}),
    "scene_0.7_views_0.2": ("70% of later views in view 1's scene + view strength 0.2",
                            {"world.shared_scene_p": 0.7, "world.view_strength": 0.2}),
    "A_scene_0.8_blur_frac_views_0.25": ("80% shared scenes, out of focus (2%), objects 70-85%, views 0.25",
                                         {"world.shared_scene_p": 0.8, "world.bg_blur": 0.02,
                                          "world.object_frac": (0.7, 0.85), "world.view_strength": 0.25}),
    "B_scene_1.0_views_0.2": ("every later view in view 1's scene, view strength 0.2",
                              {"world.shared_scene_p": 1.0, "world.view_strength": 0.2}),
    "C_A_mag_1.5": ("A with 1.5x the distractors' colour shifts",
                    {"world.shared_scene_p": 0.8, "world.bg_blur": 0.02, "world.object_frac": (0.7, 0.85),
                     "world.view_strength": 0.25, "world.distractor_mag": 1.5}),
}

# Issue 38: the protocol kept (NearID Sec. 3.4: the positives are shot against distinct backgrounds,
# so no later view shares view 1's scene: shared_scene_p = 0), on a val split of 150 identities (an
# SSR interval within about +-5 points). Levers: depth of field, object size, view change, background
# salience (world.bg_salience), distractor magnitude.
_P = {"world.shared_scene_p": 0.0, "world.n_val_ids": 150}
_P1 = {**_P, "world.bg_blur": 0.02, "world.object_frac": (0.7, 0.85), "world.view_strength": 0.25}
LEVERS.update({
    "P1_A_distinct_scenes": ("lever A with every view in a scene of its own", _P1),
    "P2_P1_salience_0.3": ("P1 + backgrounds at 30% contrast", {**_P1, "world.bg_salience": 0.3}),
    "P3_P1_salience_0.1": ("P1 + backgrounds at 10% contrast", {**_P1, "world.bg_salience": 0.1}),
    "P4_blur4_frac8_views2_sal0.3": ("out of focus (4%), objects 80-95%, views 0.2, 30% contrast",
                                     {**_P, "world.bg_blur": 0.04, "world.object_frac": (0.8, 0.95),
                                      "world.view_strength": 0.2, "world.bg_salience": 0.3}),
    "P5_P4_mag_1.5": ("P4 with 1.5x the distractors' colour shifts",
                      {**_P, "world.bg_blur": 0.04, "world.object_frac": (0.8, 0.95), "world.view_strength": 0.2,
                       "world.bg_salience": 0.3, "world.distractor_mag": 1.5}),
    "P6_P1_salience_0": ("P1 on grey seamless backgrounds (0% contrast)", {**_P1, "world.bg_salience": 0.0}),
    "P7_blur4_frac8_views2_sal0": ("out of focus (4%), objects 80-95%, views 0.2, grey seamless backgrounds",
                                   {**_P, "world.bg_blur": 0.04, "world.object_frac": (0.8, 0.95),
                                    "world.view_strength": 0.2, "world.bg_salience": 0.0}),
    "P8_blur4_frac8_views15_sal0.1": ("out of focus (4%), objects 80-95%, views 0.15, 10% contrast",
                                      {**_P, "world.bg_blur": 0.04, "world.object_frac": (0.8, 0.95),
                                       "world.view_strength": 0.15, "world.bg_salience": 0.1}),
})

TARGETS = {  # column -> (low, high), declared before any result (issue 23)
    "val_ssr": (30.7 - 5, 30.7 + 5), "val_pa": (48.8 - 8, 48.8 + 8), "val_fg_ssr": (64.7 - 8, 64.7 + 8),
    "mtg_ssr": (float("-inf"), 5.0),
}


def score_frozen(cfg, data, weights: str | None, cache_root: Path) -> dict:
    """Val-split summary of the frozen backbone (``weights=None``: its pretrained weights;
    ``"random"``: its random init), full image and foreground only."""
    enc = load_backbone(cfg, **({"weights": weights} if weights else {}))[0]
    emb = Embedder(enc, data, profile=cfg, progress=False, store_tokens=False, cache_root=cache_root)
    r = evaluate_encoder(EmbeddingBenchEncoder(emb, "frozen"), data, "val", ("full", "fg"))
    full, fg = summary_row(r.nearid["full"], r.mtg["full"]), summary_row(r.nearid["fg"], r.mtg["fg"])
    per = {s: 100.0 * v["ssr"] for s, v in r.nearid["full"]["per_source"].items()}
    return {"src_ssr_min": min(per.values()), "src_ssr_max": max(per.values()),
            "src_ssr": ", ".join(f"{s} {v:.1f}" for s, v in per.items()),
            "val_ssr": full["nearid_ssr"], "val_pa": full["nearid_pa"], "val_fg_ssr": fg["nearid_ssr"],
            "val_fg_pa": fg["nearid_pa"], "mtg_ssr": full["mtg_ssr"], "mtg_mo": full["mtg_mo"],
            "mtg_mopair": full["mtg_mopair"], "n_identities": full["n_identities"]}


# Issue 38, fill generators: a generator's look must stay a look. Every Table 1 source's frozen SSR
# lies in the range the paper's frozen baselines span across sources (NearID E.4: "SSR 12-67%").
# Declared after the first generator world, whose "grainy" look the frozen CNN read on 79% of val
# identities (levers mini_generators*, scored before this check existed, do not carry it).
SOURCE_RANGE = FROZEN_SOURCE_RANGE          # notebook 04 checks the test split against it too


def verdict(row: dict) -> str:
    """Which targets the frozen row meets (M-O is reported, not banded: 'near' has no width), and,
    where the row has per-source numbers, whether each source lies in :data:`SOURCE_RANGE`."""
    miss = [k for k, (lo, hi) in TARGETS.items() if not lo <= row[k] <= hi]
    if row.get("src_ssr_min") is not None and not pd.isna(row.get("src_ssr_min")):
        lo, hi = SOURCE_RANGE
        if not (lo <= row["src_ssr_min"] and row["src_ssr_max"] <= hi):
            miss.append("per-source range")
    return "meets all" if not miss else "misses " + ", ".join(miss)


def write_md(df: pd.DataFrame, path: Path) -> None:
    df = df.copy()
    if "src_ssr_min" not in df:
        df["src_ssr_min"] = df["src_ssr_max"] = float("nan")
    cols = ["lever", "what", "encoder", "val_ssr", "val_pa", "val_fg_ssr", "mtg_ssr", "mtg_mo", "src_ssr_min",
            "src_ssr_max", "verdict", "build_s", "score_s"]
    head = ["# Mini-world calibration on the frozen encoder (val split, no head)", "",
            "Targets, fixed before any head result (issue 23): full-image SSR 30.7 +- 5, PA 48.8 +- 8, "
            "FG-only SSR 64.7 +- 8, MTG SSR <= 5, M-O near 0.18 (the paper's frozen SigLIP2). "
            "`encoder`: the pretrained EfficientNet-Lite0 GAP (frozen) or the same network at random "
            "init (chance reference). Written by `benchmarks/calibrate_world.py`.", "",
            "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    body = ["| " + " | ".join("–" if isinstance(v, float) and pd.isna(v) else
                              f"{v:.1f}" if isinstance(v, float) and c != "mtg_mo" else
                              (f"{v:.3f}" if isinstance(v, float) else str(v)) for c, v in zip(cols, r)) + " |"
            for r in df[cols].itertuples(index=False)]
    path.write_text("\n".join(head + body) + "\n")


def main() -> None:
    args = lever_args(__doc__, LEVERS, "default", "calibrate_world", lambda ap: ap.add_argument("--random", action="store_true",
                                                help="also score the random-init chance reference"))
    if args is None:
        return
    csv, rows = args.csv, args.rows
    for name in args.levers.split(","):
        what, ov = LEVERS[name]
        base = {} if name.startswith("mini") else BEFORE
        cfg = with_overrides(get_profile("mini"), {"world.distractor_sources": MAIN_SOURCES, **base, **ov})
        root = out_dir("mini") / "calibration" / name
        t0 = time.time()
        build_world(cfg, root / "nearid", splits=("val",), progress=False)
        build_s = time.time() - t0
        data = load_nearid(root / "nearid", splits=("val",))
        for enc_name, weights in [("frozen", None)] + ([("random-init", "random")] if args.random else []):
            if any(r["lever"] == name and r["encoder"] == enc_name for r in rows):
                print(f"[skip] {name} / {enc_name}: in {csv}")
                continue
            t1 = time.time()
            row = {"lever": name, "what": what, "overrides": repr(ov), "encoder": enc_name,
                   **score_frozen(cfg, data, weights, root / "cache"), "build_s": round(build_s, 1)}
            row["score_s"] = round(time.time() - t1, 1)
            row["verdict"] = verdict(row)
            rows.append(row)
            pd.DataFrame(rows).to_csv(csv.with_suffix(".csv.tmp"), index=False)
            os.replace(csv.with_suffix(".csv.tmp"), csv)
            print(f"{name} / {enc_name}: SSR {row['val_ssr']:.1f} PA {row['val_pa']:.1f} FG {row['val_fg_ssr']:.1f} "
                  f"MTG SSR {row['mtg_ssr']:.1f} M-O {row['mtg_mo']:.3f} sources: {row['src_ssr']} -> {row['verdict']} "
                  f"(build {build_s:.0f} s, score {row['score_s']:.0f} s)", flush=True)
    write_md(pd.DataFrame(rows), csv.with_suffix(".md"))


if __name__ == "__main__":
    main()
