"""The NearID loss, every training-objective variant of NearID Tables 3/4, and the ID-Sim losses.

Conventions shared by every NearID-family loss (``compute_loss``):

* Inputs are L2-normalised embeddings: ``anchor`` [B,D], ``positives`` [B,P,D], ``distractors`` [B,K,D],
  with boolean validity masks ``pos_mask`` [B,P] and ``dist_mask`` [B,K] (None = all valid).
  Logits are l(u,v) = u.v / temperature.
* **Masked slots never influence anything.** Masked embeddings are replaced by zeros with ``torch.where``
  *before* any product, so a masked slot holding random values, 1e30 or NaN leaves the loss value and the
  gradients of valid entries bit-for-bit unchanged, and its own gradient is exactly 0 (multiplying by a 0
  mask would leak NaN through ``0 * nan``). The authors' code feeds padded slots into its softmax.
* **Global pool G.** The positives of every row of the (global) batch form the candidate pool G. In a
  multi-GPU run G is gathered across ranks with gradients (``nearid_lib.distributed.gather_pool``); local row
  i is global row ``pool.offset + i``, and anchor i's own positives G_i are excluded from its batch-negative
  pool B_neg(i) = G minus G_i. Distractors are per-anchor and never enter G.
* **Normalisation is global.** Every average divides by counts summed over all ranks, and the local loss is
  multiplied by the world size, so that (a) the mean of the per-rank losses equals the single-process loss
  of the global batch and (b) after DDP's gradient *averaging* the parameter gradient equals the
  single-process gradient. On one process both factors are 1.
* **rank_only rows** ([B] bool; MTG part edits, paper 4.1 "Joint Training") contribute ranking terms only:
  no discrimination / InfoNCE / SigLIP / Circle / cohesion term is formed for them. Their valid positives do
  stay in G (they are genuine images of *other* identities for every other anchor, and the batch-negative
  pool for their own ranking term is G minus their own positives, as for any row).
* Degenerate rows contribute nothing and are not counted: a row without a valid positive forms no
  discrimination term; a distractor whose anchor has an empty B_neg forms no ranking term.

Averaging of L_disc and L_rank (paper Eqs. 1-2, ``average="per_index"``, the default):
    L_disc = mean over positive indices p that are valid for at least one anchor of
             ( mean over anchors i whose slot p is valid of L_disc(i,p) )
and likewise L_rank over distractor indices k. ``average="flat"`` instead takes one mean over all valid
(i,p) (resp. (i,k)) terms; the two agree when the masks are full.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "Pool", "LOSSES", "LOSS_INFO", "nearid_loss", "compute_loss", "loss_hparams", "make_loss_parameters",
    "cohesion_loss", "idsim_cls_infonce", "sinkhorn_distance_matrix", "sinkhorn_patch_infonce",
    "idsim_loss",
]


def _identity(x: Tensor) -> Tensor:
    return x


@dataclass
class Pool:
    """The candidate pool G seen by the local rows (single process: the batch itself).

    positives [M,P,D] and pos_mask [M,P] cover all M global rows; ``offset`` is the global row index of
    local row 0; ``anchors`` [M,D] (needed by the symmetric InfoNCE variants only); ``reduce_sum`` sums a
    count tensor over ranks (identity on one process); ``world_size`` scales the local loss (module doc)."""

    positives: Tensor
    pos_mask: Tensor
    offset: int = 0
    world_size: int = 1
    anchors: Tensor | None = None
    reduce_sum: Callable[[Tensor], Tensor] = field(default=_identity)


# --------------------------------------------------------------------------- helpers
def _masks(anchor: Tensor, positives: Tensor, distractors: Tensor, pos_mask: Tensor | None,
           dist_mask: Tensor | None, rank_only: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Validate shapes; return boolean pos_mask [B,P], dist_mask [B,K], rank_only [B]."""
    if anchor.dim() != 2:
        raise ValueError(f"anchor must be [B,D], got shape {tuple(anchor.shape)}")
    B, D = anchor.shape
    if positives.dim() != 3 or positives.shape[0] != B or positives.shape[2] != D:
        raise ValueError(f"positives must be [B={B},P,D={D}], got shape {tuple(positives.shape)}")
    if distractors.dim() != 3 or distractors.shape[0] != B or distractors.shape[2] != D:
        raise ValueError(f"distractors must be [B={B},K,D={D}], got shape {tuple(distractors.shape)}")
    dev = anchor.device

    def _m(m: Tensor | None, shape: tuple[int, ...], name: str) -> Tensor:
        if m is None:
            return torch.ones(shape, dtype=torch.bool, device=dev)
        if tuple(m.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(m.shape)}")
        return m.to(device=dev, dtype=torch.bool)

    return (_m(pos_mask, tuple(positives.shape[:2]), "pos_mask"),
            _m(dist_mask, tuple(distractors.shape[:2]), "dist_mask"),
            _m(rank_only, (B,), "rank_only") if rank_only is not None
            else torch.zeros(B, dtype=torch.bool, device=dev))


def _clean(x: Tensor, mask: Tensor) -> Tensor:
    """Zero the masked slots with where (not a product) so NaN/inf there cannot leak into values or grads."""
    return torch.where(mask.unsqueeze(-1), x, torch.zeros((), dtype=x.dtype, device=x.device))


def _masked_lse(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """logsumexp over the last dim restricted to ``mask``; rows with no valid entry give 0 and any=False.

    Such rows are fed zeros instead of all -inf, whose logsumexp backward would be NaN."""
    any_ = mask.any(-1)
    neg_inf = torch.full((), float("-inf"), dtype=x.dtype, device=x.device)
    xm = torch.where(mask, x, neg_inf)
    xm = torch.where(any_.unsqueeze(-1), xm, torch.zeros((), dtype=x.dtype, device=x.device))
    lse = torch.logsumexp(xm, dim=-1)
    return torch.where(any_, lse, torch.zeros_like(lse)), any_


def _masked_max(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """max over the last dim restricted to ``mask``; rows with no valid entry give 0 and any=False."""
    any_ = mask.any(-1)
    neg_inf = torch.full((), float("-inf"), dtype=x.dtype, device=x.device)
    xm = torch.where(mask, x, neg_inf)
    xm = torch.where(any_.unsqueeze(-1), xm, torch.zeros((), dtype=x.dtype, device=x.device))
    mx = xm.max(dim=-1).values
    return torch.where(any_, mx, torch.zeros_like(mx)), any_


def _weighted_sum(terms: Tensor, weights: Tensor, mask: Tensor) -> Tensor:
    """sum(weights * terms) over ``mask`` only; invalid terms are removed with where (NaN-safe)."""
    zero = torch.zeros((), dtype=terms.dtype, device=terms.device)
    return torch.where(mask, terms * weights, zero).sum()


def _index_weights(mask: Tensor, pool: Pool, average: str) -> Tensor:
    """Per-term weights [B,N] realising the global average of valid terms (module doc, "Averaging")."""
    dt = torch.float64
    if average == "per_index":
        counts = pool.reduce_sum(mask.sum(0).to(dt))               # [N] valid anchors per index, global
        n_idx = (counts > 0).sum().to(dt)
        w = torch.where(counts > 0, 1.0 / (counts.clamp_min(1.0) * n_idx.clamp_min(1.0)),
                        torch.zeros_like(counts))
        return w.unsqueeze(0).expand_as(mask)
    if average == "flat":
        total = pool.reduce_sum(mask.sum().to(dt).reshape(1))[0]
        return torch.full(mask.shape, 1.0, dtype=dt, device=mask.device) / total.clamp_min(1.0)
    raise ValueError(f"average must be 'per_index' or 'flat', got {average!r}")


def _row_weights(mask: Tensor, pool: Pool) -> Tensor:
    """Weights [B] for a mean over the valid rows of the global batch."""
    total = pool.reduce_sum(mask.sum().to(torch.float64).reshape(1))[0]
    return torch.full(mask.shape, 1.0, dtype=torch.float64, device=mask.device) / total.clamp_min(1.0)


def _local_pool(anchor: Tensor, positives: Tensor, pos_mask: Tensor) -> Pool:
    return Pool(positives=positives, pos_mask=pos_mask, offset=0, world_size=1, anchors=anchor)


def _resolve_pool(pool: Pool | None, anchor: Tensor, positives: Tensor, pos_mask: Tensor,
                  gathered_positives: Tensor | None, gathered_pos_mask: Tensor | None,
                  owner_offset: int) -> Pool:
    if pool is not None:
        return pool
    if gathered_positives is None:
        return _local_pool(anchor, positives, pos_mask)
    gm = (torch.ones(gathered_positives.shape[:2], dtype=torch.bool, device=anchor.device)
          if gathered_pos_mask is None else gathered_pos_mask.to(torch.bool))
    # Counts stay local here: use distributed.gather_pool for exact global normalisation.
    return Pool(positives=gathered_positives, pos_mask=gm, offset=int(owner_offset), world_size=1)


@dataclass
class _Logits:
    """Everything the variants share: cleaned embeddings, logits and the pool masks."""

    a: Tensor          # [B,D]
    g: Tensor          # [B,P,D] cleaned local positives
    r: Tensor          # [B,K,D] cleaned distractors
    lp: Tensor         # [B,P]   l(a_i, g_ip)
    lr: Tensor         # [B,K]   l(a_i, r_ik)
    lg: Tensor         # [B,M*P] l(a_i, g) for every g in G
    g_valid: Tensor    # [B,M*P] g is a valid pool member
    own: Tensor        # [B,M*P] g belongs to G_i
    pos_mask: Tensor
    dist_mask: Tensor
    rank_only: Tensor


def _logits(anchor: Tensor, positives: Tensor, distractors: Tensor, pos_mask: Tensor, dist_mask: Tensor,
            rank_only: Tensor, pool: Pool, temperature: float) -> _Logits:
    B, P, D = positives.shape
    M = pool.positives.shape[0]
    if pool.positives.shape[1:] != (P, D) or tuple(pool.pos_mask.shape) != (M, P):
        raise ValueError(f"pool positives {tuple(pool.positives.shape)} / mask {tuple(pool.pos_mask.shape)}"
                         f" do not match local positives [B,{P},{D}]")
    if not 0 <= pool.offset <= M - B:
        raise ValueError(f"pool offset {pool.offset} out of range for {M} pool rows and {B} local rows")
    g = _clean(positives, pos_mask)
    r = _clean(distractors, dist_mask)
    G = _clean(pool.positives, pool.pos_mask.to(torch.bool)).reshape(M * P, D)   # [M*P, D]
    lg = anchor @ G.T / temperature                                               # [B, M*P]
    lp = torch.einsum("bd,bpd->bp", anchor, g) / temperature
    lr = torch.einsum("bd,bkd->bk", anchor, r) / temperature
    rows = torch.arange(M, device=anchor.device)
    own_rows = rows.unsqueeze(0) == (pool.offset + torch.arange(B, device=anchor.device)).unsqueeze(1)
    own = own_rows.unsqueeze(-1).expand(B, M, P).reshape(B, M * P)                # [B, M*P]
    g_valid = pool.pos_mask.to(torch.bool).reshape(1, M * P).expand(B, M * P)
    return _Logits(anchor, g, r, lp, lr, lg, g_valid, own, pos_mask, dist_mask, rank_only)


# --------------------------------------------------------------------------- building blocks
def _disc_nearid(L: _Logits, pool: Pool, average: str, use_distractors: bool = True) -> Tensor:
    """Eq. 1: -l(a_i,g_ip) + log(sum_{g in G} e^l(a_i,g) + sum_k e^l(a_i,r_ik)), per valid (i,p)."""
    if use_distractors:
        x = torch.cat([L.lg, L.lr], dim=1)
        m = torch.cat([L.g_valid, L.dist_mask], dim=1)
    else:
        x, m = L.lg, L.g_valid
    den, _ = _masked_lse(x, m)                                                   # [B]
    terms = den.unsqueeze(1) - L.lp                                              # [B,P]
    tmask = L.pos_mask & ~L.rank_only.unsqueeze(1)
    return _weighted_sum(terms, _index_weights(tmask, pool, average).to(terms.dtype), tmask)


def _bneg(L: _Logits) -> Tensor:
    return L.g_valid & ~L.own


def _rank_softplus(L: _Logits, pool: Pool, average: str) -> Tensor:
    """Eq. 2: softplus(LSE_{B_neg(i)} l(a_i,g) - l(a_i,r_ik)), per valid (i,k) with non-empty B_neg(i)."""
    lse, has = _masked_lse(L.lg, _bneg(L))                                       # [B]
    terms = F.softplus(lse.unsqueeze(1) - L.lr)                                  # [B,K]
    tmask = L.dist_mask & has.unsqueeze(1)
    return _weighted_sum(terms, _index_weights(tmask, pool, average).to(terms.dtype), tmask)


def _rank_hinge_max(L: _Logits, pool: Pool, average: str, margin: float) -> Tensor:
    """Circle's rank term (Table 4): [max_{B_neg(i)} l(a_i,g) - l(a_i,r_ik) + m]_+ per valid (i,k)."""
    mx, has = _masked_max(L.lg, _bneg(L))
    terms = F.relu(mx.unsqueeze(1) - L.lr + margin)
    tmask = L.dist_mask & has.unsqueeze(1)
    return _weighted_sum(terms, _index_weights(tmask, pool, average).to(terms.dtype), tmask)


def _rank_oracle(L: _Logits, pool: Pool, dist_oracle: Tensor | None, margin: float) -> Tensor:
    """RankNet on oracle-ordered distractor pairs: -log sigma(l_rk - l_rk' - m) for every pair of valid
    distractors of the same anchor with oracle_k > oracle_k' (higher oracle = less edited = should be more
    similar). NaN oracle = no oracle for that slot; ties form no pair. Flat mean over all pairs (global)."""
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

    Row i pairs anchor a_i with its first valid positive g1_i. a->g: softmax over {g1_j : valid rows j of
    the global batch} (+ a_i's valid distractors for R neg); g->a: softmax of g1_i over all global anchors.
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
    lse_ga = torch.logsumexp(l_ga, dim=1)
    # positive logit a_i.g1_i is the same number in both directions
    terms = 0.5 * ((lse_ag - pos_ag) + (lse_ga - pos_ag))
    tmask = v1 & ~L.rank_only
    return _weighted_sum(terms, _row_weights(tmask, pool).to(terms.dtype), tmask)


def _siglip_disc(L: _Logits, pool: Pool, temperature: float, scale: Tensor | float | None,
                 bias: Tensor | float) -> Tensor:
    """Pairwise sigmoid BCE over G (label 1 for the anchor's own positives, 0 otherwise) plus BCE(., 0) for
    the anchor's own distractors; logits z = t*cos + b. Per anchor: sum over its valid pairs; then the mean
    over rows with a valid positive that are not rank_only (SigLIP's 1/|B| sum_i sum_j)."""
    t = 1.0 / temperature if scale is None else scale
    cos_g = L.lg * temperature
    cos_r = L.lr * temperature
    z_g = t * cos_g + bias
    z_r = t * cos_r + bias
    sign = torch.where(L.own, torch.ones_like(z_g), -torch.ones_like(z_g))
    zero = torch.zeros((), dtype=z_g.dtype, device=z_g.device)
    per_row = (torch.where(L.g_valid, F.softplus(-sign * z_g), zero).sum(1)
               + torch.where(L.dist_mask, F.softplus(z_r), zero).sum(1))          # [B]
    tmask = L.pos_mask.any(1) & ~L.rank_only
    return _weighted_sum(per_row, _row_weights(tmask, pool).to(per_row.dtype), tmask)


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


# --------------------------------------------------------------------------- public losses
def nearid_loss(anchor: Tensor, positives: Tensor, distractors: Tensor, pos_mask: Tensor | None = None,
                dist_mask: Tensor | None = None, alpha: float = 0.5, temperature: float = 0.07,
                gathered_positives: Tensor | None = None, gathered_pos_mask: Tensor | None = None,
                owner_offset: int = 0, *, rank_only: Tensor | None = None, pool: Pool | None = None,
                average: str = "per_index") -> tuple[Tensor, dict[str, Tensor]]:
    """NearID loss L = L_disc + alpha * L_rank (paper Section 3.2, Eqs. 1-3).

    L_disc(i,p) = -log e^l(a_i,g_ip) / (sum_{g in G} e^l(a_i,g) + sum_k e^l(a_i,r_ik)), over valid (i,p) of
    non-rank_only rows; the anchor's other positives stay in the denominator.
    L_rank(i,k) = softplus(LSE_{g in B_neg(i)} l(a_i,g) - l(a_i,r_ik)), over valid (i,k).
    Averaging, masking, rank_only and multi-GPU conventions: see the module docstring.

    The pool G is the local batch, or ``pool`` (from ``distributed.gather_pool``: exact global
    normalisation), or ``gathered_positives``/``gathered_pos_mask``/``owner_offset`` (a gathered G with
    local normalisation). Returns (loss, {"disc", "rank"}), each already scaled by the world size."""
    pm, dm, ro = _masks(anchor, positives, distractors, pos_mask, dist_mask, rank_only)
    P = _resolve_pool(pool, anchor, positives, pm, gathered_positives, gathered_pos_mask, owner_offset)
    L = _logits(anchor, positives, distractors, pm, dm, ro, P, temperature)
    disc = _disc_nearid(L, P, average) * P.world_size
    rank = _rank_softplus(L, P, average) * P.world_size
    return disc + alpha * rank, {"disc": disc.detach(), "rank": rank.detach()}


# name -> (description, Table 4 "R usage")
LOSS_INFO: dict[str, tuple[str, str]] = {
    "infonce": ("symmetric InfoNCE, first valid positive, batch negatives", "-"),
    "infonce_rneg": ("symmetric InfoNCE + own distractors in the a->g denominator", "D"),
    "infonce_oracle": ("symmetric InfoNCE + alpha * RankNet on oracle-ordered distractor pairs", "R"),
    "infonce_rneg_oracle": ("InfoNCE + R neg + alpha * oracle RankNet", "D+R"),
    "siglip": ("pairwise sigmoid BCE over G and R + alpha * log-sigmoid rank (hard > batch)", "S"),
    "circle": ("Circle loss, R pooled with batch negatives + alpha * hinge max-rank (hard > batch)", "S"),
    "nearid": ("L_disc + alpha * L_rank (Eqs. 1-3)", "D+R"),
    "nearid_cohesion": ("L_disc + alpha * L_rank + beta * L_coh (E.6)", "D+R"),
}
LOSSES = tuple(LOSS_INFO)

_DEFAULTS: dict[str, Any] = {
    "alpha": 0.5, "beta": 0.1, "temperature": 0.07, "rank_margin": 1.0, "circle_gamma": 256.0,
    "circle_m": 0.25, "siglip_scale": None, "siglip_bias": -10.0, "average": "per_index",
}


def loss_hparams(cfg: Any = None, **overrides: Any) -> dict[str, Any]:
    """Loss hyper-parameters from a TrainConfig, a Profile (its ``.train``), a mapping or None (defaults),
    then ``overrides``. Unknown override keys raise."""
    out = dict(_DEFAULTS)
    if cfg is not None:
        src = getattr(cfg, "train", cfg)
        for k in _DEFAULTS:
            key = "disc_average" if k == "average" else k
            if isinstance(src, Mapping):
                if key in src:
                    out[k] = src[key]
            elif hasattr(src, key):
                out[k] = getattr(src, key)
    for k, v in overrides.items():
        if k not in out:
            raise KeyError(f"unknown loss hyper-parameter {k!r}; valid: {', '.join(out)}")
        out[k] = v
    return out


def make_loss_parameters(name: str, cfg: Any = None) -> torch.nn.ParameterDict:
    """Learnable loss parameters for ``name`` (SigLIP: log-scale and bias, initialised from the config when
    ``train.siglip_learnable``); empty otherwise. Pass the result as ``params`` to :func:`compute_loss` and
    give it to the optimiser."""
    hp = loss_hparams(cfg)
    src = getattr(cfg, "train", cfg)
    learnable = bool(getattr(src, "siglip_learnable", False)) if src is not None else False
    if name != "siglip" or not learnable:
        return torch.nn.ParameterDict()
    t0 = hp["siglip_scale"] if hp["siglip_scale"] is not None else 1.0 / hp["temperature"]
    return torch.nn.ParameterDict({
        "siglip_log_scale": torch.nn.Parameter(torch.tensor(math.log(t0))),
        "siglip_bias": torch.nn.Parameter(torch.tensor(float(hp["siglip_bias"]))),
    })


def compute_loss(name: str, anchor: Tensor, positives: Tensor, distractors: Tensor,
                 pos_mask: Tensor | None = None, dist_mask: Tensor | None = None, cfg: Any = None, *,
                 dist_oracle: Tensor | None = None, rank_only: Tensor | None = None, pool: Pool | None = None,
                 params: Mapping[str, Tensor] | None = None, **overrides: Any
                 ) -> tuple[Tensor, dict[str, Tensor]]:
    """Any training objective of NearID Tables 3/4 by name (see ``LOSSES``); returns (loss, parts).

    ``cfg``: TrainConfig / Profile / mapping / None, with keyword ``overrides`` (alpha, beta, temperature,
    rank_margin, circle_gamma, circle_m, siglip_scale, siglip_bias, average). Every variant is
    L = L_disc + alpha * L_rank (+ beta * L_coh for nearid_cohesion); parts = {"disc", "rank", ("coh")}.
    ``dist_oracle`` [B,K] float: per-distractor oracle score (MTG: 1 - |part|/|object| of the edit; higher =
    closer to the anchor identity; NaN = unknown), used only by the *_oracle variants. ``rank_only`` [B]:
    rows that form ranking terms only (MTG). ``pool``: the gathered global pool (multi-GPU).
    Margins (``rank_margin``) are in logit units, as written in Table 4."""
    if name not in LOSS_INFO:
        raise KeyError(f"unknown loss {name!r}; valid: {', '.join(LOSSES)}")
    hp = loss_hparams(cfg, **overrides)
    tau, alpha, avg = float(hp["temperature"]), float(hp["alpha"]), hp["average"]
    pm, dm, ro = _masks(anchor, positives, distractors, pos_mask, dist_mask, rank_only)
    P = pool if pool is not None else _local_pool(anchor, positives, pm)
    L = _logits(anchor, positives, distractors, pm, dm, ro, P, tau)
    zero = anchor.sum() * 0.0
    parts: dict[str, Tensor] = {}
    if name in ("infonce", "infonce_rneg", "infonce_oracle", "infonce_rneg_oracle"):
        disc = _infonce_sym(anchor, positives, pm, L, P, tau, use_distractors="rneg" in name)
        rank = _rank_oracle(L, P, dist_oracle, float(hp["rank_margin"])) if "oracle" in name else zero
    elif name == "siglip":
        scale, bias = hp["siglip_scale"], hp["siglip_bias"]
        if params is not None and "siglip_log_scale" in params:
            scale, bias = params["siglip_log_scale"].exp(), params["siglip_bias"]
        disc = _siglip_disc(L, P, tau, scale, bias)
        # -log sigma(l_rk - LSE_b) == softplus(LSE_b - l_rk): the same term as NearID's L_rank.
        rank = _rank_softplus(L, P, avg)
    elif name == "circle":
        disc = _circle_disc(L, P, tau, float(hp["circle_gamma"]), float(hp["circle_m"]))
        rank = _rank_hinge_max(L, P, avg, float(hp["rank_margin"]))
    else:  # nearid, nearid_cohesion
        disc = _disc_nearid(L, P, avg)
        rank = _rank_softplus(L, P, avg)
    W = P.world_size
    disc, rank = disc * W, rank * W
    loss = disc + alpha * rank
    parts["disc"], parts["rank"] = disc.detach(), rank.detach()
    if name == "nearid_cohesion":
        coh = cohesion_loss(positives, pm, ro, P) * W
        loss = loss + float(hp["beta"]) * coh
        parts["coh"] = coh.detach()
    return loss, parts


# --------------------------------------------------------------------------- ID-Sim
def idsim_cls_infonce(anchor: Tensor, positive: Tensor, hard_negative: Tensor,
                      temperature: float = 0.07) -> Tensor:
    """ID-Sim global loss (ID-Sim Eq. 2): InfoNCE of anchor i against the candidates {positives of every
    row} + {hard negatives of every row}, target = its own positive. Inputs [B,D] are L2-normalised here
    (cosine similarity). One direction (anchor -> candidates); mean over rows."""
    a, p, n = (F.normalize(x, dim=-1) for x in (anchor, positive, hard_negative))
    cand = torch.cat([p, n], dim=0)                                               # [2B, D]
    logits = a @ cand.T / temperature                                             # [B, 2B]
    target = torch.arange(a.shape[0], device=a.device)
    return F.cross_entropy(logits, target)


_SINKHORN: dict[tuple[float, str], Any] = {}


def _samples_loss(blur: float, backend: str):
    key = (float(blur), backend)
    if key not in _SINKHORN:
        from geomloss import SamplesLoss
        # diameter fixed to 2 (unit vectors): geomloss otherwise estimates it from the whole batched
        # input, so a pair's value would depend on which other pairs share the call.
        _SINKHORN[key] = SamplesLoss("sinkhorn", p=2, blur=blur, diameter=2.0, backend=backend)
    return _SINKHORN[key]


def sinkhorn_distance_matrix(tokens_x: Tensor, tokens_y: Tensor, blur: float = 0.05,
                             backend: str = "tensorized") -> Tensor:
    """S[i,j] = geomloss Sinkhorn divergence (p=2, uniform weights, debiased, cost |x-y|^2/2) between the
    L2-normalised token sets tokens_x[i] [N,D] and tokens_y[j] [N',D]; shape [Bx, By]. All pairs go
    through one batched call; the result equals per-pair calls of SamplesLoss("sinkhorn", p=2, blur,
    diameter=2) (a fixed diameter makes pairs independent of their batch-mates)."""
    x = F.normalize(tokens_x, dim=-1)
    y = F.normalize(tokens_y, dim=-1)
    Bx, By = x.shape[0], y.shape[0]
    xx = x.unsqueeze(1).expand(Bx, By, *x.shape[1:]).reshape(Bx * By, *x.shape[1:])   # [Bx*By, N, D]
    yy = y.unsqueeze(0).expand(Bx, By, *y.shape[1:]).reshape(Bx * By, *y.shape[1:])   # [Bx*By, N', D]
    return _samples_loss(blur, backend)(xx.contiguous(), yy.contiguous()).reshape(Bx, By)


def sinkhorn_patch_infonce(tokens_a: Tensor, tokens_b: Tensor, tokens_neg: Tensor, blur: float = 0.05,
                           temperature: float = 0.07, backend: str = "tensorized") -> Tensor:
    """ID-Sim patch loss: the InfoNCE of :func:`idsim_cls_infonce` with similarity = -Sinkhorn distance
    between L2-normalised patch-token sets (ID-Sim Eq. 3), logits = -S / temperature. Candidates for row i:
    tokens_b of every row (target: its own) and tokens_neg of every row. Inputs [B,N,D]."""
    B = tokens_a.shape[0]
    S = sinkhorn_distance_matrix(tokens_a, torch.cat([tokens_b, tokens_neg], dim=0), blur, backend)  # [B,2B]
    target = torch.arange(B, device=tokens_a.device)
    return F.cross_entropy(-S / temperature, target)


def idsim_loss(cls_a: Tensor, cls_p: Tensor, cls_n: Tensor, tok_a: Tensor, tok_p: Tensor, tok_n: Tensor,
               lam: float = 1.0, temperature: float = 0.07, blur: float = 0.05
               ) -> tuple[Tensor, dict[str, Tensor]]:
    """ID-Sim total loss L = L_CLS + lam * L_patch (ID-Sim Eq. 1); returns (loss, {"cls", "patch"})."""
    lc = idsim_cls_infonce(cls_a, cls_p, cls_n, temperature)
    lp = sinkhorn_patch_infonce(tok_a, tok_p, tok_n, blur, temperature)
    return lc + lam * lp, {"cls": lc.detach(), "patch": lp.detach()}
