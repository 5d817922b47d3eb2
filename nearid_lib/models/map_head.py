"""Multi-head Attention Pooling (MAP) head with an exact fast path for its single probe query.

:class:`MAPHead` has the semantics (and the parameter names) of transformers'
``SiglipMultiheadAttentionPoolingHead``::

    h   = MultiheadAttention(query=probe, key=x, value=x)      # [B, 1, D]
    out = h + MLP(LayerNorm(h))                                # [B, D]   (MLP: fc1 -> GELU-tanh -> fc2)

so a SigLIP head can be copied in (:meth:`MAPHead.from_siglip`) and a trained head exported back.

Why a fast path: the reference attention projects every token through W_k and W_v
(2·B·N·D² multiply-adds: ~0.5 TFLOP for a [128, 729, 1152] batch), although there is only one
query. Re-associating the products is exact:

    score_{b,t,h} = (W_k,h x_{b,t} + b_k,h) · q_h / sqrt(d_h)
                  = x_{b,t} · (W_k,hᵀ q_h) / sqrt(d_h) + const_h          # u_h = W_k,hᵀ q_h: [D]
    v_{b,h}       = Σ_t a_{b,t,h} (W_v,h x_{b,t} + b_v,h)
                  = W_v,h (Σ_t a_{b,t,h} x_{b,t}) + b_v,h                  # since Σ_t a = 1

which costs 2·B·N·D·H (H = heads) instead of 2·B·N·D², i.e. D/H times fewer FLOPs.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MAPHead", "MLP", "drop_tokens"]

_ACTS = {
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": F.gelu,
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
    "relu": F.relu,
}


class MLP(nn.Module):
    """fc1 -> activation -> fc2, named like ``SiglipMLP`` so state dicts line up."""

    def __init__(self, dim: int, hidden: int, act: str = "gelu_pytorch_tanh"):
        super().__init__()
        if act not in _ACTS:
            raise ValueError(f"unknown activation {act!r}; valid: {', '.join(_ACTS)}")
        self.act = act
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(_ACTS[self.act](self.fc1(x)))


def drop_tokens(token_mask: torch.Tensor | None, shape: tuple[int, int], p: float,
                device: torch.device, generator: torch.Generator | None = None) -> torch.Tensor:
    """Token dropout: keep each valid token with probability ``1 - p`` (bool [B, N], True = keep).

    At least one valid token per row survives (the best-scoring random draw among the valid ones),
    so the softmax never sees an all-masked row."""
    b, n = shape
    keep = token_mask if token_mask is not None else torch.ones(b, n, dtype=torch.bool, device=device)
    r = torch.rand(b, n, device=device, generator=generator)
    dropped = keep & (r >= p)
    # rescue rows that lost every token: keep their valid token with the largest draw
    empty = ~dropped.any(dim=1)
    if empty.any():
        best = torch.where(keep, r, torch.full_like(r, -1.0)).argmax(dim=1)
        rescue = F.one_hot(best, n).bool() & empty[:, None]
        dropped = dropped | rescue
    return dropped


class MAPHead(nn.Module):
    """Attention pooling with one learned probe query, LayerNorm and a residual MLP.

    Args:
        dim: token width D (SigLIP2-so400m: 1152; EfficientNet-Lite0: 1280).
        num_heads: attention heads (D must be divisible by it).
        mlp_ratio: MLP hidden width = round(dim * mlp_ratio), unless ``hidden`` is given.
        hidden: explicit MLP hidden width (SigLIP2-so400m: 4304).
        out_dim: optional final linear projection to ``out_dim`` (None or ``dim``: no projection,
            exactly the SigLIP head).
        act: MLP activation, as transformers' ``hidden_act`` names it.
        eps: LayerNorm epsilon (SigLIP: 1e-6).
        token_dropout: probability of dropping each token in training mode (both paths).
    """

    def __init__(self, dim: int, num_heads: int = 8, mlp_ratio: float = 4.0, hidden: int | None = None,
                 out_dim: int | None = None, act: str = "gelu_pytorch_tanh", eps: float = 1e-6,
                 token_dropout: float = 0.0):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"MAPHead: dim {dim} is not divisible by num_heads {num_heads}")
        if not 0.0 <= token_dropout < 1.0:
            raise ValueError(f"MAPHead: token_dropout must be in [0, 1), got {token_dropout}")
        hidden = int(hidden) if hidden is not None else int(round(dim * mlp_ratio))
        self.dim, self.num_heads, self.hidden = dim, num_heads, hidden
        self.act, self.eps, self.token_dropout = act, eps, token_dropout
        self.out_dim = dim if out_dim is None else int(out_dim)
        self.probe = nn.Parameter(torch.randn(1, 1, dim))
        self.attention = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.layernorm = nn.LayerNorm(dim, eps=eps)
        self.mlp = MLP(dim, hidden, act)
        self.proj = nn.Linear(dim, self.out_dim) if self.out_dim != dim else None

    # ------------------------------------------------------------------ construction
    def config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able) that rebuild this head's shape."""
        return {"dim": self.dim, "num_heads": self.num_heads, "hidden": self.hidden,
                "out_dim": self.out_dim, "act": self.act, "eps": self.eps,
                "token_dropout": self.token_dropout}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "MAPHead":
        return cls(**{k: v for k, v in cfg.items() if k != "mlp_ratio"})

    @classmethod
    def from_siglip(cls, head: nn.Module, token_dropout: float = 0.0) -> "MAPHead":
        """A copy of a transformers ``SiglipMultiheadAttentionPoolingHead`` (weights copied)."""
        dim = head.probe.shape[-1]
        act = getattr(getattr(head.mlp, "config", None), "hidden_act", "gelu_pytorch_tanh")
        new = cls(dim, head.attention.num_heads, hidden=head.mlp.fc1.out_features, act=act,
                  eps=head.layernorm.eps, token_dropout=token_dropout)
        p = next(head.parameters())
        new = new.to(device=p.device, dtype=p.dtype)   # before copying: no round trip through fp32
        new.load_state_dict(head.state_dict())
        return new

    # ------------------------------------------------------------------ forward
    def forward(self, tokens: torch.Tensor, token_mask: torch.Tensor | None = None, fast: bool = True,
                return_attention: bool = False, generator: torch.Generator | None = None):
        """Pool ``tokens`` [B, N, D] into [B, out_dim].

        ``token_mask`` (bool [B, N], True = a valid token) excludes padding / masked tokens from
        the softmax. ``fast=False`` runs ``nn.MultiheadAttention`` (the reference). With
        ``return_attention=True`` returns ``(pooled, attn)``, attn [B, heads, N] (rows sum to 1)."""
        if tokens.dim() != 3 or tokens.shape[-1] != self.dim:
            raise ValueError(f"MAPHead: expected tokens [B, N, {self.dim}], got {tuple(tokens.shape)}")
        if token_mask is not None:
            if token_mask.shape != tokens.shape[:2]:
                raise ValueError(f"MAPHead: token_mask {tuple(token_mask.shape)} does not match "
                                 f"tokens {tuple(tokens.shape[:2])}")
            token_mask = token_mask.to(device=tokens.device, dtype=torch.bool)
            if not token_mask.any(dim=1).all():
                raise ValueError("MAPHead: a row of token_mask has no valid token")
        wdt = self.probe.dtype
        if tokens.dtype != wdt and not torch.is_autocast_enabled(tokens.device.type):
            # half-precision token caches (paper: backbone.dtype=float16) with a float32 head and
            # no autocast (CPU, or evaluation outside autocast): compute in the head's dtype
            tokens = tokens.to(wdt)
        if self.training and self.token_dropout > 0:
            token_mask = drop_tokens(token_mask, tokens.shape[:2], self.token_dropout, tokens.device,
                                     generator)
        if fast:
            h, attn = self._attend_fast(tokens, token_mask)
        else:
            h, attn = self._attend_reference(tokens, token_mask, return_attention)
        h = h + self.mlp(self.layernorm(h))                      # [B, D]
        if self.proj is not None:
            h = self.proj(h)
        return (h, attn) if return_attention else h

    def _attend_reference(self, x, token_mask, need_weights):
        b = x.shape[0]
        probe = self.probe.expand(b, -1, -1)                      # [B, 1, D]
        kpm = None if token_mask is None else ~token_mask
        out, w = self.attention(probe, x, x, key_padding_mask=kpm, need_weights=need_weights,
                                average_attn_weights=False)
        attn = None if w is None else w[:, :, 0, :]              # [B, H, 1, N] -> [B, H, N]
        return out[:, 0], attn

    def _attend_fast(self, x, token_mask):
        d, nh = self.dim, self.num_heads
        dh = d // nh
        w_in, b_in = self.attention.in_proj_weight, self.attention.in_proj_bias
        wq, wk, wv = w_in[:d], w_in[d:2 * d], w_in[2 * d:]
        bq, bk, bv = b_in[:d], b_in[d:2 * d], b_in[2 * d:]
        q = (F.linear(self.probe[0, 0], wq, bq) / math.sqrt(dh)).view(nh, dh)   # [H, dh], scaled
        wk_h = wk.view(nh, dh, d)                                               # [H, dh, D]
        u = torch.einsum("hk,hkd->hd", q, wk_h)                                 # [H, D] = W_k,hᵀ q_h
        c = (bk.view(nh, dh) * q).sum(-1)                                       # [H]; softmax-invariant
        scores = torch.matmul(x, u.t()) + c                                     # [B, N, H]
        if token_mask is not None:
            scores = scores.masked_fill(~token_mask[:, :, None], float("-inf"))
        attn = scores.softmax(dim=1)                                            # over tokens
        pooled = torch.matmul(attn.transpose(1, 2), x)                          # [B, H, D]
        v = torch.einsum("bhd,hkd->bhk", pooled, wv.view(nh, dh, d)) + bv.view(nh, dh)  # [B, H, dh]
        out = self.attention.out_proj(v.reshape(x.shape[0], d))                 # [B, D]
        return out, attn.transpose(1, 2)                                        # attn: [B, H, N]

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, num_heads={self.num_heads}, hidden={self.hidden}, "
                f"out_dim={self.out_dim}, act={self.act}, token_dropout={self.token_dropout}")
