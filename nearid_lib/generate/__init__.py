"""Distractor and edit generation: one fill interface, many backends, sharded resumable runs.

- :mod:`.base`: ``FillBackend.fill(image, mask, prompt, seed, **settings)``, ``get_backend(name)``
- :mod:`.diffusers_backends`: SDXL / FLUX Fill / FLUX Canny / Qwen-Image ControlNet / PowerPaint
  (plug-in) / Qwen-Image-Edit / FLUX identity edits, and the tiny offline SD pipeline (tests)
- :mod:`.procedural`: the NearID-mini world's procedural backend (data helper)
- :mod:`.prompts`: near-identity and edit prompts
- :mod:`.quality`: unchanged / drift filters
- :mod:`.runner`: ``generate_source`` (sharded, resumable) and ``merge_source`` (NearID schema)
"""
from __future__ import annotations

from importlib import import_module

from .base import (FillBackend, FillInputError, FillRequest, available_backends, get_backend,
                   register_backend, validate_fill_inputs)

_LAZY = {
    "generate_source": ".runner", "merge_source": ".runner", "items_from_dataset": ".runner",
    "GenItem": ".runner", "item_seed": ".runner", "shard_items": ".runner",
    "register_source": ".runner",
    "QualityFilter": ".quality", "rejection_report": ".quality",
    "near_identity_prompt": ".prompts", "identity_edit_prompt": ".prompts",
    "context_edit_prompt": ".prompts",
    "NEARID_SOURCES": ".diffusers_backends", "build_tiny_sd_inpaint_pipeline": ".diffusers_backends",
    "DiffusersFillBackend": ".diffusers_backends",
}

__all__ = ["FillBackend", "FillInputError", "FillRequest", "available_backends", "get_backend",
           "register_backend", "validate_fill_inputs", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'nearid_lib.generate' has no attribute {name!r}")
