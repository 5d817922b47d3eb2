"""Terms of the training-objective variants of NearID Tables 3/4 (everything but the NearID loss
itself): symmetric InfoNCE (+ R neg), oracle RankNet, SigLIP, Circle and its hinge rank term, and the
positive-cohesion term of E.6. Conventions: :mod:`nearid_lib.nearid.losses`."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .loss_terms import (Pool, _bneg, _clean, _Logits, _masked_lse, _masked_max, _row_weights, _index_weights,
                         _weighted_sum)

__all__ = ["cohesion_loss"]


def _rank_hinge_max(L: _Logits, pool: Pool, average: str, margin: float) -> Tensor:
    """Circle's rank term, as Table 4 writes it: (1/K) sum_k [max_{B_neg(i)} l(a_i,g) - l(a_i,r_ik) + m]_+
    per valid (i,k), ``margin`` m in logit units. The max follows the paper (the authors' code averages
    the hinge over batch negatives instead; where the two differ the paper is the specification); m is
    their cosine margin 0.25 divided by the temperature (the paper gives no value)."""
    mx, has = _masked_max(L.lg, _bneg(L))
    terms = F.relu(mx.unsqueeze(1) - L.lr + margin)
    tmask = L.dist_mask & has.unsqueeze(1)
    return _weighted_sum(terms, _index_weights(tmask, pool, average).to(terms.dtype), tmask)


def _rank_oracle(L: _Logits, pool: Pool, dist_oracle: Tensor | None, margin: float) -> Tensor:
    """RankNet on oracle-ordered distractor pairs: -log sigma(l_rk - l_rk' - m) for every pair of valid
    distractors of the same anchor with oracle_k > oracle_k' (higher oracle = less edited = should be more
    similar). NaN oracle = no oracle for that slot; ties form no pair. Flat mean over all pairs (global),
    as in the authors' code; m in logit units (their cosine margin 0.05 / temperature, compute_loss)."""
    B, K = L.lr.shape
    if dist_oracle is None:
        return L.lr.sum() * 0.0
    if tuple(dist_oracle.shape) != (B, K):
        raise ValueError(f"dist_oracle must have shape {(B, K)}, got {tuple(dist_oracle.shape)}")
    o = dist_oracle.to(device=L.lr.device, dtype=L.lr.dtype)
    ok = L.dist_mask & torch.isfinite(o)
    o = torch.where(ok, o, torch.zeros_like(o))
    pair = ok.unsqueeze(2) & ok.unsqueeze(1) & (o.unsqueeze(2) > o.unsqueeze(1))  # [B,K,K]: k better than k'
    terms = F.softplus(-(L.lr.unsqueeze(2) - L.lr.unsqueeze(1) - margin))          # [B,K,K]
    w = _row_weights(pair.reshape(-1), pool).reshape(pair.shape).to(terms.dtype)
    return _weighted_sum(terms, w, pair)


def _first_positive(positives: Tensor, pos_mask: Tensor) -> tuple[Tensor, Tensor]:
    """First valid positive of every row [N,D] (zeros where none) and whether it exists [N]."""
    idx = pos_mask.to(torch.int64).argmax(dim=1)                                  # first True (0 if none)
    g1 = _clean(positives, pos_mask)[torch.arange(positives.shape[0], device=positives.device), idx]
    return g1, pos_mask.any(dim=1)


def _infonce_sym(anchor: Tensor, positives: Tensor, pos_mask: Tensor, L: _Logits, pool: Pool,
                 temperature: float, use_distractors: bool) -> Tensor:
    """Symmetric single-positive InfoNCE over the global batch (Table 4 row 1, + R neg when asked).

    Row i pairs anchor a_i with its first valid positive g1_i (training puts a view drawn at random among
    the valid ones in that slot, the authors' convention for "1-pos"). a->g: softmax over {g1_j : valid
    rows j of the global batch}; g->a: softmax of g1_i over all global anchors. For R neg, a_i's valid
    distractors join the denominators of *both* directions (a_i vs r_ik and g1_i vs r_ik), as in the
    authors' code (Table 4 only says "appended as extra negatives in softmax over G").
    Loss = (mean_i a->g + mean_i g->a) / 2 over rows with a valid positive that are not rank_only."""
    B = anchor.shape[0]
    if pool.anchors is None:
        raise ValueError("symmetric InfoNCE needs pool.anchors (gather_pool(..., with_anchors=True))")
    g1, v1 = _first_positive(positives, pos_mask)                                 # [B,D], [B]
    G1, V1 = _first_positive(pool.positives, pool.pos_mask.to(torch.bool))        # [M,D], [M]
    A = pool.anchors                                                              # [M,D]
    M = G1.shape[0]
    l_ag = anchor @ G1.T / temperature                                            # [B,M]
    pos_ag = (anchor * g1).sum(-1) / temperature                                  # [B]
    m_ag = V1.unsqueeze(0).expand(B, M)
    if use_distractors:
        l_ag = torch.cat([l_ag, L.lr], dim=1)
        m_ag = torch.cat([m_ag, L.dist_mask], dim=1)
    lse_ag, _ = _masked_lse(l_ag, m_ag)
    l_ga = g1 @ A.T / temperature                                                 # [B,M]
    if use_distractors:
        l_gr = torch.einsum("bd,bkd->bk", g1, L.r) / temperature                  # [B,K] g1_i vs r_ik
        lse_ga, _ = _masked_lse(torch.cat([l_ga, l_gr], dim=1),
                                torch.cat([torch.ones_like(l_ga, dtype=torch.bool), L.dist_mask], dim=1))
    else:
        lse_ga = torch.logsumexp(l_ga, dim=1)
    # positive logit a_i.g1_i is the same number in both directions
    terms = 0.5 * ((lse_ag - pos_ag) + (lse_ga - pos_ag))
    tmask = v1 & ~L.rank_only
    return _weighted_sum(terms, _row_weights(tmask, pool).to(terms.dtype), tmask)


def _siglip_disc(L: _Logits, pool: Pool, temperature: float, scale: Tensor | float | None,
                 bias: Tensor | float) -> Tensor:
    """Pairwise sigmoid BCE over G (label 1 for the anchor's own positives, 0 otherwise) plus BCE(., 0) for
    the anchor's own distractors; logits z = t*cos + b. Each part is *averaged* over its valid pairs
    (anchors = rows with a valid positive that are not rank_only): mean over (anchor, pool member) pairs
    + mean over (anchor, distractor) pairs, the authors' convention. A sum per anchor (SigLIP's
    1/|B| sum_i sum_j) would scale the term with the pool size, so alpha would weigh a different
    objective at every batch size."""
    t = 1.0 / temperature if scale is None else scale
    cos_g = L.lg * temperature
    cos_r = L.lr * temperature
    z_g = t * cos_g + bias
    z_r = t * cos_r + bias
    sign = torch.where(L.own, torch.ones_like(z_g), -torch.ones_like(z_g))
    rows = (L.pos_mask.any(1) & ~L.rank_only).unsqueeze(1)
    pm, dm = L.g_valid & rows, L.dist_mask & rows
    bce_g = F.softplus(-sign * z_g)                                               # [B, M*P]
    bce_r = F.softplus(z_r)                                                       # [B, K]
    return (_weighted_sum(bce_g, _row_weights(pm.reshape(-1), pool).reshape(pm.shape).to(bce_g.dtype), pm)
            + _weighted_sum(bce_r, _row_weights(dm.reshape(-1), pool).reshape(dm.shape).to(bce_r.dtype), dm))


def _circle_disc(L: _Logits, pool: Pool, temperature: float, gamma: float, m: float) -> Tensor:
    """Circle loss (Sun et al. 2020) per anchor, on cosine similarities: positives = own valid positives,
    negatives = B_neg(i) pooled with the anchor's valid distractors; alpha_p = [1+m-s_p]_+, alpha_n =
    [s_n+m]_+ (detached, as in the Circle paper), Delta_p = 1-m, Delta_n = m:
    softplus(LSE_n gamma*alpha_n*(s_n - Delta_n) + LSE_p -gamma*alpha_p*(s_p - Delta_p)).
    Mean over non-rank_only rows with at least one valid positive and one negative."""
    sp = L.lp * temperature                                                       # [B,P]
    sn = torch.cat([L.lg, L.lr], dim=1) * temperature                             # [B,M*P+K]
    n_mask = torch.cat([_bneg(L), L.dist_mask], dim=1)
    ap = F.relu(1.0 + m - sp.detach())
    an = F.relu(sn.detach() + m)
    lse_p, has_p = _masked_lse(-gamma * ap * (sp - (1.0 - m)), L.pos_mask)
    lse_n, has_n = _masked_lse(gamma * an * (sn - m), n_mask)
    terms = F.softplus(lse_p + lse_n)
    tmask = has_p & has_n & ~L.rank_only
    return _weighted_sum(terms, _row_weights(tmask, pool).to(terms.dtype), tmask)


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
    g = _clean(positives, pm)
    proto = F.normalize(g.sum(1), dim=-1, eps=1e-12)                              # [B,D]
    cos = (g * proto.unsqueeze(1)).sum(-1) / g.norm(dim=-1).clamp_min(1e-12)      # [B,P]
    n = pm.sum(1)                                                                 # [B]
    zero = torch.zeros((), dtype=cos.dtype, device=cos.device)
    per_row = torch.where(pm, 1.0 - cos, zero).sum(1) / n.clamp_min(1).to(cos.dtype)
    per_row = torch.where(n >= 2, per_row, zero)
    rows = ~ro
    return _weighted_sum(per_row, _row_weights(rows, pool).to(per_row.dtype), rows)
