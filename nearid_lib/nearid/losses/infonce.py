"""Symmetric InfoNCE and its Table 3/4 variants (+R neg: the distractors in the softmax denominators;
+Oracle: RankNet on oracle-ordered distractor pairs). Conventions: :mod:`nearid_lib.nearid.losses`;
registered in :mod:`.registry`."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .terms import Logits, LossBatch, Pool, clean, masked_lse, row_weights, weighted_sum

__all__ = ["infonce_sym", "rank_oracle", "first_positive", "infonce_terms"]


def first_positive(positives: Tensor, pos_mask: Tensor) -> tuple[Tensor, Tensor]:
    """First valid positive of every row [N,D] (zeros where none) and whether it exists [N]."""
    idx = pos_mask.to(torch.int64).argmax(dim=1)                                  # first True (0 if none)
    g1 = clean(positives, pos_mask)[torch.arange(positives.shape[0], device=positives.device), idx]
    return g1, pos_mask.any(dim=1)


def infonce_sym(anchor: Tensor, positives: Tensor, pos_mask: Tensor, L: Logits, pool: Pool,
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
    g1, v1 = first_positive(positives, pos_mask)                                  # [B,D], [B]
    G1, V1 = first_positive(pool.positives, pool.pos_mask.to(torch.bool))         # [M,D], [M]
    A = pool.anchors                                                              # [M,D]
    M = G1.shape[0]
    l_ag = anchor @ G1.T / temperature                                            # [B,M]
    pos_ag = (anchor * g1).sum(-1) / temperature                                  # [B]
    m_ag = V1.unsqueeze(0).expand(B, M)
    if use_distractors:
        l_ag = torch.cat([l_ag, L.lr], dim=1)
        m_ag = torch.cat([m_ag, L.dist_mask], dim=1)
    lse_ag, _ = masked_lse(l_ag, m_ag)
    l_ga = g1 @ A.T / temperature                                                 # [B,M]
    if use_distractors:
        l_gr = torch.einsum("bd,bkd->bk", g1, L.r) / temperature                  # [B,K] g1_i vs r_ik
        lse_ga, _ = masked_lse(torch.cat([l_ga, l_gr], dim=1),
                               torch.cat([torch.ones_like(l_ga, dtype=torch.bool), L.dist_mask], dim=1))
    else:
        lse_ga = torch.logsumexp(l_ga, dim=1)
    # positive logit a_i.g1_i is the same number in both directions
    terms = 0.5 * ((lse_ag - pos_ag) + (lse_ga - pos_ag))
    tmask = v1 & ~L.rank_only
    return weighted_sum(terms, row_weights(tmask, pool).to(terms.dtype), tmask)


def rank_oracle(L: Logits, pool: Pool, dist_oracle: Tensor | None, margin: float) -> Tensor:
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
    w = row_weights(pair.reshape(-1), pool).reshape(pair.shape).to(terms.dtype)
    return weighted_sum(terms, w, pair)


def infonce_terms(b: LossBatch, *, rneg: bool = False, oracle: bool = False) -> dict[str, Tensor]:
    """Symmetric InfoNCE (Table 4 row 1); ``rneg``: +R neg (the anchor's distractors in both softmax
    denominators); ``oracle``: +Oracle (RankNet on oracle-ordered distractor pairs as the ranking term,
    else none). The registry names each combination (``functools.partial``)."""
    tau = b.temperature
    disc = infonce_sym(b.anchor, b.positives, b.pos_mask, b.logits, b.pool, tau, use_distractors=rneg)
    rank = (rank_oracle(b.logits, b.pool, b.dist_oracle, float(b.hp["oracle_margin"]) / tau) if oracle
            else b.anchor.sum() * 0.0)       # no ranking term: a zero of the anchor's dtype, in the graph
    return {"disc": disc, "rank": rank}
