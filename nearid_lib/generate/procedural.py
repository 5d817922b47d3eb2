"""The ``procedural`` fill backend: classical object removal + compositing of a rendered
near-identity instance, behind the same ``fill(image, mask, prompt, seed)`` interface as the
diffusion inpainting backends.

Removal: every masked pixel takes the colour of its nearest unmasked pixel
(``scipy.ndimage.distance_transform_edt(..., return_indices=True)``), then the filled region is
Gaussian-blurred (masked pixels only) and given a little seeded noise. Why not
``skimage.restoration.inpaint_biharmonic``: it solves a sparse system per channel and takes
seconds per 224 px image with a 130 px hole; the nearest-pixel fill takes ~2 ms, and the object
composited on top covers almost all of the hole anyway (only the rim of a changed silhouette
shows the fill).

Compositing: ``settings["instance"]`` is a rendered object layer (dict with ``prem``/``alpha``
float arrays, see :func:`nearid_lib.data.world.render_object`) or an RGBA PIL image of the same
size; it is clipped to the mask, so pixels outside the mask are returned unchanged (exact
matched context). Without an instance the backend only removes the object.

:class:`ResampledBackend` runs a backend at a higher resolution (the ``_hr`` sources); regenerating
a world source through the runner is :mod:`nearid_lib.data.world_sources`.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from .base import FillBackend, register_backend, validate_fill_inputs

__all__ = ["ProceduralFill", "remove_object", "ResampledBackend"]


def _smooth_fill(img: np.ndarray, mask: np.ndarray, blur: float):
    """``(box, sub-mask, smoothed nearest-pixel fill)`` of ``img`` inside ``mask``: the seed-free
    part of :func:`remove_object`, shared by every distractor source of one view."""
    # Work on the mask's bounding box plus a margin: the nearest unmasked pixel of a masked pixel
    # always lies inside it (the ring around the box is unmasked), so the result is identical
    # to a full-frame fill at a fraction of the cost.
    ys, xs = np.nonzero(mask)
    pad = int(np.ceil(4 * blur)) + 2
    y0, y1 = max(0, ys.min() - pad), min(mask.shape[0], ys.max() + pad + 1)
    x0, x1 = max(0, xs.min() - pad), min(mask.shape[1], xs.max() + pad + 1)
    m, sub = mask[y0:y1, x0:x1], img[y0:y1, x0:x1]
    # Indices of the nearest unmasked pixel for every pixel: [2,h,w]
    _, (iy, ix) = ndimage.distance_transform_edt(m, return_indices=True)
    filled = sub[iy, ix]
    sm = np.stack([ndimage.gaussian_filter(filled[..., c], blur) for c in range(3)], axis=-1)
    return (y0, y1, x0, x1), m, sm


# The seed-free fills last computed in this process, keyed by a digest of (image, mask, blur):
# every fill generator of a view fills the same image (one per resolution), so they share it.
_SMOOTH_CACHE: OrderedDict[bytes, Any] = OrderedDict()
_SMOOTH_CACHE_SIZE = 8          # a mini view: 3 removal blurs x 2 resolutions


def _cached_smooth_fill(img: np.ndarray, mask: np.ndarray, blur: float, img8: np.ndarray):
    """:func:`_smooth_fill` (None for an empty or full mask), from :data:`_SMOOTH_CACHE` when the
    same image, mask and blur were filled recently in this process (the result is read-only there;
    ``_SMOOTH_CACHE_SIZE = 0``: no cache). ``img8``: the uint8 image ``img`` was made from, the
    key's bytes (a quarter of the float image's). Single-threaded use (one per worker process)."""
    key = None
    if _SMOOTH_CACHE_SIZE > 0:
        key = hashlib.sha1(img8.tobytes() + mask.tobytes() + repr((img8.shape, float(blur))).encode()).digest()
        if key in _SMOOTH_CACHE:
            _SMOOTH_CACHE.move_to_end(key)
            return _SMOOTH_CACHE[key]
    res = _smooth_fill(img, mask, blur) if mask.any() and not mask.all() else None
    if key is not None:
        _SMOOTH_CACHE[key] = res
        while len(_SMOOTH_CACHE) > _SMOOTH_CACHE_SIZE:
            _SMOOTH_CACHE.popitem(last=False)
    return res


def remove_object(img: np.ndarray, mask: np.ndarray, seed: int = 0, blur: float = 2.0,
                  noise: float = 0.01, smooth=None) -> np.ndarray:
    """Fast classical inpainting of float RGB ``img`` [H,W,3] inside bool ``mask`` [H,W].
    ``smooth``: a precomputed ``_smooth_fill(img, mask, blur)`` of the same inputs."""
    if not mask.any():
        return img.copy()
    if mask.all():
        return np.full_like(img, img.mean())
    (y0, y1, x0, x1), m, sm = smooth if smooth is not None else _smooth_fill(img, mask, blur)
    rng = np.random.default_rng(seed)
    sm = sm + rng.normal(0, noise, sm.shape).astype(np.float32)
    out = img.copy()
    out[y0:y1, x0:x1][m] = np.clip(sm[m], 0, 1)
    return out


@register_backend("procedural")
class ProceduralFill(FillBackend):
    """Nearest-pixel removal + exact-mask compositing of a rendered near-identity instance."""

    name = "procedural"

    def __init__(self, blur: float = 2.0, noise: float = 0.01, soften: float = 0.0,
                 gain: tuple[float, float, float] = (1.0, 1.0, 1.0), gamma: float = 1.0,
                 grain: float = 0.0, levels: int = 0):
        """``blur``/``noise``: the removal fill's smoothing (px) and seeded noise. The rest is the
        generator's look on the composited instance (defaults: none, the instance as rendered):
        ``soften`` a Gaussian blur (px at the fill resolution), ``gain`` a per-channel colour cast,
        ``gamma`` a tone curve, ``levels`` a colour quantisation (0 = none) and ``grain`` seeded
        per-pixel noise (sd, in [0, 1] units)."""
        self.blur = blur
        self.noise = noise
        self.soften = float(soften)
        self.gain = tuple(float(g) for g in gain)
        self.gamma = float(gamma)
        self.grain = float(grain)
        self.levels = int(levels)

    @property
    def styled(self) -> bool:
        """Whether the instance is re-rendered in a look of this generator's own."""
        return (self.soften > 0 or self.gain != (1.0, 1.0, 1.0) or self.gamma != 1.0
                or self.grain > 0 or self.levels > 0)

    def _style(self, prem: np.ndarray, a: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """The instance layer (premultiplied colour, alpha) in this generator's look."""
        if self.soften > 0:
            prem = np.stack([ndimage.gaussian_filter(prem[..., c], self.soften) for c in range(3)], axis=-1)
            a = ndimage.gaussian_filter(a, self.soften)
        col = prem / np.maximum(a, 1e-6)[..., None]
        col = np.clip(col * np.asarray(self.gain, np.float32), 0, 1) ** self.gamma
        if self.levels > 0:
            col = np.rint(col * (self.levels - 1)) / (self.levels - 1)
        if self.grain > 0:
            # its own stream (the removal noise keeps the seed's first draws)
            col = col + np.random.default_rng([seed, 1]).normal(0, self.grain, col.shape)
        return (np.clip(col, 0, 1) * a[..., None]).astype(np.float32), a.astype(np.float32)

    def fill(self, image: Image.Image, mask: Image.Image, prompt: str, seed: int,
             **settings: Any) -> Image.Image:
        image, mask = validate_fill_inputs(image, mask, where=settings.pop("where", ""))
        img8 = np.asarray(image)
        img = img8.astype(np.float32) / 255.0
        m = np.asarray(mask) >= 128
        out = remove_object(img, m, seed=seed, blur=self.blur, noise=self.noise,
                            smooth=_cached_smooth_fill(img, m, self.blur, img8))
        inst = settings.pop("instance", None)
        if inst is not None:
            if isinstance(inst, Image.Image):
                rgba = np.asarray(inst.convert("RGBA"), dtype=np.float32) / 255.0
                a, prem = rgba[..., 3], rgba[..., :3] * rgba[..., 3:4]
            else:
                a, prem = inst["alpha"], inst["prem"]
            if a.shape != m.shape:
                raise ValueError(f"instance has size {a.shape[::-1]}, image has {m.shape[::-1]}")
            if self.styled:
                prem, a = self._style(np.asarray(prem, np.float32), np.asarray(a, np.float32), seed)
            a = a * m                                    # clip to the exact mask region
            out = out * (1 - a[..., None]) + prem * m[..., None]
        out8 = np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)
        out8[~m] = img8[~m]                              # outside the mask: bit-identical
        return Image.fromarray(out8, "RGB")


# --------------------------------------------------------------------------- world sources
class ResampledBackend(FillBackend):
    """Run ``inner`` at ``resolution`` px (input Lanczos-upsampled, mask nearest) and Lanczos the
    output back to the input size - how a generator working at a higher resolution than the
    dataset (the ``*_1024`` / ``*_hr`` sources) produces same-size distractors."""

    def __init__(self, inner: FillBackend, resolution: int):
        self.inner = inner
        self.resolution = int(resolution)
        self.name = inner.name

    def fill(self, image, mask, prompt, seed, **settings):
        image, mask = validate_fill_inputs(image, mask, where=settings.get("where", ""))
        wh = (self.resolution, round(self.resolution * image.height / image.width))
        big = self.inner.fill(image.resize(wh, Image.LANCZOS), mask.resize(wh, Image.NEAREST),
                              prompt, seed, **settings)
        return big.resize(image.size, Image.LANCZOS)
