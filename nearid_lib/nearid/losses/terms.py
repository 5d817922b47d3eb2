"""Shared machinery of the NearID-family losses (conventions: :mod:`nearid_lib.nearid.losses`):
validated masks, NaN-safe masked reductions, the candidate pool G, the logits every loss shares
(:class:`Logits`), what a registered loss receives (:class:`LossBatch`), and NearID's ranking term
(Eq. 2, :func:`rank_softplus`), which SigLIP's row reuses. Public within the package: every loss
module builds on these names."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["Pool", "Logits", "LossBatch", "validate_masks", "clean", "masked_lse", "masked_max",
           "weighted_sum", "index_weights", "row_weights", "local_pool", "resolve_pool", "pool_logits",
           "batch_negatives", "rank_softplus"]


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
def validate_masks(anchor: Tensor, positives: Tensor, distractors: Tensor, pos_mask: Tensor | None,
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


def clean(x: Tensor, mask: Tensor) -> Tensor:
    """Zero the masked slots with where (not a product) so NaN/inf there cannot leak into values or grads."""
    return torch.where(mask.unsqueeze(-1), x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_lse(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """logsumexp over the last dim restricted to ``mask``; rows with no valid entry give 0 and any=False.

    Such rows are fed zeros instead of all -inf, whose logsumexp backward would be NaN."""
    any_ = mask.any(-1)
    neg_inf = torch.full((), float("-inf"), dtype=x.dtype, device=x.device)
    xm = torch.where(mask, x, neg_inf)
    xm = torch.where(any_.unsqueeze(-1), xm, torch.zeros((), dtype=x.dtype, device=x.device))
    lse = torch.logsumexp(xm, dim=-1)
    return torch.where(any_, lse, torch.zeros_like(lse)), any_


def masked_max(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """max over the last dim restricted to ``mask``; rows with no valid entry give 0 and any=False."""
    any_ = mask.any(-1)
    neg_inf = torch.full((), float("-inf"), dtype=x.dtype, device=x.device)
    xm = torch.where(mask, x, neg_inf)
    xm = torch.where(any_.unsqueeze(-1), xm, torch.zeros((), dtype=x.dtype, device=x.device))
    mx = xm.max(dim=-1).values
    return torch.where(any_, mx, torch.zeros_like(mx)), any_


def weighted_sum(terms: Tensor, weights: Tensor, mask: Tensor) -> Tensor:
    """sum(weights * terms) over ``mask`` only; invalid terms are removed with where (NaN-safe)."""
    zero = torch.zeros((), dtype=terms.dtype, device=terms.device)
    return torch.where(mask, terms * weights, zero).sum()


def index_weights(mask: Tensor, pool: Pool, average: str) -> Tensor:
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


def row_weights(mask: Tensor, pool: Pool) -> Tensor:
    """Weights [B] for a mean over the valid rows of the global batch."""
    total = pool.reduce_sum(mask.sum().to(torch.float64).reshape(1))[0]
    return torch.full(mask.shape, 1.0, dtype=torch.float64, device=mask.device) / total.clamp_min(1.0)


def local_pool(anchor: Tensor, positives: Tensor, pos_mask: Tensor) -> Pool:
    """The pool of a single process: the batch's own positives (and anchors, for InfoNCE)."""
    return Pool(positives=positives, pos_mask=pos_mask, offset=0, world_size=1, anchors=anchor)


def resolve_pool(pool: Pool | None, anchor: Tensor, positives: Tensor, pos_mask: Tensor,
                 gathered_positives: Tensor | None, gathered_pos_mask: Tensor | None,
                 owner_offset: int) -> Pool:
    """``pool`` if given, else a pool of ``gathered_positives`` (local normalisation), else the local one."""
    if pool is not None:
        return pool
    if gathered_positives is None:
        return local_pool(anchor, positives, pos_mask)
    gm = (torch.ones(gathered_positives.shape[:2], dtype=torch.bool, device=anchor.device)
          if gathered_pos_mask is None else gathered_pos_mask.to(torch.bool))
    # Counts stay local here: use distributed.gather_pool for exact global normalisation.
    return Pool(positives=gathered_positives, pos_mask=gm, offset=int(owner_offset), world_size=1)


@dataclass
class Logits:
    """Everything the losses share: cleaned embeddings, logits and the pool masks."""

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


def pool_logits(anchor: Tensor, positives: Tensor, distractors: Tensor, pos_mask: Tensor, dist_mask: Tensor,
                rank_only: Tensor, pool: Pool, temperature: float) -> Logits:
    """The logits l(u,v) = u.v / temperature of every anchor against its positives, its distractors and
    the pool G, with G's validity and ownership masks (masked slots cleaned first)."""
    B, P, D = positives.shape
    M = pool.positives.shape[0]
    if pool.positives.shape[1:] != (P, D) or tuple(pool.pos_mask.shape) != (M, P):
        raise ValueError(f"pool positives {tuple(pool.positives.shape)} / mask {tuple(pool.pos_mask.shape)}"
                         f" do not match local positives [B,{P},{D}]")
    if not 0 <= pool.offset <= M - B:
        raise ValueError(f"pool offset {pool.offset} out of range for {M} pool rows and {B} local rows")
    g = clean(positives, pos_mask)
    r = clean(distractors, dist_mask)
    G = clean(pool.positives, pool.pos_mask.to(torch.bool)).reshape(M * P, D)   # [M*P, D]
    lg = anchor @ G.T / temperature                                               # [B, M*P]
    lp = torch.einsum("bd,bpd->bp", anchor, g) / temperature
    lr = torch.einsum("bd,bkd->bk", anchor, r) / temperature
    rows = torch.arange(M, device=anchor.device)
    own_rows = rows.unsqueeze(0) == (pool.offset + torch.arange(B, device=anchor.device)).unsqueeze(1)
    own = own_rows.unsqueeze(-1).expand(B, M, P).reshape(B, M * P)                # [B, M*P]
    g_valid = pool.pos_mask.to(torch.bool).reshape(1, M * P).expand(B, M * P)
    return Logits(anchor, g, r, lp, lr, lg, g_valid, own, pos_mask, dist_mask, rank_only)


@dataclass
class LossBatch:
    """What :func:`~nearid_lib.nearid.losses.compute_loss` hands a registered loss: the checked
    embeddings, the validated masks, the pool G, the shared logits, the resolved hyper-parameters
    (``hp``: every registered name, see ``loss_hparams``), and the optional extras."""

    anchor: Tensor                    # [B,D] unit norm
    positives: Tensor                 # [B,P,D]
    distractors: Tensor               # [B,K,D]
    pos_mask: Tensor                  # [B,P] bool
    dist_mask: Tensor                 # [B,K] bool
    rank_only: Tensor                 # [B] bool
    pool: Pool
    logits: Logits
    hp: Mapping[str, Any]
    dist_oracle: Tensor | None = None             # [B,K] float, NaN = unknown (the *_oracle losses)
    params: Mapping[str, Tensor] | None = None    # learnable loss parameters (make_loss_parameters)

    @property
    def temperature(self) -> float:
        return float(self.hp["temperature"])

    @property
    def average(self) -> str:
        return self.hp["average"]


# --------------------------------------------------------------------------- NearID's ranking term
def batch_negatives(L: Logits) -> Tensor:
    """B_neg(i) [B,M*P]: the valid pool members that are not anchor i's own positives."""
    return L.g_valid & ~L.own


def rank_softplus(L: Logits, pool: Pool, average: str) -> Tensor:
    """Eq. 2: softplus(LSE_{B_neg(i)} l(a_i,g) - l(a_i,r_ik)), per valid (i,k) with non-empty B_neg(i)."""
    lse, has = masked_lse(L.lg, batch_negatives(L))                             # [B]
    terms = F.softplus(lse.unsqueeze(1) - L.lr)                                 # [B,K]
    tmask = L.dist_mask & has.unsqueeze(1)
    return weighted_sum(terms, index_weights(tmask, pool, average).to(terms.dtype), tmask)
