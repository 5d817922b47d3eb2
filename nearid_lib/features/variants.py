"""Deterministic image variants a feature cache keys on (``"full"``; ``"fg"``: background blacked out
with the object mask; more with :func:`register_variant`) and the default image / mask loaders."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PIL import Image

from ..imageio import load_image, load_mask

__all__ = ["VARIANTS", "register_variant", "apply_variant", "default_loaders", "ImageLoader", "MaskLoader",
           "needs_mask", "check_variant"]

ImageLoader = Callable[[str], Image.Image]
MaskLoader = Callable[[str], np.ndarray]


def _full(image: Image.Image, mask: np.ndarray | None) -> Image.Image:
    return image


def _fg(image: Image.Image, mask: np.ndarray | None) -> Image.Image:
    """Background blacked out: keep the pixels where ``mask`` is True."""
    if mask is None:
        raise ValueError("variant 'fg' needs a mask for every image")
    arr = np.asarray(image.convert("RGB"))
    m = np.asarray(mask)
    if m.shape != arr.shape[:2]:
        raise ValueError(f"variant 'fg': mask shape {m.shape} does not match image {arr.shape[:2]}")
    return Image.fromarray(np.where(m.astype(bool)[..., None], arr, 0).astype(np.uint8))


VARIANTS: dict[str, Callable[[Image.Image, np.ndarray | None], Image.Image]] = {"full": _full, "fg": _fg}

_NEEDS_MASK = {"fg"}



def needs_mask(variant: str) -> bool:
    """Whether ``variant`` reads the object mask (every image then needs one)."""
    return variant in _NEEDS_MASK


def check_variant(variant: str) -> None:
    """Raise ``KeyError`` naming the valid variants when ``variant`` is unknown."""
    if variant not in VARIANTS:
        raise KeyError(f"unknown feature variant {variant!r}; valid: {', '.join(VARIANTS)}")


def register_variant(name: str, fn: Callable[[Image.Image, np.ndarray | None], Image.Image],
                     needs_mask: bool = True) -> None:
    """Add a deterministic image variant ``fn(image, mask) -> image`` that the cache can key on."""
    VARIANTS[name] = fn
    if needs_mask:
        _NEEDS_MASK.add(name)


def apply_variant(image: Image.Image, mask: np.ndarray | None, variant: str) -> Image.Image:
    """``VARIANTS[variant](image, mask)``, with a clear error for unknown names."""
    check_variant(variant)
    return VARIANTS[variant](image, mask)


def default_loaders(root: str | os.PathLike | None = None, data: Any = None) -> tuple[ImageLoader, MaskLoader]:
    """``(image_loader, mask_loader)``: a dataset object's ``.image`` / ``.mask`` (NearIDData) if
    given, else image files under ``root`` read by :mod:`nearid_lib.imageio` (masks: >= 128 = foreground)."""
    if data is not None:
        return data.image, data.mask
    if root is None:
        raise ValueError("give root=, data= or loader= to read images")
    root = Path(root)

    def image(rel: str) -> Image.Image:
        p = root / rel
        if not p.exists():
            raise FileNotFoundError(f"image {rel!r} not found under {root}")
        return load_image(p)                  # the one loader: alpha onto black, 16 bit scaled, EXIF

    def mask(rel: str) -> np.ndarray:
        p = root / rel
        if not p.exists():
            raise FileNotFoundError(f"mask {rel!r} not found under {root}")
        return load_mask(p)

    return image, mask
