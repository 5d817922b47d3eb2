"""A researcher's own encoder behind the library's encoder interface: :class:`UserEncoder`.

:func:`nearid_lib.models.load_encoder` wraps as a :class:`UserEncoder`

* any callable ``list[PIL.Image] -> array [N, D]`` (numpy or torch; a model's bound method, a
  function, an ``nn.Module`` taking PIL images), also named as ``"package.module:attribute"`` or
  ``"path/to/file.py:attribute"`` (:mod:`.callables`);
* a Hugging Face / open_clip / timm identifier (:func:`hub_encoder`; the ``paper`` profile, where
  the hub is reachable): ``"timm:<model>"`` (``timm.create_model(..., pretrained=True,
  num_classes=0)``), ``"open_clip:<arch>[:<pretrained tag>]"`` or ``"hf-hub:<repo>"`` (open_clip's
  image tower), or ``"<org>/<repo>"`` / a local model folder (transformers ``AutoModel`` +
  ``AutoImageProcessor``; image features, else the pooled output, else the first token).

A :class:`UserEncoder` has ``embed(images, batch_size) -> Tensor [N, D]`` (L2-normalised, images
through :mod:`nearid_lib.imageio`), ``name``, ``cache_key()`` and ``fingerprint``. A callable has
no weights to hash, so its fingerprint is *behavioural*: its name and its outputs (rounded to
1e-4) on two fixed probe images; editing the model changes them, so cached embeddings are never
served for another model (a non-deterministic callable just never hits the cache).
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from tqdm.auto import tqdm

from ..imageio import as_sequence, load_images
from .callables import EncoderSpecError, one_line

__all__ = ["UserEncoder", "probe_images", "hub_encoder", "EncoderOutputError", "callable_label"]


class EncoderOutputError(ValueError):
    """A user encoder returned something that is not one finite, non-zero [N, D] row per image."""


def probe_images(size: int = 64) -> list[Image.Image]:
    """Two fixed RGB images (a colour ramp and a checkerboard) that fingerprint a callable."""
    y, x = np.mgrid[0:size, 0:size] / (size - 1)
    ramp = np.stack([x, y, 1 - x * y], -1)
    check = (((np.mgrid[0:size, 0:size] // 8).sum(0) % 2)[..., None] * np.array([0.9, 0.3, 0.1]) + 0.05)
    return [Image.fromarray((a * 255).round().astype(np.uint8), "RGB") for a in (ramp, check)]


class UserEncoder:
    """Wraps ``fn: list[PIL] -> [N, D]``: batches, checks and L2-normalises its output.

    Looks like a library :class:`~nearid_lib.models.Encoder` to the scoring code (``embed``,
    ``cache_key``, ``name``, ``frozen``, ``embed_dim``), so FPR's embedding cache and NearID's
    bench encoders take it as they are."""

    frozen = True
    tiny = False

    def __init__(self, fn: Callable[[list[Image.Image]], Any], name: str):
        self.fn, self.name = fn, name
        try:
            probe = self._call(probe_images(), "the probe images")
        except EncoderOutputError:
            raise
        except Exception as err:     # the user's code raised: say so in one line (the cause is chained)
            raise EncoderSpecError(f"encoder {name!r} failed on the two probe images (64x64 RGB PIL): "
                                   f"{type(err).__name__}: {one_line(err)}") from err
        self.embed_dim = int(probe.shape[1])
        h = hashlib.sha1(name.encode())
        h.update(np.round(probe.astype(np.float64), 4).tobytes())
        self.fingerprint = h.hexdigest()[:16]

    def _call(self, images: list[Image.Image], what: str) -> np.ndarray:
        out = self.fn(images)
        if isinstance(out, torch.Tensor):
            out = out.detach().float().cpu().numpy()
        out = np.asarray(out, dtype=np.float32)
        n = len(images)
        if out.ndim != 2 or out.shape[0] != n:
            raise EncoderOutputError(f"encoder {self.name!r} returned shape {tuple(out.shape)} for {what} "
                                     f"({n} images); expected one row per image, [{n}, D]")
        if not np.isfinite(out).all():
            raise EncoderOutputError(f"encoder {self.name!r} returned non-finite values (NaN/inf) for {what}")
        if (np.linalg.norm(out, axis=1) == 0).any():
            raise EncoderOutputError(f"encoder {self.name!r} returned an all-zero embedding for {what}; "
                                     f"cosine similarity is undefined for it")
        return out

    def cache_key(self) -> str:
        """Key of the embeddings it produces (FPR's embedding cache reads it)."""
        return f"user:{self.name}|fp={self.fingerprint}"

    @torch.no_grad()
    def embed(self, images: Sequence[Any], batch_size: int = 32, progress: bool = False) -> torch.Tensor:
        """L2-normalised embeddings [N, D] of images (paths, PIL, arrays, tensors), in batches."""
        images = as_sequence(images)                   # decoded batch by batch
        starts = range(0, len(images), batch_size)
        if progress:

            starts = tqdm(starts, desc=f"embed ({self.name})", unit="batch")
        rows = [self._call(load_images(images[i:i + batch_size], start=i),
                           f"images {i}..{min(i + batch_size, len(images)) - 1}") for i in starts]
        if not rows:
            return torch.zeros(0, self.embed_dim)
        return F.normalize(torch.from_numpy(np.concatenate(rows)), dim=-1)


def _offline_hint(ident: str, err: Exception) -> OSError:
    return OSError(f"encoder {ident!r}: cannot load its weights ({type(err).__name__}: {str(err)[:200]}). "
                   f"They come from the Hugging Face hub (paper profile): run once with hub access "
                   f"(HF_HUB_OFFLINE unset) to fill the cache, or pass a local model folder, or a "
                   f"callable list[PIL] -> [N, D] that wraps your loaded model.")


def _stack(images, transform) -> torch.Tensor:
    return torch.stack([transform(im) for im in images])


def hub_encoder(ident: str, device: str = "cpu", **kw: Any) -> Callable[[list[Image.Image]], torch.Tensor]:
    """A callable for a timm / open_clip / transformers identifier (see the module docstring).
    ``kw`` go to the model constructor (e.g. ``pretrained=False`` for a random-init timm model)."""
    try:
        if ident.startswith("timm:"):
            import timm

            model = timm.create_model(ident[5:], pretrained=kw.pop("pretrained", True), num_classes=0, **kw)
            model.eval().to(device)
            cfg = timm.data.resolve_model_data_config(model)
            tf = timm.data.create_transform(**cfg, is_training=False)
            return lambda ims: model(_stack(ims, tf).to(device))
        if ident.startswith(("open_clip:", "hf-hub:")):
            import open_clip

            name = ident if ident.startswith("hf-hub:") else ident[len("open_clip:"):]
            arch, _, tag = name.partition(":") if not name.startswith("hf-hub:") else (name, "", "")
            model, _, pre = open_clip.create_model_and_transforms(arch, pretrained=tag or None, **kw)
            model.eval().to(device)
            return lambda ims: model.encode_image(_stack(ims, pre).to(device))
        from transformers import AutoImageProcessor, AutoModel

        proc = AutoImageProcessor.from_pretrained(ident)
        model = AutoModel.from_pretrained(ident, **kw).eval().to(device)
    except (OSError, RuntimeError, ValueError) as err:
        if isinstance(err, OSError) or "hub" in str(err).lower() or "offline" in str(err).lower():
            raise _offline_hint(ident, err) from err
        raise

    def transformers_embed(ims):
        pix = proc(images=list(ims), return_tensors="pt")["pixel_values"].to(device)
        if hasattr(model, "get_image_features"):
            out = model.get_image_features(pixel_values=pix)
            return getattr(out, "pooler_output", out)
        out = model(pixel_values=pix)
        pooled = getattr(out, "pooler_output", None)
        return pooled if pooled is not None else out.last_hidden_state[:, 0]

    return transformers_embed


def callable_label(fn: Any) -> str:
    """How a callable is named in tables when no name is given (its qualified name)."""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return "callable" if "<lambda>" in name else name
