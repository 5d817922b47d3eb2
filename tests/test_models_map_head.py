"""MAPHead: the fast path equals nn.MultiheadAttention and transformers' SigLIP head exactly."""
from __future__ import annotations

import pytest
import torch

from nearid_lib.models import MAPHead  # noqa: I001  (first: makes torchvision importable)
from nearid_lib.models.map_head import drop_tokens
from transformers import SiglipVisionConfig
from transformers.models.siglip.modeling_siglip import SiglipMultiheadAttentionPoolingHead

torch.set_num_threads(1)


def _siglip_head(dim=32, heads=4, inter=48, seed=0):
    torch.manual_seed(seed)
    cfg = SiglipVisionConfig(hidden_size=dim, num_attention_heads=heads, intermediate_size=inter,
                             num_hidden_layers=1, image_size=32, patch_size=8)
    head = SiglipMultiheadAttentionPoolingHead(cfg).double()
    # non-trivial biases: the default init zeroes some of them, which would hide bias bugs
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return head


def _rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def _grads(module, x, fn):
    module.zero_grad()
    x = x.clone().requires_grad_(True)
    out = fn(x)
    # a random linear functional, so every output coordinate contributes to the gradients
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=out.dtype)
    (out * w).sum().backward()
    return out.detach(), x.grad.detach(), {n: p.grad.detach().clone() for n, p in module.named_parameters()}


@pytest.mark.parametrize("use_mask", [False, True])
def test_fast_reference_and_transformers_agree(use_mask):
    hf = _siglip_head()
    head = MAPHead.from_siglip(hf).double()
    x = torch.randn(5, 11, 32, dtype=torch.float64)
    mask = None
    if use_mask:
        mask = torch.rand(5, 11, generator=torch.Generator().manual_seed(1)) > 0.4
        mask[:, 0] = True

    o_fast, gx_fast, gp_fast = _grads(head, x, lambda t: head(t, token_mask=mask, fast=True))
    o_ref, gx_ref, gp_ref = _grads(head, x, lambda t: head(t, token_mask=mask, fast=False))
    assert _rel(o_fast, o_ref) < 1e-10
    assert _rel(gx_fast, gx_ref) < 1e-10
    for name in gp_ref:
        if name == "attention.in_proj_bias":
            # b_k's gradient is identically zero (softmax shift invariance); compare q/v parts
            d = 32
            assert _rel(gp_fast[name][:d], gp_ref[name][:d]) < 1e-8
            assert _rel(gp_fast[name][2 * d:], gp_ref[name][2 * d:]) < 1e-8
            assert gp_fast[name][d:2 * d].abs().max() < 1e-10
            assert gp_ref[name][d:2 * d].abs().max() < 1e-10
        else:
            assert _rel(gp_fast[name], gp_ref[name]) < 1e-8, name

    if not use_mask:   # transformers' head takes no mask
        o_hf, gx_hf, gp_hf = _grads(hf, x, lambda t: hf(t))
        assert _rel(o_fast, o_hf) < 1e-10
        assert _rel(gx_fast, gx_hf) < 1e-10
        for name in ("probe", "attention.in_proj_weight", "attention.out_proj.weight",
                     "layernorm.weight", "mlp.fc1.weight", "mlp.fc2.bias"):
            assert _rel(gp_fast[name], gp_hf[name]) < 1e-8, name


def test_mask_equals_dropping_tokens():
    """A masked token must behave as if it were not there at all."""
    torch.manual_seed(0)
    head = MAPHead(24, num_heads=3, mlp_ratio=2.0).double().eval()
    x = torch.randn(2, 9, 24, dtype=torch.float64)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[:, 4:] = False
    for fast in (True, False):
        full = head(x, token_mask=mask, fast=fast)
        short = head(x[:, :4], fast=fast)
        assert torch.allclose(full, short, atol=1e-12)
        # the masked tokens' content is irrelevant
        x2 = x.clone()
        x2[:, 4:] = 1e3 * torch.randn_like(x2[:, 4:])
        assert torch.allclose(head(x2, token_mask=mask, fast=fast), full, atol=1e-12)


def test_float32_fast_vs_reference_and_attention():
    torch.manual_seed(0)
    head = MAPHead(64, num_heads=8, mlp_ratio=4.0).eval()
    x = torch.randn(4, 50, 64)
    o1, a1 = head(x, fast=True, return_attention=True)
    o2, a2 = head(x, fast=False, return_attention=True)
    assert _rel(o1, o2) < 1e-5
    assert a1.shape == (4, 8, 50)
    assert torch.allclose(a1.sum(-1), torch.ones(4, 8), atol=1e-5)
    assert _rel(a1, a2) < 1e-5


def test_float32_gradients_within_1e5():
    hf = _siglip_head(dim=48, heads=6, inter=80).float()
    head = MAPHead.from_siglip(hf)
    assert head.hidden == 80 and head.num_heads == 6 and head.eps == hf.layernorm.eps
    x = torch.randn(3, 20, 48)
    _, gx1, gp1 = _grads(head, x, lambda t: head(t, fast=True))
    _, gx2, gp2 = _grads(head, x, lambda t: head(t, fast=False))
    assert _rel(gx1, gx2) < 1e-5
    for name in ("probe", "attention.in_proj_weight", "mlp.fc1.weight", "attention.out_proj.bias"):
        assert _rel(gp1[name], gp2[name]) < 1e-5, name


def test_out_dim_projection_and_errors():
    head = MAPHead(16, num_heads=2, hidden=20, out_dim=8)
    assert head(torch.randn(2, 5, 16)).shape == (2, 8)
    assert MAPHead.from_config(head.config()).config() == head.config()
    with pytest.raises(ValueError, match="divisible"):
        MAPHead(10, num_heads=3)
    with pytest.raises(ValueError, match=r"expected tokens \[B, N, 16\]"):
        head(torch.randn(2, 5, 12))
    with pytest.raises(ValueError, match="no valid token"):
        head(torch.randn(2, 5, 16), token_mask=torch.zeros(2, 5, dtype=torch.bool))


def test_token_dropout_keeps_valid_tokens_and_one_per_row():
    g = torch.Generator().manual_seed(0)
    mask = torch.zeros(50, 6, dtype=torch.bool)
    mask[:, :2] = True
    keep = drop_tokens(mask, (50, 6), 0.9, torch.device("cpu"), g)
    assert not (keep & ~mask).any()            # never resurrects a masked token
    assert keep.any(dim=1).all()               # never empties a row
    frac = drop_tokens(None, (200, 100), 0.3, torch.device("cpu"), g).float().mean().item()
    assert 0.65 < frac < 0.75
    head = MAPHead(16, num_heads=2, token_dropout=0.5).train()
    x = torch.randn(3, 10, 16)
    a = head(x, generator=torch.Generator().manual_seed(1))
    b = head(x, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    head.eval()
    assert torch.equal(head(x), head(x))


def test_half_tokens_with_float_head_outside_autocast():
    """Paper caches tokens in float16; a float32 head scores them without autocast (CPU, eval)."""
    torch.manual_seed(0)
    head = MAPHead(16, num_heads=2, out_dim=8).eval()
    x = torch.randn(3, 5, 16)
    ref = head(x)
    got = head(x.half())
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, head(x.half().float()))
    assert (got - ref).abs().max() < 1e-2
