"""Circle+Rank (NearID Tables 3/4): the Circle loss with the distractors pooled with the batch
negatives, and a hinge max-rank term. Conventions: :mod:`nearid_lib.nearid.losses`; registered in
:mod:`.registry`."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .terms import (Logits, LossBatch, Pool, batch_negatives, index_weights, masked_lse, masked_max, row_weights,
                    weighted_sum)

__all__ = ["circle_disc", "rank_hinge_max", "circle_terms"]


def circle_disc(L: Logits, pool: Pool, temperature: float, gamma: float, m: float) -> Tensor:
    """Circle loss (Sun et al. 2020) per anchor, on cosine similarities: positives = own valid positives,
    negatives = B_neg(i) pooled with the anchor's valid distractors; alpha_p = [1+m-s_p]_+, alpha_n =
    [s_n+m]_+ (detached, as in the Circle paper), Delta_p = 1-m, Delta_n = m:
    softplus(LSE_n gamma*alpha_n*(s_n - Delta_n) + LSE_p -gamma*alpha_p*(s_p - Delta_p)).
    Mean over non-rank_only rows with at least one valid positive and one negative."""
    sp = L.lp * temperature                                                       # [B,P]
    sn = torch.cat([L.lg, L.lr], dim=1) * temperature                             # [B,M*P+K]
    n_mask = torch.cat([batch_negatives(L), L.dist_mask], dim=1)
    ap = F.relu(1.0 + m - sp.detach())
    an = F.relu(sn.detach() + m)
    lse_p, has_p = masked_lse(-gamma * ap * (sp - (1.0 - m)), L.pos_mask)
    lse_n, has_n = masked_lse(gamma * an * (sn - m), n_mask)
    terms = F.softplus(lse_p + lse_n)
    tmask = has_p & has_n & ~L.rank_only
    return weighted_sum(terms, row_weights(tmask, pool).to(terms.dtype), tmask)


def rank_hinge_max(L: Logits, pool: Pool, average: str, margin: float) -> Tensor:
    """Circle's rank term, as Table 4 writes it: (1/K) sum_k [max_{B_neg(i)} l(a_i,g) - l(a_i,r_ik) + m]_+
    per valid (i,k), ``margin`` m in logit units. The max follows the paper (the authors' code averages
    the hinge over batch negatives instead; where the two differ the paper is the specification); m is
    their cosine margin 0.25 divided by the temperature (the paper gives no value)."""
    mx, has = masked_max(L.lg, batch_negatives(L))
    terms = F.relu(mx.unsqueeze(1) - L.lr + margin)
    tmask = L.dist_mask & has.unsqueeze(1)
    return weighted_sum(terms, index_weights(tmask, pool, average).to(terms.dtype), tmask)


def circle_terms(b: LossBatch) -> dict[str, Tensor]:
    """Circle with scale ``circle_gamma`` and cosine margin ``circle_m``; the hinge's margin enters in
    logit units (``circle_m`` / temperature)."""
    tau, m = b.temperature, float(b.hp["circle_m"])
    disc = circle_disc(b.logits, b.pool, tau, float(b.hp["circle_gamma"]), m)
    return {"disc": disc, "rank": rank_hinge_max(b.logits, b.pool, b.average, m / tau)}
