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
a user's callable wrapped as :class:`~nearid_lib.models.UserEncoder`, a NearID model);
``"prefix"`` = the frozen prefix features of an adapted model (ID-Sim, float16); ``"tokens"`` /
``"pooled"`` = a backbone's token grid / own pooled output (NearID), which a store usually keeps in
a layout of :mod:`.layouts` (group caches, the int8 shard store) rather than in rows.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..runtime.code_closure import closure_fingerprint
from ..imageio import load_image, load_mask
from .payloads import PAYLOADS, ImageRef
from .store import FeatureStore, FeatureTable
from .variants import apply_variant, check_variant

__all__ = ["embed", "feature_table", "file_refs", "dataset_refs", "dataset_scope", "memory_refs"]


def feature_table(encoder, store: FeatureStore, variant: str = "full", payload: str = "embedding",
                  scope: str = "") -> FeatureTable:
    """The table of ``store`` that :func:`embed` reads and fills for these arguments (the one
    place its key, and the folder name shown to people, is derived)."""
    if payload not in PAYLOADS:
        raise KeyError(f"unknown payload {payload!r}; valid: {', '.join(PAYLOADS)}")
    if payload in store.layouts:                  # token grids: a layout's table (.layouts)
        return store.layouts[payload].table(encoder, variant, payload)
    check_variant(variant)
    name = str(getattr(encoder, "name", type(encoder).__name__))
    # the encoder's identity (its own code included) and the code of this feature path
    ident = f"{PAYLOADS[payload].identity(encoder)}|feature_code={closure_fingerprint(embed, apply_variant)}"
    return store.table(name, ident, variant, payload, scope)


def embed(encoder, refs: Sequence[ImageRef], variant: str = "full", store: FeatureStore | None = None,
          payload: str = "embedding", scope: str = "", batch_size: int = 32, progress: bool = True,
          desc: str | None = None, tensor: bool = False, device=None):
    """The rows ``[len(refs), ...]`` of ``refs`` for ``encoder`` under ``variant``: read from
    ``store`` (default: a fresh in-memory one) or computed, and kept there (a row table computes
    the missing refs in the order given and in batches of ``batch_size``, writing chunks as they
    fill; a layout of :mod:`.layouts` fills its own way).

    ``payload``: ``"embedding"`` (float32, L2-normalised), ``"prefix"``, ``"tokens"`` or
    ``"pooled"`` (a backbone's grid / pooled output; :data:`PAYLOADS`). ``scope``: what the ref
    keys mean when they are not content hashes (a dataset fingerprint); part of a row table's key,
    with the encoder's identity, ``variant`` and ``payload``. ``tensor``: a torch tensor (on
    ``device``) instead of a numpy array."""
    store = store if store is not None else FeatureStore()
    table = feature_table(encoder, store, variant, payload, scope)
    todo: dict[str, ImageRef] = {}
    for r in refs:
        if r.key not in table:
            todo.setdefault(r.key, r)
    if todo:
        store.misses += 1
        store.n_computed += table.fill(encoder, list(todo.values()), batch_size, progress,
                                       desc or f"embed {table.key['name']} [{variant}]")
    else:
        store.hits += 1
    if not refs:
        out = np.zeros((0,) + tuple(PAYLOADS[payload].shape(encoder)), np.float32)
        return torch.from_numpy(out) if tensor else out
    return table.get([r.key for r in refs], tensor=tensor, device=device)


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


def memory_refs(images: Sequence, keys: Sequence[str]) -> list[ImageRef]:
    """Refs of images already in memory or given as paths (PIL, arrays, tensors: anything
    :func:`nearid_lib.imageio.load_image` reads), keyed by ``keys`` (unique within one call: e.g.
    an edit key, a position); for an in-memory :class:`~.store.FeatureStore` or a ``scope`` that
    says what the keys mean."""
    if len(images) != len(keys):
        raise ValueError(f"memory_refs: {len(images)} images, {len(keys)} keys")
    return [ImageRef(str(k), lambda x=x: load_image(x)) for x, k in zip(images, keys)]


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
    return [ImageRef(r, lambda r=r: data.image(r), (lambda m=m: data.mask(m)) if m else None, r, m or "")
            for r, m in zip(relpaths, masks)]
