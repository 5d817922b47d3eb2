"""The report card's short table on top: each headline metric, which way is better, the scored
encoder beside the profile's frozen reference and this run's heads, the metric's chance level, and
a note wherever a number needs one to be read right.

A note goes on the scored encoder's value of a headline metric when it is

- **below chance** (a higher-is-better metric under the level of an encoder whose similarities carry
  no information): on these benchmarks that is not noise but a sign of what the encoder follows
  (matched context punishes pixel matching, see :data:`BELOW_CHANCE`);
- **near or above the paper's method** (at least :data:`NEAR_PAPER` of the paper's own method's value:
  NearID (Ours) for the NearID metrics, the FPR paper's specialised encoders for gallery mAP): the
  procedural world of ``smoke`` / ``mini`` is not the papers' data, so such a number says the analogue
  is easy for this encoder, not that it matches the paper's method (:data:`NEAR_PAPER_WHY`).

The rules are fixed here, before any encoder is scored; ``headline_table`` carries a ``note`` column
and :func:`headline_notes` the sentences the card prints under the table.
"""
from __future__ import annotations

from itertools import combinations, permutations
from typing import Any

import numpy as np
import pandas as pd

from ..metrics import random_ranking_ap

__all__ = ["HEADLINE", "chance_levels", "headline_table", "headline_notes", "NEAR_PAPER", "PAPER_METHOD_ROWS"]

# (column, what, better): the metrics of the card's first table, one row each
HEADLINE = (
    ("nearid_ssr", "NearID SSR %, full image (Table 1)", "higher"),
    ("nearid_pa", "NearID PA %, full image (Table 1)", "higher"),
    ("nearid_fg_ssr", "NearID SSR %, foreground only (Table 7)", "higher"),
    ("mtg_mo", "MTG M-O, Pearson r with the part-edit oracle", "higher"),
    ("idsim_identity", "ID-Sim sensitivity to identity (-slope)", "higher"),
    ("idsim_background", "ID-Sim sensitivity to background (-slope)", "lower"),
    ("fpr_map", "FPR gallery mAP of the real references", "higher"),
    ("fpr_rho_map", "FPR: mAP's agreement with true drift (rho)", "higher"),
)

# a value at or above this share of the paper's method's value is noted (the case: a colour
# histogram's M-O 0.443 beside NearID's 0.465, 95% of it)
NEAR_PAPER = 0.9
# column -> the start of the paper row (score.card.paper_rows) that is the paper's own method
PAPER_METHOD_ROWS = {"nearid_ssr": "NearID (Ours)", "nearid_pa": "NearID (Ours)", "nearid_fg_ssr": "NearID (Ours)",
                     "mtg_mo": "NearID (Ours)", "fpr_map": "specialised"}

# what a value below chance means on each benchmark
BELOW_CHANCE = {
    "nearid_ssr": "each distractor is inpainted into the exact background of one positive view, so an encoder "
                  "that compares pixels or context finds the distractor closer than the identity's other view "
                  "(a random-init network scores below chance too): it follows the matched context, not the "
                  "identity. The foreground-only SSR, background removed, says what is left without it",
    "nearid_pa": "the distractor, in the same background as a view, wins most pairwise trials against the "
                 "identity's other view: the encoder follows the matched context, not the identity",
    "nearid_fg_ssr": "with the background blacked out, a distractor edited from a view (same pose, same outline) "
                     "still looks closer than the identity's other view: the encoder compares shape and pixels, "
                     "not the identity's details",
    "mtg_mo": "a negative correlation with the part-edit oracle: the encoder's similarity grows where a larger "
              "part of the object was changed",
    "idsim_identity": "the similarity does not fall as the identity is edited on the grids: the encoder does not "
                      "see these identity changes",
    "fpr_map": "the references retrieve other identities' gallery images before their own: the encoder matches "
               "what the gallery shares across identities (species, pose, background) rather than the identity",
    "fpr_rho_map": "mAP rises as the simulated generators drift further from the identity: the metric ranks the "
                   "generators the wrong way round",
}
NEAR_PAPER_WHY = {
    "mtg_mo": "the procedural part edits define the oracle 1 - |part| / |object| exactly by the changed area, so "
              "an encoder that measures how much of the object's pixels changed (colour histograms, raw pixels) "
              "tracks it without any notion of identity: read it beside the NearID SSR / PA",
}
_DEFAULT_NEAR = ("the {profile} world is procedural, not the paper's data (mini is calibrated so that the frozen "
                 "encoder finds it about as hard, docs/mini.md): the analogue is easy for this encoder, which does "
                 "not make it the paper's method's equal; compare it with this run's rows")


def _p_all_pairs_win(n_views: int) -> float:
    """P(an identity with ``n_views`` views passes every NearID trial) when all of its similarities
    (pairs of views, view-distractor) are exchangeable: counted over every ordering of them."""

    pairs = list(combinations(range(n_views), 2))
    n = len(pairs) + n_views                     # pair similarities, then one per view's distractor
    wins = total = 0
    for order in permutations(range(n)):
        rank = dict(zip(range(n), order))
        ok = all(rank[k] > rank[len(pairs) + v] for k, (i, j) in enumerate(pairs) for v in (i, j))
        wins += ok
        total += 1
    return wins / total


def chance_levels(data, split: str = "test", group_by: str = "species") -> dict[str, tuple[float, str]]:
    """``{column: (level, basis)}``: the analytic chance level of each headline metric on ``data``
    (an encoder whose similarities carry no information: exchangeable, i.e. a random ranking).

    SSR: an identity with 2 views passes with probability 1/3, with 3 views (every ordering
    of its similarities counted: 1/15), averaged over the split's identities; PA: 1/2 per trial; MTG M-O,
    ID-Sim sensitivities and the drift agreement rho: 0; FPR mAP: the expected average precision of
    a random ranking of each reference's gallery scope
    (:func:`nearid_lib.metrics.random_ranking_ap`), averaged over the references."""
    out: dict[str, tuple[float, str]] = {}
    if data is not None and data.positives is not None:
        pos = data.positives[data.positives.split == split]
        nv = (pos[["img1", "img2", "img3"]] != "").sum(axis=1).to_numpy()
        if len(nv):
            p = {k: _p_all_pairs_win(k) for k in set(nv.tolist())}
            ssr = 100 * float(np.mean([p[k] for k in nv]))
            out["nearid_ssr"] = out["nearid_fg_ssr"] = (ssr, "analytic: random ranking (1/3 for 2 views, 1/15 for 3)")
            out["nearid_pa"] = (50.0, "analytic: 1/2 per trial")
    for c in ("mtg_mo", "idsim_identity", "idsim_background", "fpr_rho_map"):
        out[c] = (0.0, "analytic: no dependence")
    if data is not None and data.fpr_train is not None and data.fpr_gallery is not None and len(data.fpr_gallery):
        g = data.fpr_gallery
        aps = []
        for _, q in data.fpr_train.iterrows():
            scope = g[g[group_by] == q[group_by]] if group_by in g.columns else g
            n, r = len(scope), int((scope["name"] == q["name"]).sum())
            if n and r:
                aps.append(random_ranking_ap(n, r))
        if aps:
            out["fpr_map"] = (float(np.mean(aps)), "analytic: random ranking of the gallery")
    return out


def _paper_method(t: pd.DataFrame, col: str) -> tuple[float, str] | None:
    """The paper's own method's value of ``col`` in the card's table, with its row label."""
    start = PAPER_METHOD_ROWS.get(col)
    if start is None or col not in t.columns:
        return None
    rows = t[(t.kind == "paper") & t.row.str.startswith(start)]
    vals = rows[col].dropna()
    return (float(vals.iloc[0]), str(rows.loc[vals.index[0], "row"])) if len(vals) else None


def _notes(rep: Any) -> list[tuple[str, str, str]]:
    """``(column, tag, sentence)`` for every noted headline value of the scored encoder."""
    t = rep.table
    yours = t[t.kind == "yours"]
    if not len(yours):
        return []
    chance = chance_levels(rep.data, getattr(rep, "split", "test"))
    out = []
    for col, what, better in HEADLINE:
        if col not in t.columns or pd.isna(yours[col].iloc[0]):
            continue
        v = float(yours[col].iloc[0])
        level = chance.get(col, (np.nan, ""))[0]
        if better == "higher" and np.isfinite(level) and v < level:
            out.append((col, "below chance", f"{what}: {v:.3g} is below chance ({level:.3g}). {BELOW_CHANCE[col]}."))
        paper = _paper_method(t, col)
        if better == "higher" and paper is not None and paper[0] > 0 and v >= NEAR_PAPER * paper[0]:
            why = NEAR_PAPER_WHY.get(col, _DEFAULT_NEAR.format(profile=rep.profile))
            out.append((col, "near or above the paper's method",
                        f"{what}: {v:.3g} is {'above' if v > paper[0] else 'near'} the paper's method "
                        f"({paper[1]}: {paper[0]:.3g}, on the paper's data). In {rep.profile!r}, {why}."))
    return out


def headline_notes(rep: Any) -> list[str]:
    """The sentences the card prints under its short table (module docstring: when and why)."""
    return [sentence for _, _, sentence in _notes(rep)]


def headline_table(rep: Any) -> pd.DataFrame:
    """The card's short table: one row per headline metric that was scored, with which way is
    better, the scored encoder, the frozen reference (the profile's frozen encoder), the trained
    heads of this run when present, the chance level with its basis, and ``note`` (the tags of
    :func:`headline_notes`, empty where none)."""
    t = rep.table
    run = t[t.kind != "paper"]
    yours = run[run.kind == "yours"]
    ref = run[run.kind == "frozen"]
    heads = run[run.kind.isin(["nearid", "idsim"])]
    chance = chance_levels(rep.data, getattr(rep, "split", "test"))
    tags: dict[str, list[str]] = {}
    for col, tag, _ in _notes(rep):
        tags.setdefault(col, []).append(tag)
    rows = []
    for col, what, better in HEADLINE:
        if col not in t.columns or not run[col].notna().any():
            continue
        row = {"metric": what, "better": better,
               f"{yours.row.iloc[0]} (yours)" if len(yours) else "yours":
                   float(yours[col].iloc[0]) if len(yours) else np.nan}
        for _, r in pd.concat([ref, heads]).iterrows():
            row[f"reference: {r['row']}" if r["kind"] == "frozen" else f"trained: {r['row']}"] = r[col]
        level, basis = chance.get(col, (np.nan, "-"))
        row["chance"], row["chance basis"] = level, basis
        row["note"] = "; ".join(tags.get(col, []))
        rows.append(row)
    return pd.DataFrame(rows)
