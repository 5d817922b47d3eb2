"""NearID loss family vs slow loop references (plain python / float64) and hand cases."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from nearid_lib.config import TrainConfig, get_profile
from nearid_lib.nearid.losses import (LOSSES, cohesion_loss, compute_loss, loss_hparams, make_loss_parameters,
                                      nearid_loss)

torch.set_num_threads(1)
DT = torch.float64


# --------------------------------------------------------------------------- loop references
def _ops(mod, detach):
    """The elementary functions a loop reference needs, from ``math`` (values) or ``torch`` (grads)."""
    return SimpleNamespace(exp=mod.exp, log=mod.log, log1p=mod.log1p, sqrt=mod.sqrt, detach=detach)


FloatOps = _ops(math, lambda x: x)
TorchOps = _ops(torch, lambda x: x.detach())


def _dot(u, v):
    return sum(u[d] * v[d] for d in range(len(u)))


def _lse(xs, ops):
    m = max(xs)
    return m + ops.log(sum(ops.exp(x - m) for x in xs))


def _softplus(x, ops):
    return x + ops.log(1 + ops.exp(-x)) if x > 0 else ops.log(1 + ops.exp(x))


def _relu(x):
    return x if x > 0 else x * 0


def _average(terms, average):
    """terms: dict (row, index) -> value. per_index: mean over indices of the mean over rows."""
    if not terms:
        return 0.0
    if average == "flat":
        return sum(terms.values()) / len(terms)
    idx = sorted({k for (_, k) in terms})
    means = []
    for k in idx:
        vals = [v for (i, kk), v in terms.items() if kk == k]
        means.append(sum(vals) / len(vals))
    return sum(means) / len(means)


def _mean(vals):
    return sum(vals) / len(vals) if vals else 0.0


def ref_loss(name, a, g, r, pm, dm, ro, oracle, hp, ops):
    """Loop reference for every variant, written from the paper's formulas (Section 3.2, E.6, Table 4)."""
    B, P, K = len(a), len(g[0]), len(r[0])
    tau, alpha = hp["temperature"], hp["alpha"]

    def lg(u, v):
        return _dot(u, v) / tau

    def bneg(i):
        return [lg(a[i], g[j][q]) for j in range(B) if j != i for q in range(P) if pm[j][q]]

    def rank_softplus():
        terms = {}
        for i in range(B):
            neg = bneg(i)
            if not neg:
                continue
            lse = ops.log(sum(ops.exp(x) for x in neg))
            for k in range(K):
                if dm[i][k]:
                    terms[(i, k)] = ops.log(1 + ops.exp(lse - lg(a[i], r[i][k])))
        return _average(terms, hp["average"])

    def first(i):
        for q in range(P):
            if pm[i][q]:
                return q
        return None

    if name in ("nearid", "nearid_cohesion"):
        terms = {}
        for i in range(B):
            if ro[i]:
                continue
            den = sum(ops.exp(lg(a[i], g[j][q])) for j in range(B) for q in range(P) if pm[j][q])
            den = den + sum(ops.exp(lg(a[i], r[i][k])) for k in range(K) if dm[i][k])
            for p in range(P):
                if pm[i][p]:
                    terms[(i, p)] = -ops.log(ops.exp(lg(a[i], g[i][p])) / den)
        disc, rank = _average(terms, hp["average"]), rank_softplus()
    elif name.startswith("infonce"):
        vals = []
        for i in range(B):
            fi = first(i)
            if fi is None or ro[i]:
                continue
            den = sum(ops.exp(lg(a[i], g[j][first(j)])) for j in range(B) if first(j) is not None)
            if "rneg" in name:
                den = den + sum(ops.exp(lg(a[i], r[i][k])) for k in range(K) if dm[i][k])
            a2g = -ops.log(ops.exp(lg(a[i], g[i][fi])) / den)
            den2 = sum(ops.exp(lg(g[i][fi], a[j])) for j in range(B))
            if "rneg" in name:     # the distractors join the g->a softmax too (authors' convention)
                den2 = den2 + sum(ops.exp(lg(g[i][fi], r[i][k])) for k in range(K) if dm[i][k])
            g2a = -ops.log(ops.exp(lg(g[i][fi], a[i])) / den2)
            vals.append(0.5 * (a2g + g2a))
        disc = _mean(vals)
        rank = 0.0
        if "oracle" in name:
            pairs = []
            for i in range(B):
                for k in range(K):
                    for k2 in range(K):
                        if (dm[i][k] and dm[i][k2] and math.isfinite(oracle[i][k])
                                and math.isfinite(oracle[i][k2]) and oracle[i][k] > oracle[i][k2]):
                            x = lg(a[i], r[i][k]) - lg(a[i], r[i][k2]) - hp["oracle_margin"] / tau
                            pairs.append(-ops.log(1 / (1 + ops.exp(-x))))
            rank = _mean(pairs)
    elif name == "siglip":
        t = 1 / tau if hp["siglip_scale"] is None else hp["siglip_scale"]
        b = hp["siglip_bias"]
        pair_terms, hard_terms = [], []       # averaged over pairs, not summed per anchor
        for i in range(B):
            if ro[i] or first(i) is None:
                continue
            for j in range(B):
                for q in range(P):
                    if pm[j][q]:
                        z = t * _dot(a[i], g[j][q]) + b
                        pair_terms.append(ops.log1p(ops.exp(-z)) if j == i else ops.log1p(ops.exp(z)))
            for k in range(K):
                if dm[i][k]:
                    hard_terms.append(ops.log1p(ops.exp(t * _dot(a[i], r[i][k]) + b)))
        disc, rank = _mean(pair_terms) + _mean(hard_terms), rank_softplus()
    elif name == "circle":
        gam, m = hp["circle_gamma"], hp["circle_m"]
        vals = []
        for i in range(B):
            if ro[i]:
                continue
            sp = [_dot(a[i], g[i][p]) for p in range(P) if pm[i][p]]
            sn = [_dot(a[i], g[j][q]) for j in range(B) if j != i for q in range(P) if pm[j][q]]
            sn += [_dot(a[i], r[i][k]) for k in range(K) if dm[i][k]]
            if not sp or not sn:
                continue
            xn = [gam * _relu(ops.detach(s) + m) * (s - m) for s in sn]
            xp = [-gam * _relu(1 + m - ops.detach(s)) * (s - (1 - m)) for s in sp]
            vals.append(_softplus(_lse(xn, ops) + _lse(xp, ops), ops))
        disc = _mean(vals)
        terms = {}
        for i in range(B):
            neg = bneg(i)
            if not neg:
                continue
            for k in range(K):
                if dm[i][k]:
                    terms[(i, k)] = _relu(max(neg) - lg(a[i], r[i][k]) + hp["circle_m"] / tau)
        rank = _average(terms, hp["average"])
    else:
        raise KeyError(name)
    total = disc + alpha * rank
    if name == "nearid_cohesion":
        vals = []
        for i in range(B):
            if ro[i]:
                continue
            valid = [p for p in range(P) if pm[i][p]]
            if len(valid) < 2:
                vals.append(0.0)
                continue
            s = [sum(g[i][p][d] for p in valid) for d in range(len(a[0]))]
            ns = ops.sqrt(_dot(s, s))
            vals.append(sum(1 - _dot(g[i][p], s) / (ops.sqrt(_dot(g[i][p], g[i][p])) * ns)
                            for p in valid) / len(valid))
        total = total + hp["beta"] * _mean(vals)
    return total


# --------------------------------------------------------------------------- data
def make_batch(seed, B=5, P=3, K=3, D=6, p_pos=0.7, p_dist=0.7, p_ro=0.25, dtype=DT):
    gen = torch.Generator().manual_seed(seed)
    a = F.normalize(torch.randn(B, D, generator=gen, dtype=dtype), dim=-1)
    g = F.normalize(torch.randn(B, P, D, generator=gen, dtype=dtype), dim=-1)
    r = F.normalize(torch.randn(B, K, D, generator=gen, dtype=dtype), dim=-1)
    pm = torch.rand(B, P, generator=gen) < p_pos
    dm = torch.rand(B, K, generator=gen) < p_dist
    ro = torch.rand(B, generator=gen) < p_ro
    # coarse oracle values so that ties occur; some unknown (NaN)
    oracle = torch.round(torch.rand(B, K, generator=gen, dtype=dtype) * 4) / 4
    oracle[torch.rand(B, K, generator=gen) < 0.2] = float("nan")
    return a, g, r, pm, dm, ro, oracle


def ref_value(name, batch, hp):
    a, g, r, pm, dm, ro, oracle = batch
    return ref_loss(name, a.tolist(), g.tolist(), r.tolist(), pm.tolist(), dm.tolist(), ro.tolist(),
                    oracle.tolist(), hp, FloatOps)


def impl(name, batch, hp):
    a, g, r, pm, dm, ro, oracle = batch
    return compute_loss(name, a, g, r, pm, dm, None, dist_oracle=oracle, rank_only=ro, **hp)


HP_VARIANTS = [
    dict(alpha=0.5, beta=0.1, temperature=0.07, average="per_index"),
    dict(alpha=1.3, beta=0.3, temperature=0.5, average="flat", oracle_margin=0.35, circle_gamma=32.0,
         circle_m=0.4, siglip_scale=3.0, siglip_bias=-1.5),
]


def _hp(over):
    return loss_hparams(None, **over)


# --------------------------------------------------------------------------- values vs reference
@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("hp_i", [0, 1])
def test_value_matches_loop_reference(name, hp_i):
    hp = _hp(HP_VARIANTS[hp_i])
    for seed in range(4):
        batch = make_batch(seed + 10 * hp_i)
        got, parts = impl(name, batch, hp)
        want = ref_value(name, batch, hp)
        assert torch.isfinite(got)
        assert got.item() == pytest.approx(float(want), rel=1e-10, abs=1e-10), (name, seed)
        assert set(parts) >= {"disc", "rank"}


def test_nearid_loss_equals_compute_loss_and_reference():
    hp = _hp(HP_VARIANTS[0])
    for seed in range(3):
        a, g, r, pm, dm, ro, _ = batch = make_batch(100 + seed)
        loss, parts = nearid_loss(a, g, r, pm, dm, alpha=0.5, temperature=0.07, rank_only=ro)
        loss2, _ = compute_loss("nearid", a, g, r, pm, dm, None, rank_only=ro)
        assert torch.equal(loss, loss2)
        assert loss.item() == pytest.approx(ref_value("nearid", batch, hp), rel=1e-10)
        assert (parts["disc"] + 0.5 * parts["rank"]).item() == pytest.approx(loss.item(), rel=1e-12)


def test_per_index_equals_flat_with_full_masks():
    a, g, r, *_ = make_batch(3)
    l1, _ = nearid_loss(a, g, r, average="per_index")
    l2, _ = nearid_loss(a, g, r, average="flat")
    assert l1.item() == pytest.approx(l2.item(), rel=1e-12)
    # with holes they differ (the documented per-index average is really used)
    pm = torch.ones(g.shape[:2], dtype=torch.bool)
    pm[1:, 2] = False
    l3, _ = nearid_loss(a, g, r, pm, average="per_index")
    l4, _ = nearid_loss(a, g, r, pm, average="flat")
    assert abs(l3.item() - l4.item()) > 1e-6


# --------------------------------------------------------------------------- gradients vs reference
def _grads_impl(name, batch, hp):
    a, g, r, pm, dm, ro, oracle = batch
    leaves = [x.clone().requires_grad_(True) for x in (a, g, r)]
    loss, _ = compute_loss(name, *leaves, pm, dm, None, dist_oracle=oracle, rank_only=ro, **hp)
    return torch.autograd.grad(loss, leaves, allow_unused=True)


def _grads_ref(name, batch, hp):
    a, g, r, pm, dm, ro, oracle = batch
    leaves = [x.clone().requires_grad_(True) for x in (a, g, r)]
    out = ref_loss(name, *leaves, pm.tolist(), dm.tolist(), ro.tolist(), oracle.tolist(), hp, TorchOps)
    if not torch.is_tensor(out) or not out.requires_grad:
        return tuple(torch.zeros_like(x) for x in leaves)
    gs = torch.autograd.grad(out, leaves, allow_unused=True)
    return tuple(torch.zeros_like(x) if gr is None else gr for x, gr in zip(leaves, gs))


@pytest.mark.parametrize("name", LOSSES)
def test_gradients_match_loop_reference(name):
    for hp_i, seed in ((0, 0), (1, 1)):
        hp = _hp(HP_VARIANTS[hp_i])
        batch = make_batch(200 + seed, B=3, P=2, K=3, D=3)
        gi = _grads_impl(name, batch, hp)
        gr = _grads_ref(name, batch, hp)
        for x, y in zip(gi, gr):
            x = torch.zeros_like(y) if x is None else x
            assert torch.allclose(x, y, rtol=1e-8, atol=1e-10), (name, hp_i, (x - y).abs().max())


def test_gradcheck_nearid():
    a, g, r, pm, dm, ro, _ = make_batch(7, B=3, P=2, K=2, D=3)
    pm[0, 1] = False
    dm[1, 0] = False

    def f(a_, g_, r_):
        return nearid_loss(a_, g_, r_, pm, dm, alpha=0.7, temperature=0.3, rank_only=ro)[0]

    assert torch.autograd.gradcheck(f, tuple(x.clone().requires_grad_(True) for x in (a, g, r)))


# --------------------------------------------------------------------------- masked slots are inert
@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("fill", ["random", "huge", "nan", "inf"])
def test_masked_slots_do_not_influence_value_or_gradients(name, fill):
    hp = _hp(HP_VARIANTS[0])
    a, g, r, pm, dm, ro, oracle = make_batch(42, B=6, P=3, K=3, D=5, p_pos=0.6, p_dist=0.6)
    base = _grads_impl(name, (a, g, r, pm, dm, ro, oracle), hp)
    base_loss = impl(name, (a, g, r, pm, dm, ro, oracle), hp)[0]

    def fill_like(x, mask):
        if fill == "random":
            v = torch.randn(x.shape, generator=torch.Generator().manual_seed(5), dtype=x.dtype) * 3
        else:
            v = torch.full_like(x, {"huge": 1e30, "nan": float("nan"), "inf": float("inf")}[fill])
        return torch.where(mask.unsqueeze(-1), x, v)

    g2, r2 = fill_like(g, pm), fill_like(r, dm)
    loss2 = impl(name, (a, g2, r2, pm, dm, ro, oracle), hp)[0]
    assert torch.equal(loss2, base_loss), (loss2, base_loss)
    got = _grads_impl(name, (a, g2, r2, pm, dm, ro, oracle), hp)
    for x, y, m in zip(got, base, (None, pm, dm)):
        if x is None:
            continue
        assert torch.equal(x, y)
        assert torch.isfinite(x).all()
        if m is not None:
            assert (x[~m] == 0).all()          # masked slots receive exactly zero gradient


def test_masked_oracle_and_nan_oracle_are_inert():
    hp = _hp(HP_VARIANTS[0])
    batch = make_batch(8)
    a, g, r, pm, dm, ro, oracle = batch
    o2 = oracle.clone()
    o2[~dm] = 123.0                                  # masked distractors' oracle values are ignored
    l1 = impl("infonce_oracle", batch, hp)[0]
    l2 = impl("infonce_oracle", (a, g, r, pm, dm, ro, o2), hp)[0]
    assert torch.equal(l1, l2)


# --------------------------------------------------------------------------- hand-computed cases
def test_hand_computed_nearid_b2_p1_k1():
    # tau = 1. Row 0: a=(1,0), g=(1,0), r=(0.6,0.8); row 1 mirrored. cos(a0,g0)=1, cos(a0,g1)=0, cos(a0,r0)=0.6.
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=DT)
    g = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]], dtype=DT)
    r = torch.tensor([[[0.6, 0.8]], [[0.8, 0.6]]], dtype=DT)
    loss, parts = nearid_loss(a, g, r, alpha=0.5, temperature=1.0)
    # L_disc = -log(e^1 / (e^1 + e^0 + e^0.6)) = log(5.54040063...) - 1
    disc = math.log(math.e + 1.0 + math.exp(0.6)) - 1.0
    # L_rank = log(1 + exp(LSE{0} - 0.6)) = log(1 + e^-0.6)
    rank = math.log(1.0 + math.exp(-0.6))
    assert disc == pytest.approx(0.712067, abs=1e-6)
    assert rank == pytest.approx(0.437488, abs=1e-6)
    assert parts["disc"].item() == pytest.approx(disc, rel=1e-12)
    assert parts["rank"].item() == pytest.approx(rank, rel=1e-12)
    assert loss.item() == pytest.approx(disc + 0.5 * rank, rel=1e-12)
    # a padded second positive and a padded second distractor (garbage) change nothing
    g_pad = torch.cat([g, torch.full((2, 1, 2), 7.0, dtype=DT)], dim=1)
    r_pad = torch.cat([r, torch.full((2, 1, 2), float("nan"), dtype=DT)], dim=1)
    loss_pad, _ = nearid_loss(a, g_pad, r_pad, torch.tensor([[True, False]] * 2),
                              torch.tensor([[True, False]] * 2), alpha=0.5, temperature=1.0)
    assert loss_pad.item() == pytest.approx(disc + 0.5 * rank, rel=1e-12)


def test_hand_computed_other_positive_stays_in_denominator():
    # one anchor, two positives (cos 1 and 0), no distractor, tau=1: each positive index sees both.
    a = torch.tensor([[1.0, 0.0]], dtype=DT)
    g = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], dtype=DT)
    r = torch.zeros(1, 1, 2, dtype=DT)
    loss, parts = nearid_loss(a, g, r, dist_mask=torch.tensor([[False]]), temperature=1.0)
    den = math.e + 1.0
    want = 0.5 * ((math.log(den) - 1.0) + (math.log(den) - 0.0))
    assert parts["disc"].item() == pytest.approx(want, rel=1e-12)
    assert parts["rank"].item() == 0.0     # no distractor and an empty batch-negative pool
    assert torch.isfinite(loss)


def test_hand_computed_cohesion():
    g = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]], [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]], dtype=DT)
    pm = torch.tensor([[True, True, False], [True, False, False]])
    # row 0: prototype (1,1)/sqrt2, cos = 1/sqrt2 for both -> 1 - 1/sqrt2; row 1 has one positive -> 0
    got = cohesion_loss(g, pm)
    assert got.item() == pytest.approx((1 - 1 / math.sqrt(2)) / 2, rel=1e-12)


def test_hand_computed_oracle_ranknet():
    # K=2, oracle 0.9 > 0.2: one pair, -log sigmoid(l_r0 - l_r1 - m), tau=1, m=0.5
    a = torch.tensor([[1.0, 0.0]], dtype=DT)
    g = torch.tensor([[[1.0, 0.0]]], dtype=DT)
    r = torch.tensor([[[0.8, 0.6], [0.0, 1.0]]], dtype=DT)
    _, parts = compute_loss("infonce_oracle", a, g, r, cfg=None, dist_oracle=torch.tensor([[0.9, 0.2]]),
                            temperature=1.0, oracle_margin=0.5)
    assert parts["rank"].item() == pytest.approx(math.log(1 + math.exp(-(0.8 - 0.0 - 0.5))), rel=1e-12)


# --------------------------------------------------------------------------- degenerate rows, config
def test_degenerate_rows_finite_and_inert():
    a, g, r, pm, dm, ro, oracle = make_batch(9, B=4)
    pm[2] = False                      # row without positives: no disc term
    dm[3] = False
    for name in LOSSES:
        leaves = [x.clone().requires_grad_(True) for x in (a, g, r)]
        loss, _ = compute_loss(name, *leaves, pm, dm, None, dist_oracle=oracle, rank_only=ro)
        loss.backward()
        assert torch.isfinite(loss) and all(x.grad is None or torch.isfinite(x.grad).all() for x in leaves), name
    # B=1: empty batch-negative pool -> rank term 0, grads finite
    leaves = [x[:1].clone().requires_grad_(True) for x in (a, g, r)]
    loss, parts = nearid_loss(*leaves)
    loss.backward()
    assert parts["rank"].item() == 0.0 and all(torch.isfinite(x.grad).all() for x in leaves)


def test_rank_only_rows_only_rank():
    a, g, r, pm, dm, _, _ = make_batch(11, p_pos=1.0, p_dist=1.0)
    all_ro = torch.ones(a.shape[0], dtype=torch.bool)
    loss, parts = nearid_loss(a, g, r, pm, dm, rank_only=all_ro)
    assert parts["disc"].item() == 0.0 and parts["rank"].item() > 0
    assert loss.item() == pytest.approx(0.5 * parts["rank"].item())
    _, p0 = nearid_loss(a, g, r, pm, dm)
    assert parts["rank"].item() == pytest.approx(p0["rank"].item(), rel=1e-12)


def test_config_and_registry():
    cfg = get_profile("smoke", **{"train.alpha": 0.25, "train.oracle_margin": 0.3})
    hp = loss_hparams(cfg)
    assert hp["alpha"] == 0.25 and hp["oracle_margin"] == 0.3 and hp["temperature"] == cfg.train.temperature
    assert set(cfg.eval.ablation_losses) <= set(LOSSES)
    assert TrainConfig().loss in LOSSES
    a, g, r, *_ = make_batch(0)
    with pytest.raises(KeyError, match="unknown loss"):
        compute_loss("nope", a, g, r)
    with pytest.raises(KeyError, match="unknown loss hyper-parameter"):
        compute_loss("nearid", a, g, r, bogus=1)
    with pytest.raises(ValueError, match="pos_mask"):
        nearid_loss(a, g, r, pos_mask=torch.ones(2, 2, dtype=torch.bool))
    # cfg-driven value equals the keyword-driven value
    l1, _ = compute_loss("nearid", a, g, r, None, None, cfg)
    l2, _ = nearid_loss(a, g, r, alpha=0.25, temperature=cfg.train.temperature)
    assert l1.item() == pytest.approx(l2.item(), rel=1e-12)


def test_siglip_learnable_parameters_get_gradients():
    cfg = get_profile("smoke", **{"train.siglip_learnable": True})
    params = make_loss_parameters("siglip", cfg)
    assert set(params) == {"siglip_log_scale", "siglip_bias"}
    a, g, r, pm, dm, ro, _ = make_batch(1, dtype=torch.float32)
    loss, _ = compute_loss("siglip", a, g, r, pm, dm, cfg, rank_only=ro, params=params)
    loss.backward()
    assert params["siglip_bias"].grad is not None and params["siglip_bias"].grad.abs() > 0
    # at the initial values it equals the fixed-parameter loss
    fixed, _ = compute_loss("siglip", a, g, r, pm, dm, cfg, rank_only=ro)
    assert loss.item() == pytest.approx(fixed.item(), rel=1e-5)
    assert len(make_loss_parameters("nearid", cfg)) == 0


def test_documented_names_are_importable_real_functions():
    """Every name the README's and docs' code examples import or call (``from nearid_lib... import
    x``, ``nearid_lib.x(...)``) and every dotted ``nearid_lib....`` name in their text resolves, and
    what the examples use is a function or class defined where it says it is (its own module
    holds it), not a name forwarded by a compatibility module."""
    import ast
    import importlib
    import inspect
    import re
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    docs = [root / "README.md", *sorted((root / "docs").glob("*.md"))]

    def resolve(dotted):
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ModuleNotFoundError:
                continue
            for p in parts[i:]:
                obj = getattr(obj, p)
            return obj
        raise ModuleNotFoundError(dotted)

    used: dict[str, object] = {}
    for f in docs:
        text = f.read_text()
        for dotted in set(re.findall(r"\bnearid_lib(?:\.[A-Za-z_]\w*)+", text)):
            resolve(dotted)                              # raises naming what is missing
        for block in re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
            for node in ast.walk(ast.parse(block)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nearid_lib"):
                    used.update({f"{node.module}.{a.name}": resolve(f"{node.module}.{a.name}") for a in node.names})
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                      and isinstance(node.func.value, ast.Name) and node.func.value.id == "nearid_lib"):
                    used[f"nearid_lib.{node.func.attr}"] = resolve(f"nearid_lib.{node.func.attr}")
    assert {"nearid_lib.nearid.losses.compute_loss", "nearid_lib.rank_generator", "nearid_lib.score_encoder"} <= set(used)
    for name, obj in used.items():
        assert inspect.isfunction(obj) or inspect.isclass(obj), f"{name} is no function or class"
        assert getattr(sys.modules[obj.__module__], obj.__name__) is obj
        # defined in the module named, or (a package's public name) in a module of that package
        home = name.rpartition(".")[0]
        assert obj.__module__ == home or (hasattr(sys.modules[home], "__path__")
                                          and obj.__module__.startswith(home + ".")), (name, obj.__module__)
    assert used["nearid_lib.nearid.losses.compute_loss"] is compute_loss
    assert used["nearid_lib.rank_generator"].__module__.startswith("nearid_lib.fpr.")
