"""Frozen backbones, the MAP head, and checkpoints.

- :func:`load_encoder` ``(name, tiny=False, device="cpu", **kw) -> (model, preprocess)``; names in
  :func:`list_encoders` (``efficientnet-lite0`` a.k.a. ``frozen-gap``, ``siglip2-so400m-patch14-384``,
  ``clip-vit-l14``, ``clip-vit-b32``, ``dinov2-base``, ``dinov2-large``, ``dinov3-vitl16``, ``nearid``,
  ``idsim``, and FPR's specialised ``bioclip2``, ``miewid``, ``classifier``): every name is registered
  when this package is imported (heavy dependencies load only when that encoder is built)
- :func:`load_backbone` ``(cfg, device=None)``: the one loader of a profile's frozen backbone
- :class:`MAPHead` (exact fast path for the single probe query)
- :func:`load_release_head` / :func:`export_release_head` (authors' ``Aleksandar/nearid-siglip2`` layout)
- :func:`save_head` / :func:`load_head` (our safetensors + JSON format)
"""
from __future__ import annotations

from ..compat import ensure_torchvision

ensure_torchvision()  # before anything imports timm / transformers vision code

from .backbones import Encoder, EncoderOutput, Preprocess  # noqa: E402
from .checkpoint import export_release_head, load_head, load_release_head, save_head  # noqa: E402
from .map_head import MLP, MAPHead, drop_tokens  # noqa: E402
from .registry import NearIDEncoder, encoder_aliases, list_encoders, load_backbone, load_encoder, \
    register_encoder, resolve_device, resolve_name, split_weights, RANDOM_INIT  # noqa: E402
from . import specialised  # noqa: E402,F401  (registers "bioclip2", "miewid", "classifier")

__all__ = ["MAPHead", "MLP", "drop_tokens", "Encoder", "EncoderOutput", "Preprocess", "NearIDEncoder",
           "load_encoder", "load_backbone", "register_encoder", "list_encoders", "encoder_aliases", "resolve_name",
           "split_weights", "RANDOM_INIT",
           "resolve_device", "save_head", "load_head", "load_release_head", "export_release_head"]
