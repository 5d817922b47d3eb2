"""Backbone features computed at every call, for augmentations that change pixels randomly."""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np
import torch
from PIL import Image

from .cache import backbone_of
from .variants import ImageLoader, MaskLoader, apply_variant, check_variant, default_loaders, needs_mask

__all__ = ["OnTheFlyFeatures"]


class OnTheFlyFeatures:
    """Same role as :class:`TokenCache` but runs the backbone every call: for augmentations
    that change pixels randomly (``augment(image, mask, rng) -> image``, applied after the variant).

    ``features(relpaths, masks=None, rng=None, grad=False) -> EncoderOutput`` (tokens [B, N, D])."""

    def __init__(self, encoder, root: str | os.PathLike | None = None, data: Any = None,
                 loader: ImageLoader | None = None, mask_loader: MaskLoader | None = None,
                 variant: str = "full", augment: Callable | None = None):
        check_variant(variant)
        self.encoder = backbone_of(encoder)
        self.variant, self.augment = variant, augment
        if loader is None or mask_loader is None:
            d_img, d_mask = default_loaders(root, data)
            loader, mask_loader = loader or d_img, mask_loader or d_mask
        self.loader, self.mask_loader = loader, mask_loader

    def images(self, relpaths: Sequence[str], masks: Sequence[str | None] | None = None,
               rng: np.random.Generator | None = None) -> list[Image.Image]:
        """The PIL images after the variant and the augmentation."""
        out = []
        for i, rel in enumerate(relpaths):
            m = masks[i] if masks is not None else None
            mk = self.mask_loader(m) if m else None
            if needs_mask(self.variant) and mk is None:
                raise ValueError(f"variant {self.variant!r} needs a mask for {rel!r}")
            im = apply_variant(self.loader(rel), mk, self.variant)
            if self.augment is not None:
                im = self.augment(im, mk, rng)
            out.append(im)
        return out

    def features(self, relpaths: Sequence[str], masks: Sequence[str | None] | None = None,
                 rng: np.random.Generator | None = None, grad: bool = False):
        """Backbone outputs for the (augmented) images; no grad unless ``grad=True``."""
        pix = self.encoder.preprocess.batch(self.images(relpaths, masks, rng))
        with torch.set_grad_enabled(grad):
            return self.encoder(pix)
