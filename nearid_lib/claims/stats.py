"""The statistics of claims (:mod:`nearid_lib.claims`): how per-row outcomes of a quantity
become moments that sum over units (ratios, Fisher-z mean of Pearson r), so that a bootstrap
replicate is a count-weighted sum of units' moments. :func:`statistic` names them."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np
import pandas as pd

__all__ = ["Statistic", "STATISTICS", "statistic", "grouped_pearson_columns"]


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
