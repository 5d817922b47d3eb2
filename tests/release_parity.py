"""What the two parity tests of the released ID-Sim share (``test_idsim_release_model.py``: DINOv3,
``test_idsim_release_dinov2.py``: DINOv2): a block's output captured by a forward hook, a random
residual head in the release's key names, and that head written out by hand as the reference."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["last_output", "random_head", "head_ref"]


def last_output(layer: nn.Module, run) -> torch.Tensor:
    """The output of ``layer`` the last time ``run()`` called it (no grad)."""
    got = []
    h = layer.register_forward_hook(lambda m, a, o: got.append(o[0] if isinstance(o, (tuple, list)) else o))
    try:
        with torch.no_grad():
            run()
    finally:
        h.remove()
    return got[-1]


def random_head(seed: int, dim: int, hidden: int, fc1_div: float, fc2_div: float) -> dict[str, torch.Tensor]:
    """A residual head's tensors (``ln``, ``fc1``, ``fc2``, ``beta_logit`` = -0.5) from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return {"ln.weight": 1 + 0.1 * torch.randn(dim, generator=g), "ln.bias": 0.1 * torch.randn(dim, generator=g),
            "fc1.weight": torch.randn(hidden, dim, generator=g) / fc1_div,
            "fc1.bias": 0.1 * torch.randn(hidden, generator=g),
            "fc2.weight": torch.randn(dim, hidden, generator=g) / fc2_div, "fc2.bias": 0.1 * torch.randn(dim, generator=g),
            "beta_logit": torch.tensor(-0.5)}


def head_ref(sd: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """The release's head, written out: fc2(silu(fc1(ln(x)))) + sigmoid(beta_logit) * x (not normalised)."""
    h = F.layer_norm(x, (x.shape[-1],), sd["ln.weight"], sd["ln.bias"], 1e-5)
    return F.linear(F.silu(F.linear(h, sd["fc1.weight"], sd["fc1.bias"])), sd["fc2.weight"], sd["fc2.bias"]) \
        + torch.sigmoid(sd["beta_logit"]) * x
