"""Correlations, Fisher-z aggregation (NearID Appendix E.2) and DreamBench++ metric-to-human
alignment (NearID Table 2, Figure 4)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ._arrays import to_np

__all__ = ["fisher_z_mean", "pearson", "metric_to_human", "metric_to_human_groups", "MH_COLUMNS"]

MH_COLUMNS = ["category", "method", "r", "r_spread", "n"]


def fisher_z_mean(rs, clip: float = 0.999, return_sem: bool = False, nan_policy: str = "omit"):
    """Fisher-z mean of correlation coefficients: tanh(mean(arctanh(clip(r, -c, c)))).

    NaN coefficients (e.g. a constant score vector) are omitted (``nan_policy="omit"``) or raise
    (``"raise"``); all-NaN gives NaN. The clip keeps |r| = 1 finite.

    ``return_sem=True`` also returns the paper's "±": the standard error of the raw coefficients,
    std(r, ddof=1) / sqrt(n). This reading reproduces NearID Table 2's Fisher-z row from its seven
    per-method rows (e.g. H-H 0.648 ± 0.038, S-H 0.516 ± 0.079); NaN when fewer than 2 coefficients.
    """
    r = to_np(rs, "rs").ravel()
    if nan_policy not in ("omit", "raise"):
        raise ValueError(f"fisher_z_mean: nan_policy must be 'omit' or 'raise', got {nan_policy!r}")
    nan = np.isnan(r)
    if nan.any() and nan_policy == "raise":
        raise ValueError(f"fisher_z_mean: NaN coefficients at {np.flatnonzero(nan).tolist()}")
    r = r[~nan]
    if np.any(np.abs(r) > 1 + 1e-9):
        raise ValueError(f"fisher_z_mean: |r| > 1 in {r[np.abs(r) > 1 + 1e-9].tolist()}")
    if r.size == 0:
        mean = float("nan")
    else:
        mean = float(np.tanh(np.mean(np.arctanh(np.clip(r, -clip, clip)))))
    if not return_sem:
        return mean
    sem = float(np.std(r, ddof=1) / np.sqrt(r.size)) if r.size >= 2 else float("nan")
    return mean, sem


def pearson(x, y) -> float:
    """Pearson r over the entries where both ``x`` and ``y`` are finite (pairwise deletion).

    NaN when fewer than 3 such entries or when either side is constant (r undefined)."""
    a, b = to_np(x, "x").ravel(), to_np(y, "y").ravel()
    if a.shape != b.shape:
        raise ValueError(f"pearson: x {a.shape} and y {b.shape} differ")
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if a.size < 3:
        return float("nan")
    a, b = a - a.mean(), b - b.mean()
    den = np.sqrt((a * a).sum() * (b * b).sum())
    if den == 0:
        return float("nan")
    return float(np.clip((a * b).sum() / den, -1.0, 1.0))


def metric_to_human(metric, human, method, category=None) -> dict:
    """M-H: Pearson r between metric and human scores within each method, Fisher-z across methods.

    Args:
        metric, human: [M] scores per rated image (NaN rows are dropped pairwise by :func:`pearson`).
        method: [M] personalization method of each row (the paper's Table 2 rows).
        category: optional [M] DB++ category (animal, human, object, style) for Figure 4.

    Returns:
        dict with ``m_h`` and ``m_h_sem`` (Fisher-z mean and the paper's ± over methods),
        ``per_method`` (DataFrame: method, r, n) and, with ``category``, ``per_category``
        (DataFrame: category, r = Fisher-z over the per-method r within that category, sem,
        r_pooled = one Pearson over all rows of the category, n).
    """
    df = pd.DataFrame({"metric": to_np(metric, "metric").ravel(),
                       "human": to_np(human, "human").ravel(),
                       "method": np.asarray(method).ravel()})
    if category is not None:
        cat = np.asarray(category).ravel()
        if cat.shape[0] != len(df):
            raise ValueError(f"metric_to_human: category has {cat.shape[0]} rows, scores {len(df)}")
        df["category"] = cat

    def per_method(d):
        return pd.DataFrame([{"method": m, "r": pearson(g["metric"], g["human"]),
                              "n": int((np.isfinite(g["metric"]) & np.isfinite(g["human"])).sum())}
                             for m, g in d.groupby("method", sort=True)])

    pm = per_method(df)
    m_h, sem = fisher_z_mean(pm["r"], return_sem=True)
    out = {"m_h": m_h, "m_h_sem": sem, "per_method": pm}
    if category is not None:
        rows = []
        for c, g in df.groupby("category", sort=True):
            pmc = per_method(g)
            rc, sc = fisher_z_mean(pmc["r"], return_sem=True)
            rows.append({"category": c, "r": rc, "sem": sc,
                         "r_pooled": pearson(g["metric"], g["human"]), "n": len(g)})
        out["per_category"] = pd.DataFrame(rows)
    return out


def metric_to_human_groups(metric, humans, method, category, clip: float = 0.9999) -> pd.DataFrame:
    """M-H as the NearID authors report it (their ``dreambench_plus/pearson.py``; NearID Table 2,
    Table 1's DB++ column, Figure 4), per category, never over the categories pooled.

    Per (category, method): the Pearson r of ``metric`` with each human rater group of ``humans``
    separately; ``r`` = their mean, ``r_spread`` = half their range (the table's ±). Per category a
    ``method = "fisher_z"`` row: the Fisher-z mean over the methods (``r_spread`` = standard error
    of the per-method r). ``category = "all4"`` rows: each method's (and the Fisher-z row's)
    Fisher-z mean over the categories (the guide's ``--full`` aggregate), when there are several.

    Args:
        metric: [M] scores per rated image; ``humans``: a list of [M] arrays, one per rater group.
        method, category: [M] labels. ``clip``: the release's Fisher-z clip (0.9999).

    Returns:
        DataFrame with :data:`MH_COLUMNS` (``n`` = images with a finite metric and human score).
    """
    m = to_np(metric, "metric").ravel()
    hs = [to_np(h, "human").ravel() for h in humans]
    meth, cat = np.asarray(method).ravel(), np.asarray(category).ravel()
    if any(h.shape != m.shape for h in hs) or meth.shape != m.shape or cat.shape != m.shape:
        raise ValueError(f"metric_to_human_groups: metric {m.shape}, humans {[h.shape for h in hs]}, "
                         f"method {meth.shape}, category {cat.shape} differ")
    if not hs:
        raise ValueError("metric_to_human_groups: no human rater group")
    rows = []
    per_cat: dict[str, dict[str, float]] = {}
    for c in dict.fromkeys(cat.tolist()):
        rs = {}
        n_cat = 0
        for me in dict.fromkeys(meth[cat == c].tolist()):
            idx = (cat == c) & (meth == me)
            rg = [pearson(m[idx], h[idx]) for h in hs]
            n = int((np.isfinite(m[idx]) & np.isfinite(hs[0][idx])).sum())
            r = float(np.mean(rg))
            rows.append({"category": c, "method": me, "r": r, "r_spread": float((max(rg) - min(rg)) / 2), "n": n})
            rs[me] = r
            n_cat += n
        fz, sem = fisher_z_mean(list(rs.values()), clip=clip, return_sem=True)
        rows.append({"category": c, "method": "fisher_z", "r": fz, "r_spread": sem, "n": n_cat})
        per_cat[c] = {**rs, "fisher_z": fz}
    if len(per_cat) > 1:
        n_of = {(x["category"], x["method"]): x["n"] for x in rows}
        for me in dict.fromkeys(k for v in per_cat.values() for k in v):
            vals = [v[me] for v in per_cat.values() if me in v]
            if len(vals) == len(per_cat):
                fz, sem = fisher_z_mean(vals, clip=clip, return_sem=True)
                rows.append({"category": "all4", "method": me, "r": fz, "r_spread": sem,
                             "n": int(sum(n_of[(c, me)] for c in per_cat))})
    return pd.DataFrame(rows, columns=MH_COLUMNS)
