"""The image preprocessing of FPR's evaluation encoders as the FPR authors' released code applies it
(``evaluation/Evaluate.py`` of OSU-MLB/Finer-Personalization-Rank at b4552a6), for the encoders whose
library transform is not a plain :class:`~nearid_lib.models.encoder_base.Preprocess`.

==========  ==================================================================  =========================
encoder     the authors' transform (every image opened with PIL, ``convert("RGB")``)   here
==========  ==================================================================  =========================
MiewID      albumentations ``Compose([Resize(440, 440), Normalize(),            :class:`ResizeNormalize`
            ToTensorV2()])`` on the RGB ``uint8`` array
BioCLIP 2   open_clip's evaluation transform of ``hf-hub:imageomics/bioclip-2``  :class:`ShortestEdgeCrop`
            (``Resize(224)`` bicubic on the shorter side, ``CenterCrop(224)``,    ``crop="round"``
            ``ToTensor``, ``Normalize(mean, std)`` of its ``preprocess_cfg``)
DINO        ``AutoImageProcessor("facebook/dinov2-base")``: shorter side 256      ``Preprocess`` (shorter_crop,
            bicubic, centre crop 224, /255, ImageNet mean / std                    crop_pct 224/256)
CLIP-I      ``CLIPProcessor("openai/clip-vit-base-patch32")``: shorter side 224   ``Preprocess`` (shorter_crop)
            bicubic, centre crop 224, /255, CLIP mean / std
==========  ==================================================================  =========================

(``transformers`` 4.57, the authors' version, still loads the *slow* PIL processors for checkpoints
saved with them, as both of these are: the geometry of ``Preprocess(..., "shorter_crop")``.)

albumentations' numbers (its documented defaults, albumentations 2.0.8 in the authors' lock):
``Resize`` interpolates with OpenCV's ``INTER_LINEAR`` (uint8 in, uint8 out); ``Normalize`` computes
``(x - mean * max_pixel_value) / (std * max_pixel_value)`` with ``mean = (0.485, 0.456, 0.406)``,
``std = (0.229, 0.224, 0.225)``, ``max_pixel_value = 255``; ``ToTensorV2`` only moves channels
first (HWC -> CHW, RGB order kept, no scaling). :class:`ResizeNormalize` computes ``INTER_LINEAR``'s
definition (half-pixel centres, edge pixels repeated, no antialiasing, rounded to uint8) in float64;
OpenCV's fixed-point kernels (11-bit weights, SIMD rounding) differ from it by at most one grey level
on some pixels (tested against ``cv2.resize`` where OpenCV is installed: it is, with carvekit).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from ..imageio import load_image
from .encoder_base import RESAMPLE, IMAGENET_MEAN, IMAGENET_STD, Preprocess

__all__ = ["ResizeNormalize", "ShortestEdgeCrop", "ALBU_MEAN", "ALBU_STD", "ALBU_MAX_PIXEL", "MIEWID_SIZE",
           "inter_linear_resize"]

ALBU_MEAN = IMAGENET_MEAN            # albumentations.Normalize's default mean
ALBU_STD = IMAGENET_STD              # ... its default std
ALBU_MAX_PIXEL = 255.0               # ... its default max_pixel_value
MIEWID_SIZE = 440                    # the authors' image_size=(440, 440) (Evaluate.evaluate's default)


def _linear_weights(n_in: int, n_out: int) -> np.ndarray:
    """[n_out, n_in] interpolation matrix of ``INTER_LINEAR`` along one axis: output pixel ``d``
    samples source coordinate ``(d + 0.5) * n_in / n_out - 0.5``, clamped to ``[0, n_in - 1]`` (the
    edge pixel repeats), linearly between its two neighbours."""
    src = np.clip((np.arange(n_out, dtype=np.float64) + 0.5) * (n_in / n_out) - 0.5, 0.0, n_in - 1)
    lo = np.floor(src).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = src - lo
    w = np.zeros((n_out, n_in))
    np.add.at(w, (np.arange(n_out), lo), 1.0 - frac)
    np.add.at(w, (np.arange(n_out), hi), frac)
    return w


def inter_linear_resize(arr: np.ndarray, width: int, height: int) -> np.ndarray:
    """``cv2.resize(arr, (width, height), interpolation=cv2.INTER_LINEAR)``'s definition for a uint8
    [H, W, C] array: separable bilinear interpolation (:func:`_linear_weights`), rounded half up to
    uint8."""
    if arr.dtype != np.uint8 or arr.ndim != 3:
        raise ValueError(f"inter_linear_resize: expected a uint8 [H, W, C] array, got {arr.dtype} {arr.shape}")
    wy = _linear_weights(arr.shape[0], height)                      # [height, H]
    wx = _linear_weights(arr.shape[1], width)                       # [width, W]
    h, w, c = arr.shape
    rows = (wy @ arr.astype(np.float64).reshape(h, w * c)).reshape(height, w, c)      # [height, W, C]
    out = np.einsum("ywc,xw->yxc", rows, wx, optimize=True)                         # [height, width, C]
    return np.clip(np.floor(out + 0.5), 0, 255).astype(np.uint8)


@dataclass(frozen=True)
class ResizeNormalize(Preprocess):
    """albumentations ``Resize(image_size, image_size)`` + ``Normalize()`` + ``ToTensorV2()`` (the FPR
    authors' MiewID input, 440 x 440): the RGB image squashed to a square with ``INTER_LINEAR``
    (:func:`inter_linear_resize`), then ``(x - mean * 255) / (std * 255)`` in float32, channels
    first. ``mean`` / ``std`` default to albumentations' (ImageNet's)."""

    resize: str = "squash"
    resample: str = "bilinear"

    def __post_init__(self):
        super().__post_init__()
        if self.resize != "squash" or self.resample != "bilinear":
            raise ValueError("ResizeNormalize: albumentations' Resize squashes to the target size with "
                             "INTER_LINEAR (resize='squash', resample='bilinear')")

    def key(self) -> str:
        return "albu-resize-normalize|" + super().key() + f"|max={ALBU_MAX_PIXEL:g}"

    def resize_image(self, image) -> Image.Image:
        arr = np.asarray(load_image(image).convert("RGB"))
        s = self.image_size
        if arr.shape[:2] == (s, s):
            return Image.fromarray(arr)
        return Image.fromarray(inter_linear_resize(arr, s, s))

    def __call__(self, image) -> torch.Tensor:
        arr = np.asarray(self.resize_image(image), dtype=np.float32)            # [H, W, 3], 0..255
        mean = np.asarray(self.mean, np.float32) * np.float32(ALBU_MAX_PIXEL)
        std = np.asarray(self.std, np.float32) * np.float32(ALBU_MAX_PIXEL)
        return torch.from_numpy(((arr - mean) / std).astype(np.float32)).permute(2, 0, 1).contiguous()


@dataclass(frozen=True)
class ShortestEdgeCrop(Preprocess):
    """torchvision's ``Resize(image_size)`` (the shorter side to ``image_size``, the longer one
    truncated to ``int(image_size * long / short)``, PIL ``resample``) and ``CenterCrop(image_size)``
    (``crop="round"``: offsets ``int(round((size - crop) / 2))``, Python's round, as torchvision;
    ``crop="floor"``: ``(size - crop) // 2``, as ``transformers``), then ``/255`` and ``mean`` /
    ``std``: open_clip's evaluation transform (``resize_mode="shortest"``)."""

    resize: str = "shorter_crop"
    crop: str = "round"

    def __post_init__(self):
        super().__post_init__()
        if self.resize != "shorter_crop" or self.crop_pct != 1.0:
            raise ValueError("ShortestEdgeCrop: resize='shorter_crop' with crop_pct=1.0 (open_clip's 'shortest' mode)")
        if self.crop not in ("round", "floor"):
            raise ValueError(f"ShortestEdgeCrop: crop must be 'round' or 'floor', got {self.crop!r}")

    def key(self) -> str:
        return super().key() + f"|crop={self.crop}"

    def resize_image(self, image) -> Image.Image:
        image = load_image(image)
        s = self.image_size
        w, h = image.size
        nw, nh = (s, int(s * h / w)) if w <= h else (int(s * w / h), s)
        if (nw, nh) != (w, h):
            image = image.resize((nw, nh), RESAMPLE[self.resample])
        if self.crop == "round":
            left, top = int(round((nw - s) / 2.0)), int(round((nh - s) / 2.0))
        else:
            left, top = (nw - s) // 2, (nh - s) // 2
        return image.crop((left, top, left + s, top + s))
