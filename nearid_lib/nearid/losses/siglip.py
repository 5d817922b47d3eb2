"""SigLIP+Rank (NearID Tables 3/4): pairwise sigmoid BCE over the pool G and the distractors, with
NearID's log-sigmoid ranking term, and its optionally learnable scale and bias. Conventions:
:mod:`nearid_lib.nearid.losses`; registered in :mod:`.registry`."""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

from .terms import Logits, LossBatch, Pool, rank_softplus, row_weights, weighted_sum

__all__ = ["siglip_disc", "siglip_terms", "siglip_parameters"]


def siglip_disc(L: Logits, pool: Pool, temperature: float, scale: Tensor | float | None,
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
    return (weighted_sum(bce_g, row_weights(pm.reshape(-1), pool).reshape(pm.shape).to(bce_g.dtype), pm)
            + weighted_sum(bce_r, row_weights(dm.reshape(-1), pool).reshape(dm.shape).to(bce_r.dtype), dm))


def siglip_terms(b: LossBatch) -> dict[str, Tensor]:
    """SigLIP BCE (fixed scale and bias, or the learnable ones of :func:`siglip_parameters`) and
    -log sigma(l_rk - LSE_b) == softplus(LSE_b - l_rk), the same ranking term as NearID's L_rank."""
    scale, bias = b.hp["siglip_scale"], b.hp["siglip_bias"]
    if b.params is not None and "siglip_log_scale" in b.params:
        scale, bias = b.params["siglip_log_scale"].exp(), b.params["siglip_bias"]
    disc = siglip_disc(b.logits, b.pool, b.temperature, scale, bias)
    return {"disc": disc, "rank": rank_softplus(b.logits, b.pool, b.average)}


def siglip_parameters(hp: Mapping[str, Any], train: Any) -> torch.nn.ParameterDict:
    """Log-scale and bias, learnable when ``train.siglip_learnable`` (initialised from ``siglip_scale``,
    else 1 / temperature, and ``siglip_bias``); empty otherwise."""
    if not bool(getattr(train, "siglip_learnable", False)):
        return torch.nn.ParameterDict()
    t0 = hp["siglip_scale"] if hp["siglip_scale"] is not None else 1.0 / hp["temperature"]
    return torch.nn.ParameterDict({
        "siglip_log_scale": torch.nn.Parameter(torch.tensor(math.log(t0))),
        "siglip_bias": torch.nn.Parameter(torch.tensor(float(hp["siglip_bias"]))),
    })
