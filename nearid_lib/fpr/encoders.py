"""Evaluation encoders of Finer-Personalization Rank and an on-disk embedding cache.

Every encoder comes from the one registry, :func:`nearid_lib.models.load_encoder`: the general
ones (``clip-vit-b32``, ``dinov2-base``, ``efficientnet-lite0`` = the frozen-GAP baseline,
``nearid`` = backbone + our trained MAP head) and the paper's specialised ones (``bioclip2``,
``miewid``, ``classifier``; :mod:`nearid_lib.models.specialised`). :func:`train_feature_classifier`
trains the linear or one-hidden-layer MLP classifier of the ``classifier`` encoder on frozen
backbone features.

Each encoder loads once per process (:func:`get_encoder` memoises) and embeds in batches.
Embeddings are cached as ``.npy`` under ``cache_dir(profile)/retrieval`` with the key
``sha1(encoder fingerprint | image-list hash | variant)``: the fingerprint is the encoder's
``cache_key()`` plus a hash of its trainable/random weights (a checkpoint hash for ``nearid``,
the parameters of a tiny random-init model), the image-list hash covers every file's *bytes*.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from tqdm.auto import tqdm

from ..features.variants import BG_GREY, fill_background
from ..imageio import load_image, load_mask
from ..io_utils import atomic_write
from ..models import load_encoder, resolve_name
from ..models.classifier import FeatureClassifier
from ..models.specialised import BIOCLIP2_HUB_ID, MIEWID_HUB_ID, ClassifierEncoder, RemoteCodeError
from ..seeding import torch_generator

__all__ = ["get_encoder", "encoder_fingerprint", "image_list_hash", "EmbeddingCache", "embed_images",
           "remove_background", "train_feature_classifier", "FeatureClassifier", "ClassifierEncoder", "MIEWID_HUB_ID",
           "BIOCLIP2_HUB_ID", "RemoteCodeError", "clear_encoders"]

BG_FILL = BG_GREY          # the neutral grey of a removed background (features.variants)
_POOL: dict[tuple, Any] = {}


def get_encoder(name: str, tiny: bool = False, device: str = "cpu", **kw: Any):
    """``(model, preprocess)`` via :func:`nearid_lib.models.load_encoder`, loaded once per process
    for the same ``(name, tiny, device, kwargs)``. ``allow_remote_code`` is honoured only by
    ``miewid`` (dropped for every other encoder)."""
    canon = resolve_name(name)
    if canon != "miewid":
        kw.pop("allow_remote_code", None)
    key = (canon, bool(tiny), str(device), tuple(sorted((k, repr(v)) for k, v in kw.items())))
    if key not in _POOL:
        _POOL[key] = load_encoder(canon, tiny=tiny, device=device, **kw)
    return _POOL[key]


def clear_encoders() -> None:
    """Forget the memoised encoders (frees memory between notebook sections)."""
    _POOL.clear()


# ----------------------------------------------------------------------------- fingerprints + cache
def encoder_fingerprint(model) -> str:
    """``cache_key()`` + a hash of the weights that the key does not pin down: a trained head
    (``nearid``), a trained classifier, or every parameter of a tiny random-init model."""
    # A frozen model's weights never change: hash them once (a tiny random-init model has
    # millions of parameters and the notebook embeds many image sets).
    memo = getattr(model, "_fpr_fingerprint", None)
    if memo is not None and getattr(model, "frozen", False):
        return memo
    h = hashlib.sha1(model.cache_key().encode())
    parts = []
    if getattr(model, "tiny", False):
        parts.append(model)
    for attr in ("head", "classifier"):
        if hasattr(model, attr) and isinstance(getattr(model, attr), torch.nn.Module):
            parts.append(getattr(model, attr))
    for mod in parts:
        for k, v in sorted(mod.state_dict().items()):
            h.update(k.encode())
            h.update(v.detach().cpu().contiguous().float().numpy().tobytes())
    fp = h.hexdigest()
    if getattr(model, "frozen", False):
        object.__setattr__(model, "_fpr_fingerprint", fp)
    return fp


def image_list_hash(paths: Sequence[str | os.PathLike], masks: Sequence[str] | None = None) -> str:
    """sha1 over the ordered list of image files' bytes (and masks, when given)."""
    h = hashlib.sha1()
    for i, p in enumerate(paths):
        h.update(Path(p).read_bytes())
        h.update(b"|")
        if masks is not None:
            h.update(Path(masks[i]).read_bytes() if masks[i] else b"-")
    h.update(str(len(paths)).encode())
    return h.hexdigest()


class EmbeddingCache:
    """``.npy`` files in ``folder`` keyed by encoder fingerprint + image list + variant; counts
    ``hits``/``misses`` (tests and logs use them)."""

    def __init__(self, folder: str | os.PathLike | None):
        self.folder = Path(folder) if folder is not None else None
        self.hits = 0
        self.misses = 0

    def key(self, fingerprint: str, images_hash: str, variant: str = "") -> str:
        return hashlib.sha1(f"{fingerprint}|{images_hash}|{variant}".encode()).hexdigest()

    def get_or_compute(self, key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        if self.folder is not None:
            path = self.folder / f"{key}.npy"
            if path.exists():
                self.hits += 1
                return np.load(path)
        self.misses += 1
        arr = np.asarray(compute(), dtype=np.float32)
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write(self.folder / f"{key}.npy", lambda p: np.save(open(p, "wb"), arr))
        return arr


def remove_background(image, mask, fill: tuple[int, int, int] = BG_FILL, where: str = ""):
    """The image with every pixel outside ``mask`` (bool [H,W] or mode-L PIL, 255 = object) set
    to a neutral grey (paper Section 5.2 / Fig. 7): the ``fg_grey`` image variant,
    :func:`nearid_lib.features.variants.fill_background` (a mask of another size is an error naming
    ``where``)."""
    return fill_background(image, mask, fill, where)


def embed_images(model, paths: Sequence[str | os.PathLike], cache: EmbeddingCache | None = None,
                 batch_size: int = 32, masks: Sequence[str] | None = None,
                 background: str = "kept", progress: bool = True) -> np.ndarray:
    """L2-normalised embeddings [N, E] (float32) of image files, through the cache.

    ``background="removed"`` composites each image on neutral grey with its mask (``masks``
    required, one per path; an empty mask path is an error naming the image). Images are read by
    :mod:`nearid_lib.imageio`; ``progress`` shows a bar over the batches on a cache miss."""
    paths = [str(p) for p in paths]
    if background not in ("kept", "removed"):
        raise ValueError(f"embed_images: background must be 'kept' or 'removed', got {background!r}")
    if background == "removed":
        if masks is None or len(masks) != len(paths):
            raise ValueError("embed_images: background='removed' needs one mask per image")
        empty = [paths[i] for i, m in enumerate(masks) if not m]
        if empty:
            raise ValueError(f"embed_images: no mask for {len(empty)} image(s), e.g. {empty[0]}")
    if not paths:
        return np.zeros((0, getattr(model, "embed_dim", 0)), np.float32)

    def compute():
        out = []
        for i in tqdm(range(0, len(paths), batch_size), desc=f"embed ({getattr(model, 'name', 'encoder')})",
                      unit="batch", disable=not progress):
            ims = []
            for j in range(i, min(i + batch_size, len(paths))):
                im = load_image(paths[j])          # the one loader (nearid_lib.imageio)
                if background == "removed":
                    im = remove_background(im, load_mask(masks[j]), where=f"{paths[j]} (mask {masks[j]})")
                ims.append(im)
            out.append(model.embed(ims, batch_size=batch_size).numpy())
        return np.concatenate(out)

    cache = cache or EmbeddingCache(None)
    key = cache.key(encoder_fingerprint(model),
                    image_list_hash(paths, masks if background == "removed" else None), background)
    return cache.get_or_compute(key, compute)


# ----------------------------------------------------------------------------- feature classifier
def train_feature_classifier(features: np.ndarray, labels: Sequence, hidden: int = 256,
                             epochs: int = 100, lr: float = 1e-2, weight_decay: float = 1e-4,
                             seed: int = 0, batch_size: int = 256):
    """Train a :class:`FeatureClassifier` (cross-entropy, AdamW, full-batch or mini-batches) on
    frozen features [N, D] with string/int ``labels``; returns ``(classifier, train_accuracy)``.

    This is how a notebook builds the fine-grained "SP-Cars" encoder when Stanford Cars is present:
    features = a frozen backbone's pooled output on the whole training split, labels = car model;
    then ``load_encoder("classifier", classifier=clf, backbone=...)`` embeds with its hidden layer."""
    x = torch.as_tensor(np.asarray(features, dtype=np.float32))
    classes = sorted({str(v) for v in labels})
    y = torch.as_tensor([classes.index(str(v)) for v in labels])
    if x.ndim != 2 or len(x) != len(y):
        raise ValueError(f"train_feature_classifier: features {tuple(x.shape)} vs {len(y)} labels")
    torch.manual_seed(seed)
    clf = FeatureClassifier(x.shape[1], len(classes), hidden, classes)
    opt = torch.optim.AdamW(clf.parameters(), lr=lr, weight_decay=weight_decay)
    gen = torch_generator(seed, "classifier")
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), batch_size):
            idx = perm[i:i + batch_size]
            loss = torch.nn.functional.cross_entropy(clf(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    clf.eval()
    with torch.no_grad():
        acc = float((clf(x).argmax(1) == y).float().mean())
    return clf, acc
