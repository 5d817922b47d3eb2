"""The ID-Sim losses (ID-Sim Eqs. 1-3): CLS InfoNCE against positives and hard negatives, and the
same InfoNCE with similarity = -Sinkhorn distance between patch-token sets (geomloss, imported when a
Sinkhorn loss is first built)."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["idsim_cls_infonce", "sinkhorn_distance_matrix", "sinkhorn_patch_infonce", "idsim_loss"]


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
