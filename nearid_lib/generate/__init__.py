"""Distractor and edit generation: one fill interface, many backends, sharded resumable runs.

- :mod:`.base`: ``FillBackend.fill(image, mask, prompt, seed, **settings)``, ``get_backend(name)``
- :mod:`.diffusers_backends`: SDXL / FLUX Fill / FLUX Canny / Qwen-Image ControlNet / PowerPaint
  (plug-in) / Qwen-Image-Edit / FLUX identity edits; :mod:`.specs`: their settings and the NearID
  source names; :mod:`.tiny_sd`: the tiny offline SD inpainting pipeline (tests, throughput)
- :mod:`.procedural`: the NearID-mini world's procedural backend and ``ResampledBackend``
- :mod:`.prompts`: near-identity and edit prompts
- :mod:`.quality`: unchanged / drift filters
- :mod:`.runner`: ``generate_source`` (sharded, resumable; the CLI); :mod:`.items`: the items of a
  dataset, their seeds, shards, manifests and completion records; :mod:`.merge`: ``merge_source``
  (NearID schema), ``merge_launch`` (that merge as the pass after a multi-process launch)
"""
from __future__ import annotations

from importlib import import_module

from .base import (FillBackend, FillInputError, FillRequest, available_backends, get_backend,
                   register_backend, validate_fill_inputs)

_LAZY = {
    "generate_source": ".runner", "merge_source": ".merge", "items_from_dataset": ".items",
    "GenItem": ".items", "item_seed": ".items", "shard_items": ".items",
    "register_source": ".merge",
    "QualityFilter": ".quality", "rejection_report": ".quality",
    "near_identity_prompt": ".prompts", "identity_edit_prompt": ".prompts",
    "context_edit_prompt": ".prompts",
    "NEARID_SOURCES": ".specs", "build_tiny_sd_inpaint_pipeline": ".tiny_sd",
    "DiffusersFillBackend": ".diffusers_backends",
}

__all__ = ["FillBackend", "FillInputError", "FillRequest", "available_backends", "get_backend",
           "register_backend", "validate_fill_inputs", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'nearid_lib.generate' has no attribute {name!r}")
