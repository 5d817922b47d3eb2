"""Statistics for the analyses: ID-Sim's per-anchor sensitivity regression (Appendix F) and
percentile-bootstrap confidence intervals (over anchors, over identities for SSR/PA).

Every bootstrap takes an explicit ``numpy.random.Generator`` (house rule 8). Resampling draws
``rng.integers(0, n, size=(n_boot, n))`` in one call, which is exactly what
``scipy.stats.bootstrap(..., method="percentile", vectorized=True, rng=<same generator>)`` draws,
so with the same seed our resamples, bootstrap distribution, standard error (ddof=1) and interval
are identical to scipy's (tested). The interval is the plain percentile interval of the
bootstrap distribution (numpy's default linear interpolation), as ID-Sim reports (2.5-97.5 pct).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

__all__ = ["sensitivity_ols", "bootstrap_mean_ci", "bootstrap_columns", "bootstrap_ssr_pa", "holm_reject"]


def sensitivity_ols(df: pd.DataFrame, sim_col: str = "sim", factor_col: str = "factor_change",
                    identity_col: str = "identity_change", anchor_col: str = "anchor_id",
                    by: Sequence[str] | None = None) -> pd.DataFrame:
    """Per-anchor OLS ``sim = b0 + b1 * factor_change + b2 * identity_change`` (ID-Sim App. F).

    Each anchor's whole joint edit grid is one regression (statsmodels OLS with an intercept);
    sensitivity is the negative slope: the similarity lost per unit change of that factor.

    Args:
        df: one row per grid image with its similarity back to the anchor.
        by: extra grouping columns (e.g. ``["encoder", "grid"]``); one regression per group+anchor.

    Returns:
        DataFrame with ``by`` columns, ``anchor_col``, ``b0``, ``b_factor``, ``b_identity``,
        ``sens_factor`` (= -b_factor), ``sens_identity`` (= -b_identity), ``r2``, ``n``.

    Raises:
        ValueError naming the column / anchor for missing columns, non-finite values, fewer than
        4 points, or a grid where the two factors are not separable (rank-deficient design).
    """
    import statsmodels.api as sm

    by = list(by or [])
    need = [sim_col, factor_col, identity_col, anchor_col, *by]
    miss = [c for c in need if c not in df.columns]
    if miss:
        raise ValueError(f"sensitivity_ols: missing columns {miss}; have {list(df.columns)}")
    for c in (sim_col, factor_col, identity_col):
        v = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float)
        if not np.isfinite(v).all():
            rows = df.index[~np.isfinite(v)][:5].tolist()
            raise ValueError(f"sensitivity_ols: non-finite {c!r} at rows {rows}")
    rows = []
    for key, g in df.groupby(by + [anchor_col], sort=True):
        key = key if isinstance(key, tuple) else (key,)
        X = g[[factor_col, identity_col]].to_numpy(dtype=float)      # [n, 2]
        y = g[sim_col].to_numpy(dtype=float)                         # [n]
        Xc = np.column_stack([np.ones(len(y)), X])                   # [n, 3] intercept first
        # <4 points leaves no residual degree of freedom for an R^2 worth recording
        if len(y) < 4 or np.linalg.matrix_rank(Xc) < 3:
            raise ValueError(f"sensitivity_ols: anchor {key[-1]!r} (group {key[:-1]}) has {len(y)} "
                             "points or a rank-deficient grid: factor_change and identity_change "
                             "must both vary and not be collinear")
        fit = sm.OLS(y, Xc).fit()
        b0, b1, b2 = fit.params
        rows.append({**dict(zip(by + [anchor_col], key)), "b0": b0, "b_factor": b1,
                     "b_identity": b2, "sens_factor": -b1, "sens_identity": -b2,
                     "r2": float(fit.rsquared), "n": len(y)})
    return pd.DataFrame(rows)


def _check_rng(rng) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError("bootstrap: pass an explicit numpy.random.Generator as rng "
                        "(e.g. nearid_lib.runtime.seeding.make_rng(seed, 'bootstrap'))")
    return rng


def _summary(dist: np.ndarray, estimate: float, ci: float) -> dict:
    alpha = (1 - ci) / 2
    low, high = np.percentile(dist, [100 * alpha, 100 * (1 - alpha)])
    return {"estimate": float(estimate), "mean": float(dist.mean()),
            "std": float(dist.std(ddof=1)), "low": float(low), "high": float(high),
            "n": None, "n_boot": int(dist.size)}


def bootstrap_mean_ci(values, n_boot: int = 1000, rng: np.random.Generator | None = None,
                      ci: float = 0.95, return_distribution: bool = False) -> dict:
    """Percentile bootstrap of the mean over units (anchors): resample the n values with
    replacement ``n_boot`` times.

    Returns dict: ``estimate`` (sample mean), ``mean`` (bootstrap mean, what ID-Sim reports),
    ``std`` (bootstrap standard deviation, ddof=1 like scipy's ``standard_error``), ``low`` /
    ``high`` (percentile interval at level ``ci``), ``n``, ``n_boot`` (+ ``distribution``).
    NaN values are an error (drop them explicitly first, so the n reported is the n used).
    """
    rng = _check_rng(rng)
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size < 2:
        raise ValueError(f"bootstrap_mean_ci: need >= 2 values, got {v.size}")
    if not np.isfinite(v).all():
        raise ValueError(f"bootstrap_mean_ci: non-finite values at {np.flatnonzero(~np.isfinite(v))[:5].tolist()}")
    if not 0 < ci < 1:
        raise ValueError(f"bootstrap_mean_ci: ci must be in (0, 1), got {ci}")
    idx = rng.integers(0, v.size, size=(n_boot, v.size))     # [n_boot, n] same draw as scipy
    dist = v[idx].mean(axis=1)                                # [n_boot]
    out = _summary(dist, v.mean(), ci)
    out["n"] = int(v.size)
    if return_distribution:
        out["distribution"] = dist
    return out


def bootstrap_columns(df: pd.DataFrame, cols: Sequence[str], n_boot: int = 1000,
                      rng: np.random.Generator | None = None, ci: float = 0.95,
                      by: Sequence[str] | None = None) -> pd.DataFrame:
    """Bootstrap CIs of the mean of several per-anchor columns (e.g. ``sens_factor``,
    ``sens_identity`` from :func:`sensitivity_ols`), one row per (group, column).

    Within a group all columns share the same anchor resamples (a resample is a set of anchors,
    as in ID-Sim App. F where all coefficients are recomputed per resample)."""
    rng = _check_rng(rng)
    by = list(by or [])
    rows = []
    groups = df.groupby(by, sort=True) if by else [((), df)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        vals = g[list(cols)].to_numpy(dtype=float)               # [n, C]
        if not np.isfinite(vals).all():
            raise ValueError(f"bootstrap_columns: non-finite values in group {key}")
        n = len(vals)
        if n < 2:
            raise ValueError(f"bootstrap_columns: group {key} has {n} anchors (need >= 2)")
        idx = rng.integers(0, n, size=(n_boot, n))               # [n_boot, n]
        dists = vals[idx].mean(axis=1)                           # [n_boot, C]
        for c_i, c in enumerate(cols):
            s = _summary(dists[:, c_i], vals[:, c_i].mean(), ci)
            s["n"] = n
            rows.append({**dict(zip(by, key)), "column": c, **s})
    return pd.DataFrame(rows)


def bootstrap_ssr_pa(wins, trials, n_boot: int = 1000, rng: np.random.Generator | None = None,
                     ci: float = 0.95) -> dict:
    """Percentile bootstrap of SSR and PA over identities.

    Args:
        wins, trials: per-identity arrays from ``metrics.ssr_pa(..., per_identity=True)``;
            identities with 0 trials are dropped (they are not part of SSR's denominator either).
    Each resample draws identities with replacement; SSR = mean of [wins == trials], PA =
    sum(wins) / sum(trials) over the resample (the micro-pooled PA).
    Returns ``{"ssr": summary, "pa": summary}`` with the keys of :func:`bootstrap_mean_ci`.
    """
    rng = _check_rng(rng)
    w = np.asarray(wins, dtype=np.int64).ravel()
    t = np.asarray(trials, dtype=np.int64).ravel()
    if w.shape != t.shape or (w > t).any() or (w < 0).any():
        raise ValueError("bootstrap_ssr_pa: wins/trials must have equal shape and 0 <= wins <= trials")
    keep = t > 0
    w, t = w[keep], t[keep]
    if w.size < 2:
        raise ValueError(f"bootstrap_ssr_pa: need >= 2 identities with trials, got {w.size}")
    idx = rng.integers(0, w.size, size=(n_boot, w.size))         # [n_boot, n]
    succ = (w == t).astype(np.float64)
    ssr_d = succ[idx].mean(axis=1)
    pa_d = w[idx].sum(axis=1) / t[idx].sum(axis=1)
    out = {"ssr": _summary(ssr_d, succ.mean(), ci), "pa": _summary(pa_d, w.sum() / t.sum(), ci)}
    for v in out.values():
        v["n"] = int(w.size)
    return out


def holm_reject(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down correction: which of ``p_values`` are rejected at family-wise level
    ``alpha``. Sorted ascending, the i-th smallest (from 0) is rejected while every p-value up to it
    is at most ``alpha / (m - i)``; the first that is not stops the procedure. A NaN p-value is
    never rejected and counts in ``m``."""
    p = np.asarray(p_values, dtype=float)
    m = len(p)
    out = [False] * m
    order = sorted(range(m), key=lambda i: (np.isnan(p[i]), p[i]))
    for rank, i in enumerate(order):
        if not (p[i] <= alpha / (m - rank)):
            break
        out[i] = True
    return out
