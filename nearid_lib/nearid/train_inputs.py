"""What the head sees at a training step: backbone tokens of every slot, cached or on the fly, and
the augmentations of each mode.

* cached (``train.use_cache=True``, default): backbone tokens come from the
  :class:`~nearid_lib.features.TokenCache` of each image group and variant (``"full"`` and ``"fg"``:
  background blacked out, used for role-aware foreground masking). Cheap augmentations act on the
  token grid: token dropout (in the head) and a random token-window crop (``train.token_crop``,
  :func:`crop_masks`: a translation/scale proxy). A horizontal flip is deliberately absent: the MAP
  head has no position embedding, so a flipped grid pools identically. Colour jitter, flips and
  translation/scale of the pixels need the uncached mode.
* uncached (``train.use_cache=False``): images are loaded, masked by role, augmented
  (:func:`augment_image`: colour jitter, horizontal flip, random translation/scale) and run through
  the frozen backbone at every step. Without augmentation both modes see the same tokens (up to the
  cache's float16).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch
from PIL import Image, ImageEnhance

from ..features import apply_variant
from ..paths import cache_dir
from ..features.embedder import Embedder
from .rows import train_groups
from ..features.stream import StreamFeatures, open_train_store, process_writer

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["augment_image", "crop_masks", "TrainFeatures", "train_features"]


def augment_image(img: Image.Image, rng: np.random.Generator, jitter: float = 0.2, flip: bool = True,
                  max_shift: float = 0.08, scale: tuple[float, float] = (0.9, 1.1)) -> Image.Image:
    """Per-slot image augmentation of the uncached mode: colour jitter (brightness, contrast,
    saturation, each x U[1-jitter, 1+jitter]), horizontal flip (p=0.5), random translation
    (|shift| <= max_shift of the size) and isotropic scale, black fill outside."""
    w, h = img.size
    for enh in (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color):
        img = enh(img).enhance(float(rng.uniform(1 - jitter, 1 + jitter)))
    if flip and rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    s = float(rng.uniform(*scale))
    tx, ty = (float(v) for v in rng.uniform(-max_shift, max_shift, size=2) * (w, h))
    # inverse affine about the centre: output pixel (x,y) samples input ((x-cx-tx)/s+cx, ...)
    cx, cy = w / 2, h / 2
    coeffs = (1 / s, 0, cx - (cx + tx) / s, 0, 1 / s, cy - (cy + ty) / s)
    return img.transform((w, h), Image.AFFINE, coeffs, resample=Image.BILINEAR)


def crop_masks(n: int, grid: int, n_tokens: int, p: float, rng: np.random.Generator) -> torch.Tensor:
    """Token-window crops [n, N] bool: with prob. p keep a random (grid-1)x(grid-1) window of the
    grid x grid token map (translation/scale proxy on cached tokens); else keep everything."""
    keep = np.ones((n, n_tokens), dtype=bool)
    if p <= 0 or grid * grid != n_tokens or grid < 3:
        return torch.from_numpy(keep)
    for i in np.flatnonzero(rng.random(n) < p):
        g = np.zeros((grid, grid), dtype=bool)
        y0, x0 = rng.integers(0, 2, size=2)
        g[y0:y0 + grid - 1, x0:x0 + grid - 1] = True
        keep[i] = g.ravel()
    return torch.from_numpy(keep)


class TrainFeatures:
    """Backbone tokens for a list of (relpath, mask, variant) slots, cached or on the fly."""

    def __init__(self, encoder, data: NearIDData, cfg: Profile, cache_root=None, progress: bool = True):
        self.cfg, self.data = cfg, data
        self.backbone = getattr(encoder, "backbone", encoder)
        self.emb = Embedder(self.backbone, data, profile=cfg, cache_root=cache_root, progress=progress,
                            batch_size=cfg.backbone.batch_size, store_tokens=True, token_store="cache")
        if cfg.train.use_cache:
            self.emb.build(train_groups(data, cfg), variants=("full", "fg"))

    def tokens(self, rels: Sequence[str], masks: Sequence[str], fg: np.ndarray,
               rng: np.random.Generator) -> torch.Tensor:
        n = len(rels)
        if self.cfg.train.use_cache:
            out = torch.empty(n, self.backbone.n_tokens, self.backbone.token_dim)
            for variant, sel in (("fg", np.flatnonzero(fg)), ("full", np.flatnonzero(~fg))):
                if len(sel):
                    out[torch.from_numpy(sel)] = self.emb.tokens([rels[i] for i in sel], variant)
            return out
        imgs = []
        for i in range(n):
            im = self.data.image(rels[i])
            if fg[i]:
                im = apply_variant(im, self.data.mask(masks[i]), "fg")
            if self.cfg.train.augment:
                im = augment_image(im, rng)
            imgs.append(im)
        with torch.no_grad():
            return self.backbone(self.backbone.preprocess.batch(imgs)).tokens.float().cpu()


def train_features(cfg: Profile, data: NearIDData, backbone, rank: int = 0, cache_root=None, progress: bool = False):
    """Training's token source: the float16 :class:`TrainFeatures` cache (``train.token_store =
    "cache"``, or ``use_cache=False``: streaming), or the lazily filled int8/fp8
    :class:`~nearid_lib.features.stream.StreamFeatures` store, in which each process writes its own
    shards (``rank<k>-<host>-p<pid>``: the sweep's workers are all rank 0) of the grids its batches
    ask for and reads the others'. Evaluation (:class:`~nearid_lib.features.embedder.Embedder`) reads
    and fills the same store. The store writes while its file system keeps the reserve of free space
    (:func:`~nearid_lib.features.disk.reserve_bytes`, read at every write: the processes sharing
    the store share that limit); past it a grid the store lacks is computed each time it is read, so
    a disk too small for the whole store slows training instead of stopping it."""
    tc = cfg.train
    if not tc.use_cache or tc.token_store == "cache":
        return TrainFeatures(backbone, data, cfg, cache_root=cache_root, progress=progress)
    store = open_train_store(backbone, data, cache_root or cache_dir(cfg.name), dtype=tc.token_store,
                             writer=process_writer(f"rank{rank}"), keep_free_gb=None)   # None: the default reserve
    cuda = getattr(backbone, "device", torch.device("cpu")).type == "cuda"
    return StreamFeatures(backbone, data, store=store, batch_size=cfg.backbone.batch_size,
                          amp_dtype=torch.bfloat16 if cuda else None)
