"""The one path from images to stored features: :func:`embed` (three papers and ``score_encoder``).

An image is an :class:`ImageRef`: the key of its row in the store (a dataset relpath, a content
hash, ``key@draw``), how to load it and its mask, and the words that name it in an error.
:func:`variant_images` turns refs into the encoder's input images (the image variant applied with
its one definition, :mod:`.variants`); :func:`embed` computes the rows a
:class:`~.store.FeatureStore` lacks, in the order given and in batches of ``batch_size``, and
returns the rows of every ref::

    store = FeatureStore(cache_dir("mini") / "retrieval")              # or FeatureStore() in memory
    refs = file_refs(paths, masks)                                      # image files (content-keyed)
    e = embed(model, refs, variant="fg_grey", store=store)              # [n, E] float32, L2-normalised

Payloads (what a row holds): ``"embedding"`` = ``encoder.embed(images)`` (any library encoder,
a user's callable wrapped as :class:`~nearid_lib.user_encoders.UserEncoder`, a NearID model);
``"prefix"`` = the frozen prefix features of an adapted model (ID-Sim, float16). NearID's token
grids use the same :func:`variant_images` into their array caches (:mod:`.cache`, :mod:`.shards`).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from PIL import Image

from ..imageio import load_image, load_mask
from .store import FeatureStore, FeatureTable, encoder_fingerprint
from .variants import apply_variant, check_variant, needs_mask

__all__ = ["ImageRef", "Payload", "PAYLOADS", "embed", "feature_table", "variant_images", "file_refs", "dataset_refs",
           "dataset_scope"]


@dataclass(frozen=True)
class ImageRef:
    """One image for :func:`embed`: ``key`` (its row in the store), ``load() -> PIL``, ``mask()``
    (None when it has none) and ``where`` (names it in errors; default the key)."""

    key: str
    load: Callable[[], Image.Image]
    mask: Callable[[], np.ndarray] | None = None
    where: str = ""


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
    """What a row holds: ``compute(encoder, images, batch_size) -> array [n, ...]`` and
    ``identity(encoder) -> str``, the encoder part of the table key."""

    compute: Callable[[Any, list[Image.Image], int], np.ndarray]
    identity: Callable[[Any], str]


def _embedding(encoder, images: list[Image.Image], batch_size: int) -> np.ndarray:
    return encoder.embed(images, batch_size=batch_size).detach().float().cpu().numpy()


@torch.no_grad()
def _prefix(model, images: list[Image.Image], batch_size: int) -> np.ndarray:
    x = torch.stack([model.preprocess(im) for im in images])
    return model.prefix(x).to("cpu", torch.float16).numpy()


PAYLOADS: dict[str, Payload] = {
    "embedding": Payload(_embedding, encoder_fingerprint),
    "prefix": Payload(_prefix, lambda model: model.cache_key()),   # the frozen prefix only
}


def feature_table(encoder, store: FeatureStore, variant: str = "full", payload: str = "embedding",
                  scope: str = "") -> FeatureTable:
    """The table of ``store`` that :func:`embed` reads and fills for these arguments (the one
    place its key, and the folder name shown to people, is derived)."""
    if payload not in PAYLOADS:
        raise KeyError(f"unknown payload {payload!r}; valid: {', '.join(PAYLOADS)}")
    check_variant(variant)
    name = str(getattr(encoder, "name", type(encoder).__name__))
    return store.table(name, PAYLOADS[payload].identity(encoder), variant, payload, scope)


def embed(encoder, refs: Sequence[ImageRef], variant: str = "full", store: FeatureStore | None = None,
          payload: str = "embedding", scope: str = "", batch_size: int = 32, progress: bool = True,
          desc: str | None = None) -> np.ndarray:
    """The rows ``[len(refs), ...]`` of ``refs`` for ``encoder`` under ``variant``: read from
    ``store`` (default: a fresh in-memory one) or computed, in the order given and in batches of
    ``batch_size``, and kept there (chunks on disk as they fill, the rest at the end).

    ``payload``: ``"embedding"`` (float32, L2-normalised) or ``"prefix"`` (:data:`PAYLOADS`).
    ``scope``: what the ref keys mean when they are not content hashes (a dataset fingerprint);
    part of the table key, with the encoder's identity, ``variant`` and ``payload``."""
    store = store if store is not None else FeatureStore()
    table, pl = feature_table(encoder, store, variant, payload, scope), PAYLOADS[payload]
    name = table.key["name"]
    todo = {}
    for r in refs:
        if r.key not in table:
            todo.setdefault(r.key, r)
    todo_refs = list(todo.values())
    if todo_refs:
        store.misses += 1
        starts = range(0, len(todo_refs), batch_size)
        if progress and len(starts) > 1:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc=desc or f"embed {name} [{variant}]", unit="batch")
        try:
            for i in starts:
                part = todo_refs[i:i + batch_size]
                values = pl.compute(encoder, variant_images(part, variant), batch_size)
                table.add([r.key for r in part], values)
                store.n_computed += len(part)
        finally:
            table.flush()                     # what was computed is kept, even on an error
    else:
        store.hits += 1
    if not refs:
        dim = getattr(encoder, "embed_dim", 0) if payload == "embedding" else 0
        return np.zeros((0, dim), np.float32)
    return table.get([r.key for r in refs])


def _content_key(path: str, mask: str | None) -> str:
    """sha1 of the image file's bytes (and its mask's, when it has one): a file with new bytes
    under the same name is another row."""
    h = hashlib.sha1(Path(path).read_bytes())
    if mask:
        h.update(b"|mask|" + Path(mask).read_bytes())
    return h.hexdigest()


def file_refs(paths: Sequence[str | Path], masks: Sequence[str | None] | None = None) -> list[ImageRef]:
    """Refs of image files, keyed by content (:mod:`nearid_lib.imageio` reads them); ``masks``:
    one mask file per image (an empty entry: none), read only by masked variants."""
    if masks is not None and len(masks) != len(paths):
        raise ValueError(f"file_refs: {len(paths)} images, {len(masks)} masks")
    out = []
    for i, p in enumerate(paths):
        p, m = str(p), (str(masks[i]) if masks is not None and masks[i] else None)
        where = f"{p} (mask {m})" if m else p
        out.append(ImageRef(_content_key(p, m), lambda p=p: load_image(p),
                            (lambda m=m: load_mask(m)) if m else None, where))
    return out


def dataset_scope(data) -> str:
    """The scope of rows keyed by a dataset's relpaths: a fingerprint of its root and manifest, so a
    rebuilt world (or another one) never reads stale rows."""
    man = json.dumps(getattr(data, "manifest", {}) or {}, sort_keys=True, default=str)
    root = getattr(data, "root", None)
    ident = f"{Path(root).resolve() if root is not None else ''}|{man}"
    return "dataset=" + hashlib.sha1(ident.encode()).hexdigest()[:16]


def dataset_refs(data, relpaths: Sequence[str], masks: Sequence[str]) -> list[ImageRef]:
    """Refs of a dataset's images (``data.image`` / ``data.mask``, a NearIDData), keyed by relpath
    (give :func:`dataset_scope` of the dataset as :func:`embed`'s ``scope``)."""
    return [ImageRef(r, lambda r=r: data.image(r), (lambda m=m: data.mask(m)) if m else None, r)
            for r, m in zip(relpaths, masks)]
