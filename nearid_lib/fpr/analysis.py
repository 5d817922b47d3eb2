"""Checking a protocol's verdicts against the known drift of simulated methods."""
from __future__ import annotations

import numpy as np

__all__ = ["drift_agreement", "spread"]


def drift_agreement(scores, drift) -> float:
    """Spearman rho between a per-method score and *negative* true drift: +1 means the score
    ranks methods exactly in the order of their identity preservation (ties share ranks).
    NaN when either side is constant."""
    from scipy.stats import spearmanr

    s = np.asarray(scores, dtype=float)
    d = -np.asarray(drift, dtype=float)
    if s.shape != d.shape or s.size < 3:
        raise ValueError(f"drift_agreement: need >= 3 methods with one score each, got {s.shape} vs {d.shape}")
    if np.ptp(s) == 0 or np.ptp(d) == 0:
        return float("nan")
    return float(spearmanr(s, d).statistic)


def spread(values) -> float:
    """Relative spread across methods: (max - min) / mean (a scale-free "how different are the
    verdicts"; similarity near 0.9 for everyone gives a small spread)."""
    v = np.asarray(values, dtype=float)
    return float(np.ptp(v) / np.mean(v)) if v.size and np.mean(v) != 0 else float("nan")
