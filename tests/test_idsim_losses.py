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


def test_cosine_patch_metric_and_objectives_vs_loops():
    from nearid_lib.idsim.losses import HINGE_MARGIN, idsim_loss, objective_loss, patch_similarity_matrix

    gen = torch.Generator().manual_seed(3)
    B, N, D, tau = 3, 4, 5, 0.1
    ta, tb, tn = (torch.randn(B, N, D, generator=gen, dtype=DT) for _ in range(3))
    cand = torch.cat([tb, tn])
    S = patch_similarity_matrix(ta, cand, "cosine")
    for i in range(B):
        for j in range(2 * B):
            want = sum(F.cosine_similarity(ta[i, n], cand[j, n], dim=0) for n in range(N)) / N
            assert S[i, j].item() == pytest.approx(want.item(), rel=1e-12)
    # hinge: own positive vs own hard negative with margin 0.1
    hinge = objective_loss(S, "hinge", tau)
    want = sum(max(0.0, HINGE_MARGIN - S[i, i].item() + S[i, B + i].item()) for i in range(B)) / B
    assert hinge.item() == pytest.approx(want, rel=1e-12)
    # bce: every (anchor, candidate) pair, label 1 only for the own positive
    bce = objective_loss(S, "bce", tau, threshold=0.5)
    terms = []
    for i in range(B):
        for j in range(2 * B):
            z = (S[i, j].item() - 0.5) / tau
            p = 1 / (1 + math.exp(-z))
            terms.append(-math.log(p) if j == i else -math.log(1 - p))
    assert bce.item() == pytest.approx(sum(terms) / len(terms), rel=1e-10)
    # the baseline total equals CLS InfoNCE + lam * Sinkhorn InfoNCE; lam = 0 skips the patch term
    ca, cp, cn = (torch.randn(B, D, generator=gen, dtype=DT) for _ in range(3))
    tot, parts = idsim_loss(ca, cp, cn, ta, tb, tn, lam=0.5, temperature=tau)
    want = idsim_cls_infonce(ca, cp, cn, tau) + 0.5 * sinkhorn_patch_infonce(ta, tb, tn, temperature=tau)
    assert tot.item() == pytest.approx(want.item(), rel=1e-10)
    cls_only, parts = idsim_loss(ca, cp, cn, ta, tb, tn, lam=0.0, temperature=tau)
    assert parts["patch"].item() == 0 and cls_only.item() == pytest.approx(parts["cls"].item())
    patch_only, parts = idsim_loss(ca, cp, cn, ta, tb, tn, cls_weight=0.0, temperature=tau,
                                   patch_metric="cosine", objective="hinge")
    assert parts["cls"].item() == 0 and patch_only.item() == pytest.approx(hinge.item(), rel=1e-12)
    with pytest.raises(ValueError, match="objective"):
        idsim_loss(ca, cp, cn, ta, tb, tn, objective="triplet")
