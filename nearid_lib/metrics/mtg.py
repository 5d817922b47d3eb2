"""MTG (Mind-the-Glitch) part-level metrics of NearID Table 1: M-O, M-Opair, SSR, PA."""
from __future__ import annotations

import numpy as np

from ._arrays import to_np
from .correlation import fisher_z_mean, pearson
from .nearid import ssr_pa_from_margins

__all__ = ["mtg_ssr_pa", "mtg_metrics"]


def mtg_ssr_pa(s_1_2, s_1_1p, s_2_2p, per_identity: bool = False) -> dict:
    """MTG SSR/PA: per pair, margins s(1,2) - s(1,1p) and s(1,2) - s(2,2p).

    The same identity in two backgrounds (1, 2) must be more similar than each image is to its own
    part-edited version (same background, different identity at the part level). A trial wins iff
    its margin > 0; SSR = share of pairs whose (existing) two trials both win; PA = wins / trials.
    NaN similarities remove the trial. MTG's PA is the strict rate in the authors' code too
    (``evaluation/sim_test.py`` and ``training/evaluator.py``: total wins of the two margins / their
    valid trials, no per-pair "overall" trial), so ``pa`` = ``pa_strict`` here, unlike NearID-bench's
    :func:`~nearid_lib.metrics.ssr_pa`.
    """
    a, b, c = (to_np(v, n).ravel() for v, n in ((s_1_2, "s_1_2"), (s_1_1p, "s_1_1p"), (s_2_2p, "s_2_2p")))
    if not (a.shape == b.shape == c.shape):
        raise ValueError(f"mtg_ssr_pa: shapes differ {a.shape}, {b.shape}, {c.shape}")
    margins = np.stack([a - b, a - c], axis=1)            # [N, 2]
    return ssr_pa_from_margins(margins, per_identity, overall=False)


def mtg_metrics(s_1_1p, s_2_2p, s_1_2p, s_2_1p, s_1_2, oracle_1, oracle_2) -> dict:
    """All MTG metrics of NearID Table 1: M-O, M-Opair, SSR, PA.

    Each similarity set is correlated (Pearson, over the MTG pairs) with the oracle of the *edited*
    image it involves (oracle = 1 - |part| / |object|, NearID Sec. 3.4: at most 1, negative when a
    part mask outgrows its object, kept as the paper's formula gives it):
    s(1,1p) ~ oracle_1, s(2,1p) ~ oracle_1, s(2,2p) ~ oracle_2, s(1,2p) ~ oracle_2.
    M-O is the Fisher-z mean of those four r; M-Opair the Fisher-z mean of the two same-background
    ones (s(1,1p), s(2,2p)). SSR/PA come from :func:`mtg_ssr_pa`.

    Returns:
        dict ``m_o``, ``m_opair``, ``r_1_1p``, ``r_2_2p``, ``r_1_2p``, ``r_2_1p``, ``ssr``, ``pa``,
        ``n_pairs`` (pairs with >= 1 trial), ``n_trials``.
    """
    o1, o2 = to_np(oracle_1, "oracle_1").ravel(), to_np(oracle_2, "oracle_2").ravel()
    bad = np.isfinite(o1) & (o1 > 1) | np.isfinite(o2) & (o2 > 1)
    if bad.any():
        raise ValueError(f"mtg_metrics: oracle above 1 (1 - |part| / |object| cannot be) at rows "
                         f"{np.flatnonzero(bad)[:5].tolist()}")
    r = {
        "r_1_1p": pearson(s_1_1p, o1),
        "r_2_2p": pearson(s_2_2p, o2),
        "r_1_2p": pearson(s_1_2p, o2),
        "r_2_1p": pearson(s_2_1p, o1),
    }
    sp = mtg_ssr_pa(s_1_2, s_1_1p, s_2_2p)
    return {
        "m_o": fisher_z_mean(list(r.values())),
        "m_opair": fisher_z_mean([r["r_1_1p"], r["r_2_2p"]]),
        **r,
        "ssr": sp["ssr"],
        "pa": sp["pa"],
        "n_pairs": sp["n_identities"],
        "n_trials": sp["n_trials"],
    }
