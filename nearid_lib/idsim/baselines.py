"""Reference rows for the ID-Sim benchmark comparison (Fig. 25 / Tables 2a-2c context), none of
them in the paper: a colour-histogram embedding that knows nothing about identity beyond colour
(the floor any learned similarity should clear), and the backbone's class at random init (the
chance level of a network that was never trained: what the analogue rewards in raw pixels).

The embedding is the square root of the joint RGB histogram (``bins`` per channel, normalised to
sum 1), so the cosine of two embeddings is the Bhattacharyya coefficient of their colour
distributions (1 for identical histograms, 0 for disjoint colours)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np
from PIL import Image

from ..features import FeatureStore, embed, memory_refs
from ..models import load_backbone
from .sampling import load_key

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["colour_histogram", "histogram_embeddings", "random_init_embeddings", "baseline_embeddings"]


def colour_histogram(img: Image.Image, bins: int = 8, size: int = 64) -> np.ndarray:
    """sqrt of the normalised joint RGB histogram of ``img`` resized to ``size`` x ``size``
    (``bins``**3 values, unit L2 norm)."""
    if bins < 1:
        raise ValueError(f"colour_histogram: bins must be >= 1, got {bins}")
    a = np.asarray(img.convert("RGB").resize((size, size), Image.BILINEAR), dtype=np.int64)
    q = np.minimum(a * bins // 256, bins - 1)                                  # [H, W, 3] bin index
    idx = (q[..., 0] * bins + q[..., 1]) * bins + q[..., 2]
    h = np.bincount(idx.ravel(), minlength=bins ** 3).astype(np.float64)
    return np.sqrt(h / h.sum())


def histogram_embeddings(data: NearIDData, keys: Sequence[str], bins: int = 8, seed: int = 0
                         ) -> dict[str, np.ndarray]:
    """``{key: colour_histogram}`` of benchmark keys (relative paths or ``ctx:`` context edits,
    :func:`~nearid_lib.idsim.sampling.load_key` with ``seed``)."""
    return {k: colour_histogram(load_key(data, k, seed), bins) for k in dict.fromkeys(keys)}


def random_init_embeddings(cfg: Profile, data: NearIDData, keys: Sequence[str], seed: int = 0,
                           batch_size: int = 32) -> dict[str, np.ndarray]:
    """``{key: L2-normalised pooled embedding}`` of benchmark keys by ``cfg.idsim.backbone`` at random
    init (the registry's fixed init seed, so the same network in every run), loaded the way the
    profile loads its frozen backbone. Needs a backbone that can be built without weights (CNNs,
    or the profile's tiny configs)."""
    keys = list(dict.fromkeys(keys))
    return _random_init_vectors(cfg, keys, [load_key(data, k, seed) for k in keys], batch_size)


def baseline_embeddings(cfg: Profile, data: NearIDData, keys: Sequence[str], seed: int = 0, bins: int = 8,
                        batch_size: int = 32) -> dict[str, dict[str, np.ndarray]]:
    """Both reference rows over one load of the images of ``keys`` (context edits are rendered once):
    ``{"colour_hist": {key: vector}, "random": {key: vector}}``, the vectors of
    :func:`histogram_embeddings` and :func:`random_init_embeddings` (each of which loads every image
    itself)."""
    keys = list(dict.fromkeys(keys))
    images = [load_key(data, k, seed) for k in keys]
    return {"colour_hist": {k: colour_histogram(im, bins) for k, im in zip(keys, images)},
            "random": _random_init_vectors(cfg, keys, images, batch_size)}


def _random_init_vectors(cfg: Profile, keys: list[str], images: list[Image.Image], batch_size: int
                         ) -> dict[str, np.ndarray]:
    """``{key: L2-normalised pooled embedding}`` of ``images`` by ``cfg.idsim.backbone`` at random init."""
    # the registry draws a random init under a fixed seed in a forked RNG: the same network every time,
    # and the caller's random state is untouched (so it does not matter when the images were loaded)
    enc = load_backbone(cfg, name=cfg.idsim.backbone, weights="random")[0].eval()
    vecs = embed(enc, memory_refs(images, keys), "full", FeatureStore(), batch_size=batch_size, progress=False)
    return dict(zip(keys, vecs.astype(np.float32)))
