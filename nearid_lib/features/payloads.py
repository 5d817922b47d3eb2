"""What a feature row is made of: the image refs, the encoder's identity and the payloads.

* :class:`ImageRef`: one image (its row key, how to load it and its mask, the words naming it);
  :func:`variant_images` gives the encoder's input images of refs under an image variant;
* :func:`encoder_fingerprint` / :func:`backbone_of`: the encoder part of a table key;
* :data:`PAYLOADS`: what a row holds (``embedding``, ``prefix``, ``tokens``, ``pooled``) and how
  it is computed, named and shaped.

:mod:`.store` keeps rows, :mod:`.embed` reads and fills them; both read these definitions.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from PIL import Image

from .variants import apply_variant, check_variant, needs_mask

__all__ = ["ImageRef", "Payload", "PAYLOADS", "variant_images", "encoder_fingerprint", "backbone_of"]


def encoder_fingerprint(model) -> str:
    """``cache_key()`` plus a hash of the weights that the key does not pin down: a trained head
    (``nearid``), a trained classifier, the tensors a model names as its trained ones
    (``fingerprint_tensors()``: ID-Sim's LoRA and projection heads, whose ``cache_key`` is its frozen
    prefix's), or every parameter of a tiny random-init model. A frozen model's fingerprint is
    computed once and remembered on it."""
    memo = getattr(model, "_store_fingerprint", None)
    if memo is not None and getattr(model, "frozen", False):
        return memo
    h = hashlib.sha1(model.cache_key().encode())
    parts = [model] if getattr(model, "tiny", False) else []
    for attr in ("head", "classifier"):
        if isinstance(getattr(model, attr, None), torch.nn.Module):
            parts.append(getattr(model, attr))
    named = [sorted(mod.state_dict().items()) for mod in parts]
    if not getattr(model, "tiny", False) and callable(getattr(model, "fingerprint_tensors", None)):
        named.append(sorted(model.fingerprint_tensors()))
    for items in named:
        for k, v in items:
            h.update(k.encode())
            h.update(v.detach().cpu().contiguous().float().numpy().tobytes())
    fp = h.hexdigest()
    if getattr(model, "frozen", False):
        object.__setattr__(model, "_store_fingerprint", fp)
    return fp


def backbone_of(encoder):
    """What grids are cached for: a NearID encoder's backbone (the head is what trains over its
    tokens); any other encoder is its own backbone, one that holds a backbone inside it too (ID-Sim's
    LoRA and projection heads, a feature classifier): its embedding is its own forward's, never its
    inner backbone's pooled output."""
    if isinstance(getattr(encoder, "head", None), torch.nn.Module) and hasattr(encoder, "backbone"):
        return encoder.backbone
    return encoder


@dataclass(frozen=True)
class ImageRef:
    """One image for :func:`embed`: ``key`` (its row in the store), ``load() -> PIL``, ``mask()``
    (None when it has none), ``where`` (names it in errors; default the key) and ``mask_key`` (the
    mask's relpath, for layouts that key a whole image list by its masks: :mod:`.layouts`)."""

    key: str
    load: Callable[[], Image.Image]
    mask: Callable[[], np.ndarray] | None = None
    where: str = ""
    mask_key: str = ""


def variant_images(refs: Sequence[ImageRef], variant: str) -> list[Image.Image]:
    """The encoder's input images of ``refs`` under ``variant``; a masked variant needs each
    ref's mask, and an error names the ref (``where``) that caused it."""
    check_variant(variant)
    out = []
    for r in refs:
        name = r.where or r.key
        img = r.load()
        if not needs_mask(variant):
            out.append(apply_variant(img, None, variant))
            continue
        if r.mask is None:
            raise ValueError(f"{name}: variant {variant!r} needs a mask and this image has none")
        out.append(apply_variant(img, r.mask(), variant, where=name))
    return out


@dataclass(frozen=True)
class Payload:
    """What a row holds: ``compute(encoder, images, batch_size) -> array [n, ...]``,
    ``identity(encoder) -> str`` (the encoder part of the table key) and ``shape(encoder)``, the
    shape of one row (what :func:`embed` of no refs returns ``[0, *shape]`` of)."""

    compute: Callable[[Any, list[Image.Image], int], np.ndarray]
    identity: Callable[[Any], str]
    shape: Callable[[Any], tuple[int, ...]] = lambda enc: (int(getattr(enc, "embed_dim", 0)),)


def _embedding(encoder, images: list[Image.Image], batch_size: int) -> np.ndarray:
    return encoder.embed(images, batch_size=batch_size).detach().float().cpu().numpy()


@torch.no_grad()
def _prefix(model, images: list[Image.Image], batch_size: int) -> np.ndarray:
    x = torch.stack([model.preprocess(im) for im in images])
    return model.prefix(x).to("cpu", torch.float16).numpy()


@torch.no_grad()
def _backbone_out(encoder, images: list[Image.Image], what: str) -> np.ndarray:
    bb = backbone_of(encoder)
    out = getattr(bb(bb.preprocess.batch(images)), what)
    if out is None:
        raise ValueError(f"{bb.name} has no {what}")
    return out.float().cpu().numpy()


def _grid_shape(encoder) -> tuple[int, ...]:
    bb = backbone_of(encoder)
    return (int(bb.n_tokens), int(bb.token_dim))


PAYLOADS: dict[str, Payload] = {
    "embedding": Payload(_embedding, encoder_fingerprint),
    "prefix": Payload(_prefix, lambda model: model.cache_key(), lambda model: ()),   # the frozen prefix only
    # a backbone's token grid and its own pooled output (not normalised): NearID's heads train on
    # the grids; a store usually keeps them in a layout of :mod:`.layouts`
    "tokens": Payload(lambda enc, ims, bs: _backbone_out(enc, ims, "tokens"),
                      lambda enc: encoder_fingerprint(backbone_of(enc)), _grid_shape),
    "pooled": Payload(lambda enc, ims, bs: _backbone_out(enc, ims, "pooled"),
                      lambda enc: encoder_fingerprint(backbone_of(enc)),
                      lambda enc: (int(backbone_of(enc).embed_dim),)),
}
