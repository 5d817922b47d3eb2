"""Frozen backbones, the MAP head, and checkpoints.

- :func:`load_encoder` ``(name, tiny=False, device="cpu", **kw) -> (model, preprocess)``
- :class:`MAPHead` (exact fast path for the single probe query)
- :func:`load_release_head` / :func:`export_release_head` (authors' ``Aleksandar/nearid-siglip2`` layout)
- :func:`save_head` / :func:`load_head` (our safetensors + JSON format)
"""
from __future__ import annotations

from .map_head import MAPHead, MLP, drop_tokens

__all__ = ["MAPHead", "MLP", "drop_tokens"]
