"""The NearID loss (paper Sec. 3.2, Eqs. 1-3: L_disc + alpha * L_rank) and its positive-cohesion
variant (App. E.6). Conventions: :mod:`nearid_lib.nearid.losses`; registered in :mod:`.registry`.
``nearid_loss`` is also callable on its own, with the gathered-pool arguments of a custom loop."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .terms import (Logits, LossBatch, Pool, clean, index_weights, masked_lse, pool_logits, rank_softplus,
                    resolve_pool, row_weights, validate_masks, weighted_sum)

__all__ = ["nearid_loss", "disc_nearid", "cohesion_loss", "nearid_terms", "nearid_cohesion_terms"]


def nearid_loss(anchor: Tensor, positives: Tensor, distractors: Tensor, pos_mask: Tensor | None = None,
                dist_mask: Tensor | None = None, alpha: float = 0.5, temperature: float = 0.07,
                gathered_positives: Tensor | None = None, gathered_pos_mask: Tensor | None = None,
                owner_offset: int = 0, *, rank_only: Tensor | None = None, pool: Pool | None = None,
                average: str = "per_index") -> tuple[Tensor, dict[str, Tensor]]:
    """NearID loss L = L_disc + alpha * L_rank (paper Section 3.2, Eqs. 1-3).

    L_disc(i,p) = -log e^l(a_i,g_ip) / (sum_{g in G} e^l(a_i,g) + sum_k e^l(a_i,r_ik)), over valid (i,p) of
    non-rank_only rows; the anchor's other positives stay in the denominator.
    L_rank(i,k) = softplus(LSE_{g in B_neg(i)} l(a_i,g) - l(a_i,r_ik)), over valid (i,k).
    Averaging, masking, rank_only and multi-GPU conventions: :mod:`nearid_lib.nearid.losses`.

    The pool G is the local batch, or ``pool`` (from ``distributed.gather_pool``: exact global
    normalisation), or ``gathered_positives``/``gathered_pos_mask``/``owner_offset`` (a gathered G with
    local normalisation). Returns (loss, {"disc", "rank"}), each already scaled by the world size."""
    pm, dm, ro = validate_masks(anchor, positives, distractors, pos_mask, dist_mask, rank_only)
    P = resolve_pool(pool, anchor, positives, pm, gathered_positives, gathered_pos_mask, owner_offset)
    L = pool_logits(anchor, positives, distractors, pm, dm, ro, P, temperature)
    disc = disc_nearid(L, P, average) * P.world_size
    rank = rank_softplus(L, P, average) * P.world_size
    return disc + alpha * rank, {"disc": disc.detach(), "rank": rank.detach()}


def disc_nearid(L: Logits, pool: Pool, average: str, use_distractors: bool = True) -> Tensor:
    """Eq. 1: -l(a_i,g_ip) + log(sum_{g in G} e^l(a_i,g) + sum_k e^l(a_i,r_ik)), per valid (i,p)."""
    if use_distractors:
        x = torch.cat([L.lg, L.lr], dim=1)
        m = torch.cat([L.g_valid, L.dist_mask], dim=1)
    else:
        x, m = L.lg, L.g_valid
    den, _ = masked_lse(x, m)                                                    # [B]
    terms = den.unsqueeze(1) - L.lp                                              # [B,P]
    tmask = L.pos_mask & ~L.rank_only.unsqueeze(1)
    return weighted_sum(terms, index_weights(tmask, pool, average).to(terms.dtype), tmask)


def cohesion_loss(positives: Tensor, pos_mask: Tensor | None = None, rank_only: Tensor | None = None,
                  pool: Pool | None = None) -> Tensor:
    """Positive cohesion (paper E.6, Eqs. 7-8): per row, (1/P_i) sum_p (1 - cos(g_ip, gbar_i)) with the
    L2-normalised prototype gbar_i of its P_i valid positives; rows with fewer than two valid positives
    contribute 0 but still count in the mean, which runs over all non-rank_only rows of the global batch."""
    B, P, D = positives.shape
    pm = torch.ones(B, P, dtype=torch.bool, device=positives.device) if pos_mask is None \
        else pos_mask.to(torch.bool)
    ro = torch.zeros(B, dtype=torch.bool, device=positives.device) if rank_only is None \
        else rank_only.to(torch.bool)
    pool = pool or Pool(positives=positives, pos_mask=pm)
    g = clean(positives, pm)
    proto = F.normalize(g.sum(1), dim=-1, eps=1e-12)                              # [B,D]
    cos = (g * proto.unsqueeze(1)).sum(-1) / g.norm(dim=-1).clamp_min(1e-12)      # [B,P]
    n = pm.sum(1)                                                                 # [B]
    zero = torch.zeros((), dtype=cos.dtype, device=cos.device)
    per_row = torch.where(pm, 1.0 - cos, zero).sum(1) / n.clamp_min(1).to(cos.dtype)
    per_row = torch.where(n >= 2, per_row, zero)
    rows = ~ro
    return weighted_sum(per_row, row_weights(rows, pool).to(per_row.dtype), rows)


def nearid_terms(b: LossBatch) -> dict[str, Tensor]:
    """L_disc (Eq. 1) and L_rank (Eq. 2)."""
    return {"disc": disc_nearid(b.logits, b.pool, b.average), "rank": rank_softplus(b.logits, b.pool, b.average)}


def nearid_cohesion_terms(b: LossBatch) -> dict[str, Tensor]:
    """L_disc, L_rank and the cohesion term L_coh of E.6 (weighed by ``beta``)."""
    return {**nearid_terms(b), "coh": cohesion_loss(b.positives, b.pos_mask, b.rank_only, b.pool)}
