"""Frozen backbones, the MAP head, and checkpoints.

- :func:`load_encoder` ``(spec, tiny=False, device="cpu", **kw) -> (model, preprocess)``: the one
  encoder factory (:mod:`.factory`): a registered name (:func:`list_encoders`: ``efficientnet-lite0``
  a.k.a. ``frozen-gap``, ``siglip2-so400m-patch14-384``, ``clip-vit-l14``, ``clip-vit-b32``,
  ``dinov2-base``, ``dinov2-large``, ``dinov3-vitl16``, ``nearid``, FPR's specialised ``bioclip2``,
  ``miewid``, ``classifier``, and ID-Sim's ``idsim`` / ``idsim-release``, registered by their package
  through an entry point), ``name@random``, ``timm:`` / ``open_clip:`` / hub ids, ``module:function``,
  ``file.py:function`` or a callable; :func:`resolve_encoder` = load + probe, before any work
- :func:`load_backbone` ``(cfg, device=None)``: the one loader of a profile's frozen backbone
- :class:`MAPHead` (exact fast path for the single probe query)
- :func:`load_release_head` / :func:`export_release_head` (authors' ``Aleksandar/nearid-siglip2`` layout)
- :func:`save_head` / :func:`load_head` (our safetensors + JSON format)
"""
from __future__ import annotations

from ..runtime.compat import ensure_torchvision

ensure_torchvision()  # before anything imports timm / transformers vision code

from .backbones import Encoder, EncoderOutput, Preprocess  # noqa: E402
from .checkpoint import export_release_head, load_head, load_release_head, save_head  # noqa: E402
from .map_head import MLP, MAPHead, drop_tokens  # noqa: E402
from .registry import EncoderInfo, build_registered, checkpoint_seeds, encoder_aliases, encoder_available, \
    encoder_info, list_encoders, load_backbone, register_encoder, resolve_device, resolve_name, split_weights, \
    RANDOM_INIT  # noqa: E402
from .nearid_model import NearIDEncoder, same_tower  # noqa: E402  (registers "nearid")
from . import specialised  # noqa: E402,F401  (registers "bioclip2", "miewid", "classifier")
from .callables import EncoderSpecError  # noqa: E402
from .factory import ResolvedEncoder, clear_encoder_cache, encoder_kind, load_encoder, load_seed_heads, \
    resolve_encoder  # noqa: E402
from .user import EncoderOutputError, UserEncoder  # noqa: E402

__all__ = ["MAPHead", "MLP", "drop_tokens", "Encoder", "EncoderOutput", "Preprocess", "NearIDEncoder",
           "load_encoder", "resolve_encoder", "ResolvedEncoder", "clear_encoder_cache", "encoder_kind",
           "UserEncoder", "EncoderSpecError", "EncoderOutputError", "build_registered",
           "load_backbone", "register_encoder", "list_encoders", "encoder_aliases", "resolve_name",
           "EncoderInfo", "encoder_info", "encoder_available", "checkpoint_seeds",
           "split_weights", "RANDOM_INIT", "same_tower", "load_seed_heads",
           "resolve_device", "save_head", "load_head", "load_release_head", "export_release_head"]
