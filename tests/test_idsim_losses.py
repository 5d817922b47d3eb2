"""ID-Sim losses vs slow loop references: CLS InfoNCE, Sinkhorn distances, the patch InfoNCE."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from nearid_lib.idsim.losses import idsim_cls_infonce, sinkhorn_distance_matrix, sinkhorn_patch_infonce

DT = torch.float64


def _dot(u, v):
    return sum(u[d] * v[d] for d in range(len(u)))


def test_idsim_cls_infonce_vs_loop():
    gen = torch.Generator().manual_seed(0)
    a, p, n = (torch.randn(4, 6, generator=gen, dtype=DT) for _ in range(3))
    got = idsim_cls_infonce(a, p, n, temperature=0.2)
    an, pn, nn_ = (F.normalize(x, dim=-1).tolist() for x in (a, p, n))
    vals = []
    for i in range(4):
        cands = pn + nn_
        den = sum(math.exp(_dot(an[i], c) / 0.2) for c in cands)
        vals.append(-math.log(math.exp(_dot(an[i], pn[i]) / 0.2) / den))
    assert got.item() == pytest.approx(sum(vals) / 4, rel=1e-10)


def test_sinkhorn_distance_properties():
    from geomloss import SamplesLoss

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 4, generator=gen, dtype=DT)
    near = x + 0.05 * torch.randn(5, 4, generator=gen, dtype=DT)
    far = torch.randn(5, 4, generator=gen, dtype=DT)
    perm = x[torch.randperm(5, generator=gen)]
    S = sinkhorn_distance_matrix(torch.stack([x]), torch.stack([x, perm, near, far]))[0]
    assert abs(S[0].item()) < 1e-6 and abs(S[1].item()) < 1e-6      # identical / permuted set ~ 0
    assert 0 <= S[2].item() < S[3].item()                            # small perturbation < unrelated set
    ref = SamplesLoss("sinkhorn", p=2, blur=0.05, diameter=2.0)(F.normalize(x, dim=-1),
                                                                F.normalize(far, dim=-1))
    assert S[3].item() == pytest.approx(ref.item(), rel=1e-6)


def test_sinkhorn_patch_infonce_vs_per_pair_loop():
    from geomloss import SamplesLoss

    gen = torch.Generator().manual_seed(1)
    B, N, D, tau = 3, 5, 4, 0.1
    ta, tb, tn = (torch.randn(B, N, D, generator=gen, dtype=DT) for _ in range(3))
    ta.requires_grad_(True)
    got = sinkhorn_patch_infonce(ta, tb, tn, blur=0.05, temperature=tau)
    L = SamplesLoss("sinkhorn", p=2, blur=0.05, diameter=2.0, backend="tensorized")
    vals = []
    for i in range(B):
        xi = F.normalize(ta[i], dim=-1)
        cands = [F.normalize(c, dim=-1) for c in list(tb) + list(tn)]
        logits = [-L(xi, c) / tau for c in cands]
        den = sum(torch.exp(z) for z in logits)
        vals.append(-torch.log(torch.exp(logits[i]) / den))
    want = sum(vals) / B
    assert got.item() == pytest.approx(want.item(), rel=1e-8)
    g1 = torch.autograd.grad(got, ta)[0]
    g2 = torch.autograd.grad(want, ta)[0]
    assert torch.allclose(g1, g2, rtol=1e-6, atol=1e-9)
