"""Evaluation encoders of Finer-Personalization Rank and an on-disk embedding cache.

Every encoder comes from the one registry, :func:`nearid_lib.models.load_encoder`: the general
ones (``clip-vit-b32``, ``dinov2-base``, ``efficientnet-lite0`` = the frozen-GAP baseline,
``nearid`` = backbone + our trained MAP head) and the paper's specialised ones (``bioclip2``,
``miewid``, ``classifier``; :mod:`nearid_lib.models.specialised`). :func:`train_feature_classifier`
trains the linear or one-hidden-layer MLP classifier of the ``classifier`` encoder on frozen
backbone features.

Each encoder loads once per process (``load_encoder(..., cache=True)``) and embeds in batches through
the library's one feature path (:func:`nearid_lib.features.embed.embed`): rows live in a
:class:`~nearid_lib.features.FeatureStore` under ``cache_dir(profile)/retrieval``, keyed by the
encoder's fingerprint (its ``cache_key()`` plus a hash of its trainable/random weights: a trained
head, a classifier, a tiny random-init model) and by each image file's *bytes* (and its mask's).
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import torch

from ..features import FeatureStore, encoder_fingerprint
from ..features.embed import embed, file_refs
from ..features.variants import BG_GREY, fill_background
from ..models.classifier import FeatureClassifier
from ..models.specialised import BIOCLIP2_HUB_ID, MIEWID_HUB_ID, ClassifierEncoder, RemoteCodeError
from ..runtime.seeding import torch_generator

__all__ = ["encoder_fingerprint", "FeatureStore", "embed_images",
           "remove_background", "train_feature_classifier", "FeatureClassifier", "ClassifierEncoder", "MIEWID_HUB_ID",
           "BIOCLIP2_HUB_ID", "RemoteCodeError"]

BG_FILL = BG_GREY          # the neutral grey of a removed background (features.variants)


def remove_background(image, mask, fill: tuple[int, int, int] = BG_FILL, where: str = ""):
    """The image with every pixel outside ``mask`` (bool [H,W] or mode-L PIL, 255 = object) set
    to a neutral grey (paper Section 5.2 / Fig. 7): the ``fg_grey`` image variant,
    :func:`nearid_lib.features.variants.fill_background` (a mask of another size is an error naming
    ``where``)."""
    return fill_background(image, mask, fill, where)


def embed_images(model, paths: Sequence[str | os.PathLike], cache: FeatureStore | None = None,
                 batch_size: int = 32, masks: Sequence[str] | None = None,
                 background: str = "kept", progress: bool = True) -> np.ndarray:
    """L2-normalised embeddings [N, E] (float32) of image files, through the one feature path
    (:func:`nearid_lib.features.embed.embed`): rows keyed by each file's bytes in ``cache`` (a
    :class:`~nearid_lib.features.FeatureStore`), so an image scored by one experiment is read,
    not recomputed, by the next.

    ``background="removed"`` composites each image on neutral grey with its mask (the ``fg_grey``
    variant; ``masks`` required, one per path; an empty mask path is an error naming the image).
    Images are read by :mod:`nearid_lib.imageio`; ``progress`` shows a bar over the batches."""
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
    refs = file_refs(paths, masks if background == "removed" else None)
    return embed(model, refs, "fg_grey" if background == "removed" else "full", cache, batch_size=batch_size,
                 progress=progress, desc=f"embed ({getattr(model, 'name', 'encoder')})").astype(np.float32)


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
