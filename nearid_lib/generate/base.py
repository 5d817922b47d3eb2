"""The one fill interface every generator implements: (image, mask, prompt, seed, settings) -> image.

The procedural backend of the NearID-mini world and the diffusers pipelines of the paper profile
(SDXL, FLUX Fill, FLUX Canny, Qwen-Image ControlNet, PowerPaint/BrushNet) all plug in here, so
the dataset builders never know which one produced a distractor.

Conventions:
- ``image``: PIL RGB; ``mask``: PIL ``L`` of the same size, 255 (>=128) = region to repaint.
- ``seed``: per-item seed (derive it with ``nearid_lib.runtime.seeding.derive_seed(item_id, base=seed)``,
  never from the order of work), so sharded and resumed runs are byte-identical.
- ``settings``: backend-specific keyword arguments (steps, guidance, resolution, ...).
"""
from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from PIL import Image

__all__ = ["FillRequest", "FillBackend", "register_backend", "get_backend", "available_backends",
           "validate_fill_inputs", "FillInputError"]


class FillInputError(ValueError):
    """Bad image/mask given to a fill backend; the message names the item and the field."""


@dataclass
class FillRequest:
    item_id: str
    image: Image.Image
    mask: Image.Image
    prompt: str
    seed: int
    settings: dict[str, Any] = field(default_factory=dict)


def validate_fill_inputs(image: Any, mask: Any, where: str = "") -> tuple[Image.Image, Image.Image]:
    """Check and normalise an (image, mask) pair; raise :class:`FillInputError` naming ``where``.

    Rules: the image must be a PIL image in RGB (RGBA/L/I;16 are *not* silently converted here:
    converting is the dataset loader's documented job); the mask must be a PIL image of the same
    size in mode ``L`` or ``1`` and must select at least one pixel."""
    tag = f"{where}: " if where else ""
    if not isinstance(image, Image.Image):
        raise FillInputError(f"{tag}field 'image' must be a PIL image, got {type(image).__name__}")
    if image.mode != "RGB":
        raise FillInputError(f"{tag}field 'image' has mode {image.mode!r}; expected 'RGB'")
    if not isinstance(mask, Image.Image):
        raise FillInputError(f"{tag}field 'mask' must be a PIL image, got {type(mask).__name__}")
    if mask.size != image.size:
        raise FillInputError(
            f"{tag}field 'mask' has size {mask.size}, but its image has size {image.size}")
    if mask.mode not in ("L", "1"):
        raise FillInputError(f"{tag}field 'mask' has mode {mask.mode!r}; expected 'L' or '1'")
    mask = mask.convert("L")
    if not (np.asarray(mask) >= 128).any():
        raise FillInputError(f"{tag}field 'mask' is empty (no pixel >= 128)")
    return image, mask


class FillBackend(ABC):
    """A generator behind the fill interface. Subclasses set ``name`` and implement ``fill``."""

    name: str = "base"

    @abstractmethod
    def fill(self, image: Image.Image, mask: Image.Image, prompt: str, seed: int,
             **settings: Any) -> Image.Image:
        """Repaint the masked region of ``image``; return an RGB image of the same size."""

    def fill_batch(self, requests: list[FillRequest]) -> list[Image.Image]:
        """Fill several requests; backends that batch natively override this."""
        return [self.fill(r.image, r.mask, r.prompt, r.seed, **r.settings) for r in requests]


_REGISTRY: dict[str, Callable[..., FillBackend]] = {}


def register_backend(name: str):
    """Class decorator / factory registration: ``@register_backend("sdxl")``."""
    def deco(factory):
        _REGISTRY[name] = factory
        return factory
    return deco


def available_backends() -> list[str]:
    _import_builtin_backends()
    return sorted(_REGISTRY)


def get_backend(name: str, **kwargs: Any) -> FillBackend:
    """Instantiate backend ``name``; unknown names raise an error listing the valid ones."""
    _import_builtin_backends()
    if name not in _REGISTRY:
        raise KeyError(f"unknown fill backend {name!r}; valid: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name](**kwargs)


def _import_builtin_backends() -> None:
    # Backends register themselves on import; import the known modules if they exist.

    for mod in ("nearid_lib.generate.procedural", "nearid_lib.generate.diffusers_backends"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:  # module not written (yet) or optional dep missing
            if e.name not in (mod, "diffusers"):
                raise
