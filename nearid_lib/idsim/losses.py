"""The ID-Sim losses (ID-Sim Eqs. 1-3) and the variants of its ablations (Supp. Tables 8-9).

Baseline: CLS InfoNCE against positives and hard negatives, plus the same InfoNCE with
similarity = -Sinkhorn distance between patch-token sets (geomloss, imported when a Sinkhorn loss
is first built). Every term is "an objective over a similarity matrix":

* similarity of the CLS term: cosine of the projected CLS embeddings;
* similarity of the patch term (``patch_metric``): ``"sinkhorn"`` = -Sinkhorn distance between the
  L2-normalised token sets (order-free soft alignment), ``"cosine"`` = the position-wise mean
  cosine of corresponding tokens (the "cosine patch metric" of Supp. Table 9: no alignment);
* objective (``objective``): ``"infonce"`` (Eq. 2: row i against every row's positive and hard
  negative, target its own positive), ``"hinge"`` (triplet hinge with the paper's margin 0.1 on the
  row's own positive vs its hard negative, App. C.3), ``"bce"`` (binary cross-entropy on every
  (anchor, candidate) pair of the batch, label 1 for the own positive, logits (s - theta)/tau with a
  fixed threshold theta: 0.5 for cosine, -0.5 for -Sinkhorn distance; the paper does not state its
  BCE parametrisation).

Loss = ``cls_weight`` * L_CLS + ``lam`` * L_patch (CLS-only: lam = 0; patch-only: cls_weight = 0;
a zero-weight term is not computed).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["idsim_cls_infonce", "sinkhorn_distance_matrix", "sinkhorn_patch_infonce", "idsim_loss",
           "patch_similarity_matrix", "objective_loss", "OBJECTIVES", "PATCH_METRICS", "HINGE_MARGIN"]

OBJECTIVES = ("infonce", "hinge", "bce")
PATCH_METRICS = ("sinkhorn", "cosine")
HINGE_MARGIN = 0.1          # ID-Sim App. C.3
BCE_THRESHOLD = {"cosine": 0.5, "sinkhorn": -0.5}


def idsim_cls_infonce(anchor: Tensor, positive: Tensor, hard_negative: Tensor,
                      temperature: float = 0.07) -> Tensor:
    """ID-Sim global loss (ID-Sim Eq. 2): InfoNCE of anchor i against the candidates {positives of every
    row} + {hard negatives of every row}, target = its own positive. Inputs [B,D] are L2-normalised here
    (cosine similarity). One direction (anchor -> candidates); mean over rows."""
    a, p, n = (F.normalize(x, dim=-1) for x in (anchor, positive, hard_negative))
    return objective_loss(a @ torch.cat([p, n], dim=0).T, "infonce", temperature)


_SINKHORN: dict[tuple[float, str], Any] = {}


def _samples_loss(blur: float, backend: str):
    key = (float(blur), backend)
    if key not in _SINKHORN:
        from geomloss import SamplesLoss
        # diameter fixed to 2 (unit vectors): geomloss otherwise estimates it from the whole batched
        # input, so a pair's value would depend on which other pairs share the call.
        _SINKHORN[key] = SamplesLoss("sinkhorn", p=2, blur=blur, diameter=2.0, backend=backend)
    return _SINKHORN[key]


def _eps_schedule(blur: float, diameter: float = 2.0, scaling: float = 0.5, p: int = 2) -> list[float]:
    """geomloss's epsilon-scaling schedule (``epsilon_schedule``): diameter^p, then blur^p reached
    by factors scaling^p."""
    return ([diameter ** p] + [float(np.exp(e)) for e in np.arange(p * np.log(diameter), p * np.log(blur),
                                                                  p * np.log(scaling))] + [blur ** p])


def _softmin(eps: float, C: Tensor, h: Tensor) -> Tensor:
    """Soft C-transform: -eps * logsumexp_j(h_j - C_ij / eps); C [..., N, M], h [..., M] -> [..., N].

    The log-sum-exp clamps exponents below -80 relative to the row maximum: those terms are
    < e^-80 = 2e-35 of the largest one (below float64 resolution), and CPU ``exp`` is ~5x slower on
    underflowing inputs, which small blurs (eps = 0.0025) produce for most entries."""
    z = h.unsqueeze(-2) - C / eps
    m = z.amax(-1, keepdim=True).detach()
    return -eps * ((z - m).clamp_min(-80.0).exp().sum(-1).log() + m.squeeze(-1))


def _self_potential(x: Tensor, eps_list: list[float]) -> Tensor:
    """Symmetric OT(a, a) potential of each token set x [S, N, D] (uniform weights), geomloss's
    symmetrised loop and final extrapolation; gradient through the last step only."""
    a_log = torch.full(x.shape[:2], -float(np.log(x.shape[1])), dtype=x.dtype, device=x.device)
    C = 1.0 - x @ x.detach().transpose(1, 2)                      # |x - x'|^2 / 2 for unit vectors
    with torch.no_grad():
        f = _softmin(eps_list[0], C, a_log)
        for eps in eps_list:
            f = 0.5 * (f + _softmin(eps, C, a_log + f / eps))
    eps = eps_list[-1]
    return _softmin(eps, C, (a_log + f / eps).detach())


def _fast_sinkhorn_matrix(x: Tensor, y: Tensor, blur: float, scaling: float = 0.5) -> Tensor:
    """The debiased Sinkhorn divergence of every (x[i], y[j]) pair, [Bx, By], with geomloss's
    tensorized algorithm (p = 2, cost |x - y|^2 / 2, uniform weights, diameter 2, epsilon scaling,
    symmetrised updates, one last extrapolation carrying the gradient, the same ``detach``es), but
    with the self terms OT(x, x) / OT(y, y) solved once per set instead of once per pair."""
    eps_list = _eps_schedule(blur, 2.0, scaling)
    Bx, N, _ = x.shape
    By, M, _ = y.shape
    f_aa = _self_potential(x, eps_list)                                              # [Bx, N]
    g_bb = _self_potential(y, eps_list)                                              # [By, M]
    a_log = torch.full((Bx, 1, N), -float(np.log(N)), dtype=x.dtype, device=x.device)
    b_log = torch.full((1, By, M), -float(np.log(M)), dtype=x.dtype, device=x.device)
    # cost matrices of every pair; geomloss differentiates C_xy through x only and C_yx through y only
    C_xy = 1.0 - torch.einsum("ind,jmd->ijnm", x, y.detach())                        # [Bx, By, N, M]
    C_yx = 1.0 - torch.einsum("jmd,ind->ijmn", y, x.detach())                        # [Bx, By, M, N]
    with torch.no_grad():
        eps = eps_list[0]
        g = _softmin(eps, C_yx, a_log.expand(Bx, By, N))
        f = _softmin(eps, C_xy, b_log.expand(Bx, By, M))
        for eps in eps_list:
            ft = _softmin(eps, C_xy, b_log + g / eps)
            gt = _softmin(eps, C_yx, a_log + f / eps)
            f, g = 0.5 * (f + ft), 0.5 * (g + gt)
    eps = eps_list[-1]
    f_ba = _softmin(eps, C_xy, (b_log + g / eps).detach())                          # [Bx, By, N]
    g_ab = _softmin(eps, C_yx, (a_log + f / eps).detach())                          # [Bx, By, M]
    return (f_ba - f_aa[:, None, :]).mean(-1) + (g_ab - g_bb[None, :, :]).mean(-1)


def sinkhorn_distance_matrix(tokens_x: Tensor, tokens_y: Tensor, blur: float = 0.05,
                             backend: str = "fast") -> Tensor:
    """S[i,j] = geomloss Sinkhorn divergence (p=2, uniform weights, debiased, cost |x-y|^2/2) between the
    L2-normalised token sets tokens_x[i] [N,D] and tokens_y[j] [N',D]; shape [Bx, By]. The result
    equals per-pair calls of SamplesLoss("sinkhorn", p=2, blur, diameter=2) (a fixed diameter makes
    pairs independent of their batch-mates). ``backend="fast"`` (default) is our re-implementation of
    geomloss's tensorized algorithm that solves each set's self term once (about 2x cheaper for a
    [B, 2B] loss); ``"tensorized"`` calls geomloss on every pair."""
    x = F.normalize(tokens_x, dim=-1)
    y = F.normalize(tokens_y, dim=-1)
    if backend == "fast":
        return _fast_sinkhorn_matrix(x, y, blur)
    Bx, By = x.shape[0], y.shape[0]
    xx = x.unsqueeze(1).expand(Bx, By, *x.shape[1:]).reshape(Bx * By, *x.shape[1:])   # [Bx*By, N, D]
    yy = y.unsqueeze(0).expand(Bx, By, *y.shape[1:]).reshape(Bx * By, *y.shape[1:])   # [Bx*By, N', D]
    return _samples_loss(blur, backend)(xx.contiguous(), yy.contiguous()).reshape(Bx, By)


def patch_similarity_matrix(tokens_x: Tensor, tokens_y: Tensor, metric: str = "sinkhorn",
                            blur: float = 0.05) -> Tensor:
    """Similarity [Bx, By] between token sets [Bx, N, D] and [By, N, D]: ``"sinkhorn"`` = -Sinkhorn
    distance, ``"cosine"`` = mean over positions n of cos(x[i, n], y[j, n])."""
    if metric == "sinkhorn":
        return -sinkhorn_distance_matrix(tokens_x, tokens_y, blur)
    if metric == "cosine":
        x, y = F.normalize(tokens_x, dim=-1), F.normalize(tokens_y, dim=-1)
        if x.shape[1] != y.shape[1]:
            raise ValueError(f"cosine patch metric needs aligned token sets, got {x.shape[1]} vs {y.shape[1]}")
        return torch.einsum("ind,jnd->ij", x, y) / x.shape[1]
    raise ValueError(f"unknown patch metric {metric!r}; valid: {', '.join(PATCH_METRICS)}")


def objective_loss(sim: Tensor, objective: str = "infonce", temperature: float = 0.07,
                   threshold: float = 0.5, margin: float = HINGE_MARGIN) -> Tensor:
    """Loss of a similarity matrix ``sim`` [B, 2B]: row i's candidates are every row's positive
    (columns 0..B-1, target column i) and every row's hard negative (columns B..2B-1)."""
    B = sim.shape[0]
    if sim.shape[1] != 2 * B:
        raise ValueError(f"objective_loss: expected [B, 2B] similarities, got {tuple(sim.shape)}")
    idx = torch.arange(B, device=sim.device)
    if objective == "infonce":
        return F.cross_entropy(sim / temperature, idx)
    if objective == "hinge":
        return F.relu(margin - sim[idx, idx] + sim[idx, B + idx]).mean()
    if objective == "bce":
        target = torch.zeros_like(sim)
        target[idx, idx] = 1.0
        return F.binary_cross_entropy_with_logits((sim - threshold) / temperature, target)
    raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")


def sinkhorn_patch_infonce(tokens_a: Tensor, tokens_b: Tensor, tokens_neg: Tensor, blur: float = 0.05,
                           temperature: float = 0.07, backend: str = "fast") -> Tensor:
    """ID-Sim patch loss: the InfoNCE of :func:`idsim_cls_infonce` with similarity = -Sinkhorn distance
    between L2-normalised patch-token sets (ID-Sim Eq. 3), logits = -S / temperature. Candidates for row i:
    tokens_b of every row (target: its own) and tokens_neg of every row. Inputs [B,N,D]."""
    S = sinkhorn_distance_matrix(tokens_a, torch.cat([tokens_b, tokens_neg], dim=0), blur, backend)  # [B,2B]
    return objective_loss(-S, "infonce", temperature)


def idsim_loss(cls_a: Tensor, cls_p: Tensor, cls_n: Tensor, tok_a: Tensor, tok_p: Tensor, tok_n: Tensor,
               lam: float = 1.0, temperature: float = 0.07, blur: float = 0.05, objective: str = "infonce",
               patch_metric: str = "sinkhorn", cls_weight: float = 1.0
               ) -> tuple[Tensor, dict[str, Tensor]]:
    """ID-Sim total loss L = cls_weight * L_CLS + lam * L_patch (ID-Sim Eq. 1; baseline cls_weight = lam
    = 1, InfoNCE, Sinkhorn); returns (loss, {"cls", "patch"}) (a skipped term reports 0)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    zero = cls_a.new_zeros(())
    lc = lp = zero
    if cls_weight:
        a, p, n = (F.normalize(x, dim=-1) for x in (cls_a, cls_p, cls_n))
        lc = objective_loss(a @ torch.cat([p, n]).T, objective, temperature, BCE_THRESHOLD["cosine"])
    if lam:
        sim = patch_similarity_matrix(tok_a, torch.cat([tok_p, tok_n]), patch_metric, blur)
        lp = objective_loss(sim, objective, temperature, BCE_THRESHOLD[patch_metric])
    return cls_weight * lc + lam * lp, {"cls": lc.detach(), "patch": lp.detach()}

