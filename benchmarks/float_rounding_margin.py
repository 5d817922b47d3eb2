"""How far does a float-rounding rerun move a claim's interval? The margin behind "leaning" verdicts
(issue 53, item 3).

A float-rounding twin (``NEARID_FOLD_BATCHNORM=0``: the frozen CNN runs its BatchNorms unfolded,
every cached feature moves in its last bits) retrains every head, so it is a new draw of each
seed's training; with three seeds the seed term of an interval moves with it (docs/mini.md,
"Verdicts under float rounding"). This script reads the twins recorded so far under the interval
method in force (the seeds' spread as Student t, per side or paired by seed) and measures, for every
interval end of every claim recorded in both runs of a pair, how far it moved **as a share of the
interval's width** in the run that is being read (each run of a pair is read once: a reader holds
one run and asks how far its twin could be). Intervals of different claims are in different units
(SSR fractions, correlations, sensitivity slopes), and the move comes from the seed term, which
sets most of the width, so the share carries across claims where an absolute move would not.

The margin is the largest share observed, rounded up to two decimals:
:data:`nearid_lib.claims.report_section.FLOAT_ROUNDING_MARGIN` must equal it
(``tests/test_report.py::test_the_float_rounding_margin_is_the_one_the_twins_measured``).

Inputs (nothing is recomputed; each row says where its numbers were recorded):

* twin 2: the regeneration at d98e812 and its unfolded twin, seed terms per side (Student t),
  1000 replicates; docs/mini.md, "With the seeds' spread as Student t" (SSR points, one decimal):
  3b, 2d, 8b, the claims it quotes in both runs;
* twin 3: the regeneration at 6e681ac and its unfolded twin, each claim recomputed alone with 4000
  replicates, per side and paired (``benchmarks/results/seed_pairing_mini_{regen,twin}.csv``,
  ``benchmarks/diag_seed_pairing.py`` (removed; ``git show 519cb69:benchmarks/diag_seed_pairing.py``)): 3b, 6c, 6d, 8b;
* twin 4: the committed run of deaece8 (the fill-generator world) and its unfolded twin at e169218,
  paired where the seeds are shared, 10000 replicates; docs/mini.md, "On the fill-generator world"
  (SSR points, one decimal): 2d, the claim it quotes in both runs (the other 42 claims' intervals of
  that twin were not kept).

Not used: the first twin (26058f7 against 441daca) resampled the three seeds instead of drawing a t
term, a method withdrawn since. Claims on frozen encoders only (one seed on every side) kept their
intervals to the printed digit in all four twins; the margin is about trained quantities.

    .venv/bin/python benchmarks/float_rounding_margin.py     # writes results/float_rounding_margin.{csv,md}
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results"

# (twin, claim, seed term, unit scale, (low, high) of the committed run, (low, high) of its twin)
RECORDED = (
    ("twin 2 (d98e812), docs/mini.md", "nearid.3b", "per side", 100, (-8.6, 4.2), (-7.0, 0.3)),
    ("twin 2 (d98e812), docs/mini.md", "nearid.2d", "per side", 100, (-0.1, 16.0), (4.8, 13.9)),
    ("twin 2 (d98e812), docs/mini.md", "nearid.8b", "per side", 100, (1.3, 22.2), (-4.4, 22.9)),
    ("twin 4 (deaece8 / e169218), docs/mini.md", "nearid.2d", "paired", 100, (2.8, 12.5), (5.4, 11.4)),
)
SEED_PAIRING = ("seed_pairing_mini_regen.csv", "seed_pairing_mini_twin.csv")


def twin_pairs(results: Path = RESULTS) -> pd.DataFrame:
    """One row per (twin, claim, seed term): both runs' interval ends, as fractions."""
    rows = [{"twin": t, "claim": c, "seed_term": s, "low_a": a[0] / k, "high_a": a[1] / k,
             "low_b": b[0] / k, "high_b": b[1] / k} for t, c, s, k, a, b in RECORDED]
    regen, twin = (pd.read_csv(results / f) for f in SEED_PAIRING)
    both = regen.merge(twin, on=["claim", "seed_term"], suffixes=("_a", "_b"), validate="one_to_one")
    for r in both.itertuples(index=False):
        rows.append({"twin": "twin 3 (6e681ac), " + " / ".join(SEED_PAIRING), "claim": r.claim,
                     "seed_term": r.seed_term, "low_a": r.ci_low_a, "high_a": r.ci_high_a,
                     "low_b": r.ci_low_b, "high_b": r.ci_high_b})
    return pd.DataFrame(rows)


def end_moves(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per pair, interval end and run read: how far the end moved, as a share of the width of the
    interval in the run read."""
    out = []
    for r in pairs.itertuples(index=False):
        for end in ("low", "high"):
            move = abs(getattr(r, f"{end}_a") - getattr(r, f"{end}_b"))
            for run in ("a", "b"):
                width = getattr(r, f"high_{run}") - getattr(r, f"low_{run}")
                out.append({"twin": r.twin, "claim": r.claim, "seed_term": r.seed_term, "end": end,
                            "run_read": {"a": "committed", "b": "twin"}[run], "move": move, "width": width,
                            "share_of_width": move / width})
    return pd.DataFrame(out)


def margin(moves: pd.DataFrame) -> float:
    """The largest share of an interval's width that an end moved, rounded up to two decimals."""
    return math.ceil(round(float(moves["share_of_width"].max()) * 100, 9)) / 100


def main() -> None:
    moves = end_moves(twin_pairs())
    m = margin(moves)
    RESULTS.mkdir(exist_ok=True)
    moves.to_csv(RESULTS / "float_rounding_margin.csv", index=False)
    top = moves.loc[moves["share_of_width"].idxmax()]
    lines = ["# Float-rounding margin of claim intervals", "",
             "How far an interval end of a trained claim moved between a run and its float-rounding twin, as a "
             "share of the interval's width in the run read (`benchmarks/float_rounding_margin.py`; its "
             "docstring lists the inputs).", "",
             f"**Margin: {m:.2f}** of the width (the largest share, rounded up): {top.claim} ({top.seed_term}, "
             f"{top.end} end, {top.twin}), moved {top.move:.3f} against a width of {top.width:.3f} in the "
             f"{top.run_read} run. {len(moves)} readings of {len(moves) // 4} interval pairs; median share "
             f"{moves['share_of_width'].median():.2f}.", "",
             "| twin | claim | seed term | end | run read | move | width | share of width |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r.twin} | {r.claim} | {r.seed_term} | {r.end} | {r.run_read} | {r.move:.3f} | {r.width:.3f} | "
              f"{r.share_of_width:.2f} |" for r in moves.itertuples(index=False)]
    (RESULTS / "float_rounding_margin.md").write_text("\n".join(lines) + "\n")
    print(f"margin {m:.2f} (largest share {moves['share_of_width'].max():.4f}); wrote {RESULTS / 'float_rounding_margin.md'}")


if __name__ == "__main__":
    main()
