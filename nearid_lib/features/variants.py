"""Deterministic image variants a feature cache keys on (``"full"``; ``"fg"``: background blacked out
with the object mask; ``"fg_grey"``: background set to a neutral grey, FPR's background removal;
more with :func:`register_variant`), the one definition of "foreground only"
(:func:`fill_background`) and the default image / mask loaders."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PIL import Image

from ..imageio import load_image, load_mask

__all__ = ["VARIANTS", "BG_GREY", "fill_background", "register_variant", "apply_variant", "default_loaders", "ImageLoader", "MaskLoader",
           "needs_mask", "check_variant"]

ImageLoader = Callable[[str], Image.Image]
MaskLoader = Callable[[str], np.ndarray]


def _full(image: Image.Image, mask: np.ndarray | None) -> Image.Image:
    return image


# Grey that an ImageNet-normalised encoder sees as ~0: a background "removed" becomes neutral
# (FPR Section 5.2 / Figure 7, variant "fg_grey").
BG_GREY = (124, 116, 104)


def fill_background(image: Image.Image, mask, fill: tuple[int, int, int] = (0, 0, 0), where: str = "") -> Image.Image:
    """The image with every pixel outside ``mask`` set to ``fill``: the one definition of "foreground
    only" (variants ``fg``: black, ``fg_grey``: :data:`BG_GREY`; FPR's background removal).

    ``mask``: bool [H, W] (True = object) or 0-255 values / a mode-L image (> 127 = object). A mask
    whose size differs from its image's is an error naming ``where`` (the image file, row or
    variant), the rule of the dataset loader: resizing it would silently misplace the object."""
    tag = f"{where}: " if where else ""
    if mask is None:
        raise ValueError(f"{tag}needs a mask for every image")
    img = np.asarray(image.convert("RGB")).copy()
    m = np.asarray(mask)
    m = m > 127 if m.dtype != bool else m
    if m.shape != img.shape[:2]:
        raise ValueError(f"{tag}mask size {m.shape[1::-1]} differs from its image size {img.shape[1::-1]} (W, H)")
    img[~m] = fill
    return Image.fromarray(img)


def _fg(image: Image.Image, mask: np.ndarray | None) -> Image.Image:
    """Background blacked out: keep the pixels where ``mask`` is True."""
    return fill_background(image, mask, (0, 0, 0), "variant 'fg'")


def _fg_grey(image: Image.Image, mask: np.ndarray | None) -> Image.Image:
    """Background set to the neutral grey :data:`BG_GREY` (FPR's background removal)."""
    return fill_background(image, mask, BG_GREY, "variant 'fg_grey'")


VARIANTS: dict[str, Callable[[Image.Image, np.ndarray | None], Image.Image]] = {"full": _full, "fg": _fg,
                                                                            "fg_grey": _fg_grey}

_NEEDS_MASK = {"fg", "fg_grey"}



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


def apply_variant(image: Image.Image, mask: np.ndarray | None, variant: str, where: str = "") -> Image.Image:
    """``VARIANTS[variant](image, mask)``, with a clear error for unknown names; ``where`` (the
    image file or row) replaces the variant's name at the head of a bad mask's error."""
    check_variant(variant)
    if not where:
        return VARIANTS[variant](image, mask)
    try:
        return VARIANTS[variant](image, mask)
    except ValueError as err:
        msg = str(err).removeprefix(f"variant {variant!r}: ")
        raise ValueError(f"{where}: {msg}") from err


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
