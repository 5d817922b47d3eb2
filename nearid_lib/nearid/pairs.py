"""The pairs each NearID-bench protocol scores, for pair-based scorers (the VLM judge) and for the
pair path of embedding encoders: NearID positives/distractors, the MTG similarity sets, and the
edit-grid pairs of the procedural DreamBench++ stand-in; and SSR/PA / MTG metrics from pair scores."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd

from .. import metrics
from .evaluate import pool_per_source

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["nearid_pairs", "nearid_from_pair_scores", "mtg_pairs", "mtg_from_scores", "grid_pairs"]


def nearid_pairs(data: NearIDData, split: str, sources: Sequence[str], max_ids: int | None = None) -> dict[str, Any]:
    """Every pair the NearID protocol scores, for a pair-based scorer (a VLM judge).

    Returns ``ids`` [N], ``pos`` (list of (n, i, j, img_i, mask_i, img_j, mask_j), i < j present),
    ``dist[source]`` (list of (n, i, img_i, mask_i, nimg_i, mask_i)); view indices are 0-based."""
    sel = (data.positives["split"] == split).to_numpy()
    pos = data.positives[sel].reset_index(drop=True)
    if max_ids is not None:
        pos = pos.iloc[:max_ids]
    out: dict[str, Any] = {"ids": pos["id"].tolist(), "pos": [], "dist": {}}
    for n, row in pos.iterrows():
        present = [k for k in (1, 2, 3) if str(row[f"img{k}"])]
        for a in range(len(present)):
            for b in range(a + 1, len(present)):
                i, j = present[a], present[b]
                out["pos"].append((n, i - 1, j - 1, row[f"img{i}"], row[f"mask{i}"], row[f"img{j}"], row[f"mask{j}"]))
    for s in sources:
        d = data.distractors[s][sel].reset_index(drop=True)
        lst = []
        for n, row in pos.iterrows():
            for k in (1, 2, 3):
                if str(row[f"img{k}"]) and str(d.at[n, f"nimg{k}"]):
                    lst.append((n, k - 1, row[f"img{k}"], row[f"mask{k}"], d.at[n, f"nimg{k}"], row[f"mask{k}"]))
        out["dist"][s] = lst
    return out


def nearid_from_pair_scores(n_ids: int, pos_pairs, pos_scores, dist_pairs: Mapping[str, Sequence],
                            dist_scores: Mapping[str, np.ndarray], train_sources: Sequence[str]) -> dict:
    """Assemble ``pos_sim`` [N,3,3] / ``dist_sim`` [N,3] from pair scores and score SSR/PA per source
    (NaN scores drop their trials) into the same dict shape as
    :func:`~nearid_lib.nearid.evaluate.nearid_bench`."""
    ps = np.full((n_ids, 3, 3), np.nan)
    for (n, i, j, *_), s in zip(pos_pairs, pos_scores):
        ps[n, i, j] = ps[n, j, i] = s
    per = {}
    for src, pairs in dist_pairs.items():
        ds = np.full((n_ids, 3), np.nan)
        for (n, i, *_), s in zip(pairs, dist_scores[src]):
            ds[n, i] = s
        per[src] = metrics.ssr_pa(ps, ds, per_identity=True)
    return pool_per_source(per, train_sources)


_MTG_SETS = {"s_1_1p": ("image_1_original", "image_1_inpainted", "image_1_object_mask", "image_1_object_mask"),
             "s_2_2p": ("image_2_original", "image_2_inpainted", "image_2_object_mask", "image_2_object_mask"),
             "s_1_2p": ("image_1_original", "image_2_inpainted", "image_1_object_mask", "image_2_object_mask"),
             "s_2_1p": ("image_2_original", "image_1_inpainted", "image_2_object_mask", "image_1_object_mask"),
             "s_1_2": ("image_1_original", "image_2_original", "image_1_object_mask", "image_2_object_mask")}



def mtg_pairs(data: NearIDData, split: str, max_pairs: int | None = None) -> tuple[pd.DataFrame, dict[str, list[tuple]]]:
    """The MTG rows of ``split`` and, per similarity set (s_1_1p, s_2_2p, s_1_2p, s_2_1p, s_1_2),
    the (img_a, mask_a, img_b, mask_b) pairs it needs."""
    if data.mtg is None:
        return pd.DataFrame(), {}
    m = data.mtg[data.mtg["split"] == split].reset_index(drop=True)
    if max_pairs is not None:
        m = m.iloc[:max_pairs]
    return m, {k: list(zip(m[a], m[ma], m[b], m[mb])) for k, (a, b, ma, mb) in _MTG_SETS.items()}


def mtg_from_scores(m: pd.DataFrame, s: Mapping[str, np.ndarray]):
    """``(metrics.mtg_metrics dict, per-pair scores)`` of the MTG rows ``m`` from the scores of each
    similarity set of :func:`mtg_pairs` (``(None, {})`` without MTG rows)."""
    if not len(m):
        return None, {}
    scores = {k: np.asarray(v, dtype=np.float64) for k, v in s.items()}
    scores["oracle_1"] = m["oracle_1"].to_numpy(float)
    scores["oracle_2"] = m["oracle_2"].to_numpy(float)
    mt = metrics.mtg_metrics(scores["s_1_1p"], scores["s_2_2p"], scores["s_1_2p"], scores["s_2_1p"],
                             scores["s_1_2"], scores["oracle_1"], scores["oracle_2"])
    return mt, scores


def grid_pairs(data: NearIDData, split: str = "test", max_anchors: int | None = None) -> pd.DataFrame:
    """Procedural DreamBench++ stand-in pairs from ``grids.csv``: per anchor and grid, the
    reference = the unedited cell (identity 0, factor 0) against every other cell. Columns ``ref``,
    ``ref_mask``, ``img``, ``mask``, ``oracle`` (= 1 - identity_change), ``method`` (context-drift
    level: the "personalisation method" analogue), ``category`` (the drifting factor)."""
    g = data.grids
    if g is None or not len(g):
        return pd.DataFrame(columns=["ref", "ref_mask", "img", "mask", "oracle", "method", "category"])
    g = g[g["split"] == split] if split in set(g["split"]) else g
    anchors = list(dict.fromkeys(g["anchor_id"]))[:max_anchors]
    g = g[g["anchor_id"].isin(anchors)]
    rows = []
    for (aid, grid), sub in g.groupby(["anchor_id", "grid"], sort=True):
        ref = sub[(sub["identity_level"] == 0) & (sub["factor_level"] == 0)]
        if not len(ref):
            continue
        r0 = ref.iloc[0]
        for _, r in sub.iterrows():
            if r["identity_level"] == 0 and r["factor_level"] == 0:
                continue
            rows.append({"anchor_id": aid, "ref": r0["path"], "ref_mask": r0["mask"], "img": r["path"],
                         "mask": r["mask"], "oracle": 1.0 - float(r["identity_change"]),
                         "method": f"context drift {int(r['factor_level'])}", "category": grid})
    return pd.DataFrame(rows)
