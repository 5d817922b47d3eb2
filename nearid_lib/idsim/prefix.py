"""The store of frozen prefix features of ID-Sim training and evaluation (:class:`PrefixStore`): the
frozen part of the backbone runs once per image (and augmentation draw); training runs only the
adapted suffix (:mod:`nearid_lib.idsim.model`). The features go through the library's one feature
path (:func:`nearid_lib.features.embed`, payload ``"prefix"``) into a
:class:`~nearid_lib.features.FeatureStore`."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

import torch
import torch.nn.functional as F
from PIL import Image

from ..features import FeatureStore, ImageRef, dataset_scope, embed, feature_table
from ..runtime.seeding import derive_seed
from .sampling import augment, load_key

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["PrefixStore", "frozen_embeddings"]


class PrefixStore:
    """Frozen prefix features of images (``model.prefix``), computed once per (key, variant).

    Variant 0 is the clean image, variants 1..V are :func:`augment` draws (row ``<key>@<variant>``).
    Stored as float16 in a :class:`~nearid_lib.features.FeatureStore` under ``path`` (a folder;
    None: memory), whose table key is the model's prefix cache key, the seed and the dataset's
    fingerprint, so a different backbone, resolution, seed or world never reads stale features.
    Rows reach the disk in chunks as they are computed (a killed job resumes); :meth:`save`
    writes the rest."""

    def __init__(self, model, data: NearIDData, n_variants: int = 0, seed: int = 0, batch_size: int = 32,
                 path: str | Path | None = None):
        self.model, self.data, self.V, self.seed, self.bs = model, data, int(n_variants), seed, batch_size
        self.path = Path(path) if path else None
        self.store = FeatureStore(self.path)
        self.scope = f"seed={seed}|{dataset_scope(data)}"

    @property
    def n_computed(self) -> int:
        """Rows this store computed (not read from disk)."""
        return self.store.n_computed

    def _image(self, key: str, variant: int) -> Image.Image:
        img = load_key(self.data, key, self.seed)
        if variant:
            img = augment(img, derive_seed("aug", key, variant, base=self.seed))
        return img

    def ensure(self, keys: Sequence[str], variants: Sequence[int] | None = None, progress: bool = False) -> None:
        """Compute missing (key, variant) features (all variants by default), in batches of
        ``batch_size`` in key order; ``progress`` shows a bar."""
        variants = list(range(self.V + 1)) if variants is None else list(variants)
        refs = [ImageRef(f"{k}@{v}", lambda k=k, v=v: self._image(k, v), None, f"load_key({k!r}) draw {v}")
                for k in dict.fromkeys(keys) for v in variants]
        embed(self.model, refs, "full", self.store, payload="prefix", scope=self.scope, batch_size=self.bs,
              progress=progress, desc="idsim prefix")

    def get(self, keys: Sequence[str], variants: Sequence[int] | None = None) -> torch.Tensor:
        """Stacked features [B, ...] (float32) of keys (variant 0 unless given)."""
        variants = [0] * len(keys) if variants is None else list(variants)
        rows = [f"{k}@{v}" for k, v in zip(keys, variants)]
        table = feature_table(self.model, self.store, "full", "prefix", self.scope)
        if table.missing(rows):
            for v in sorted(set(variants)):
                self.ensure([k for k, vv in zip(keys, variants) if vv == v and f"{k}@{v}" not in table], [v])
        return torch.from_numpy(table.get(rows)).float()

    @contextmanager
    def using(self, model) -> Iterator[PrefixStore]:
        """This store with ``model`` computing any feature it lacks, for the ``with`` block, then its
        own model again: how a model with the same frozen prefix (an ID-Sim trained with other
        settings on the same backbone) reads and extends this cache. Raises ValueError when
        ``model``'s prefix is another one (its ``cache_key()`` differs from the store's model's)."""
        if model is self.model:
            yield self
            return
        if model.cache_key() != self.model.cache_key():
            raise ValueError(f"PrefixStore.using: the store holds {self.model.cache_key()!r} features, "
                             f"the model needs {model.cache_key()!r}")
        own, self.model = self.model, model
        try:
            yield self
        finally:
            self.model = own

    def save(self) -> None:
        """Write the rows not on disk yet (no-op without a path)."""
        self.store.flush()


@torch.no_grad()
def frozen_embeddings(model, store: PrefixStore, keys: Sequence[str], batch_size: int = 64) -> torch.Tensor:
    """L2-normalised frozen-backbone global embeddings [N, D] (LoRA disabled, no heads)."""
    out = []
    with model.adapters_disabled():
        for i in range(0, len(keys), batch_size):
            cls, _ = model.raw_from_prefix(store.get(keys[i:i + batch_size]))
            out.append(F.normalize(cls.float(), dim=-1).cpu())
    return torch.cat(out) if out else torch.zeros(0, 1)
