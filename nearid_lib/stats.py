"""Statistics for the analyses: ID-Sim's per-anchor sensitivity regression (Appendix F),
percentile-bootstrap confidence intervals (over anchors, over identities for SSR/PA), Holm's
correction, and the statistics of claims (:class:`Statistic`: how per-row outcomes of a quantity
become moments that sum over units, so that a claim's bootstrap replicate is a count-weighted sum of
units' moments; :func:`statistic` names them, :mod:`nearid_lib.claims` uses them).

Every bootstrap takes an explicit ``numpy.random.Generator`` (house rule 8). Resampling draws
``rng.integers(0, n, size=(n_boot, n))`` in one call, which is exactly what
``scipy.stats.bootstrap(..., method="percentile", vectorized=True, rng=<same generator>)`` draws,
so with the same seed our resamples, bootstrap distribution, standard error (ddof=1) and interval
are identical to scipy's (tested). The interval is the plain percentile interval of the
bootstrap distribution (numpy's default linear interpolation), as ID-Sim reports (2.5-97.5 pct).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np
import pandas as pd

__all__ = ["sensitivity_ols", "bootstrap_mean_ci", "bootstrap_columns", "bootstrap_ssr_pa", "holm_reject",
           "Statistic", "STATISTICS", "statistic", "grouped_pearson_columns", "MTG_PAIRS"]


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


# --------------------------------------------------------------------------- statistics of claims
@dataclass(frozen=True)
class Statistic:
    """``moments(table) -> [n_rows, m]`` per-row sums; ``value(sums [..., m]) -> [...]``.

    A unit's moments are the sum of its rows' moments, a replicate's the count-weighted sum of
    its units', so any statistic that is a smooth function of sums (ratios, Pearson r) fits."""

    fields: tuple[str, ...]
    moments: Callable[[pd.DataFrame], np.ndarray]
    value: Callable[[np.ndarray], np.ndarray]
    percent: bool = False         # shown x100 with a % sign
    bounds: tuple[float, float] | None = None   # the metric's floor and ceiling (None: unbounded)
    chance: float | None = None   # the value of random scores (None: depends on the benchmark)


def _ratio(num: str, den: str | None = None) -> Statistic:
    def moments(t: pd.DataFrame) -> np.ndarray:
        x = t[num].to_numpy(float)
        ok = np.isfinite(x)
        d = t[den].to_numpy(float) if den else ok.astype(float)
        return np.stack([np.where(ok, x, 0.0), np.where(ok, d, 0.0)], axis=1)

    def value(m: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return m[..., 0] / m[..., 1]

    return Statistic((num,) if den is None else (num, den), moments, value)


MTG_PAIRS = (("s_1_1p", "oracle_1"), ("s_2_2p", "oracle_2"), ("s_1_2p", "oracle_2"),
              ("s_2_1p", "oracle_1"))


def _fisher_pearson(pairs: Sequence[tuple[str, str]]) -> Statistic:
    """Fisher-z mean of the Pearson r of each (x, y) column pair (NearID Eq. 6 over MTG pairs)."""
    def moments(t: pd.DataFrame) -> np.ndarray:
        out = []
        for xc, yc in pairs:
            x, y = t[xc].to_numpy(float), t[yc].to_numpy(float)
            ok = np.isfinite(x) & np.isfinite(y)
            x, y = np.where(ok, x, 0.0), np.where(ok, y, 0.0)
            out += [ok.astype(float), x, y, x * x, y * y, x * y]
        return np.stack(out, axis=1)

    def value(m: np.ndarray) -> np.ndarray:
        zs = []
        for c in range(len(pairs)):
            n, sx, sy, sxx, syy, sxy = (m[..., 6 * c + j] for j in range(6))
            with np.errstate(invalid="ignore", divide="ignore"):
                r = (n * sxy - sx * sy) / np.sqrt((n * sxx - sx * sx) * (n * syy - sy * sy))
            zs.append(np.arctanh(np.clip(r, -0.999, 0.999)))
        return np.tanh(np.mean(zs, axis=0))

    return Statistic(tuple(c for p in pairs for c in p), moments, value)


STATISTICS: dict[str, Statistic] = {
    # rows = (identity, source) trials of NearID-bench: success 0/1 (NaN: no trial), wins, trials
    # (SSR's chance depends on the number of distractors; PA is a pairwise accuracy: chance 1/2)
    "ssr": replace(_ratio("success"), percent=True, bounds=(0.0, 1.0)),
    "pa": replace(_ratio("wins", "trials"), percent=True, bounds=(0.0, 1.0), chance=0.5),
    # rows = MTG pairs: the four similarities and the two oracles (metrics.mtg_metrics)
    "mtg_mo": replace(_fisher_pearson(MTG_PAIRS), bounds=(-1.0, 1.0), chance=0.0),
    "mtg_mopair": replace(_fisher_pearson(MTG_PAIRS[:2]), bounds=(-1.0, 1.0), chance=0.0),
}



def grouped_pearson_columns(k: int) -> list[tuple[str, str]]:
    """The (x, y) column pairs of ``"pearson_groups:<k>"``: ``x0, y0, ..., x{k-1}, y{k-1}``."""
    return [(f"x{i}", f"y{i}") for i in range(k)]


def statistic(name: str) -> Statistic:
    """A named statistic; ``"mean:<column>"`` is the plain mean of a column over rows;
    ``"pearson_groups:<k>"`` the Fisher-z mean over k groups of each group's Pearson r, a row of
    group i carrying its metric score in ``x<i>`` and its target in ``y<i>`` (NaN elsewhere): the
    M-H of :func:`nearid_lib.metrics.metric_to_human` over k methods."""
    if name in STATISTICS:
        return STATISTICS[name]
    if name.startswith("mean:"):
        return _ratio(name[5:])
    if name.startswith("pearson_groups:") and name[15:].isdigit() and int(name[15:]) > 0:
        return replace(_fisher_pearson(grouped_pearson_columns(int(name[15:]))), bounds=(-1.0, 1.0), chance=0.0)
    raise KeyError(f"unknown statistic {name!r}; valid: {', '.join(STATISTICS)}, mean:<column>, pearson_groups:<k>")
