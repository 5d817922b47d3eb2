"""The cache of frozen prefix features of ID-Sim training and evaluation (:class:`PrefixStore`): the
frozen part of the backbone runs once per image (and augmentation draw); training runs only the
adapted suffix (:mod:`nearid_lib.idsim.model`)."""
from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from PIL import Image
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ..io_utils import atomic_write
from ..seeding import derive_seed
from .sampling import augment, load_key

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["PrefixStore", "frozen_embeddings"]


class PrefixStore:
    """Frozen prefix features of images (``model.prefix``), computed once per (key, variant).

    Variant 0 is the clean image, variants 1..V are :func:`augment` draws. Stored as float16 on
    the CPU; optional persistence to ``path`` (safetensors, keyed by the model's prefix cache key
    so a different backbone/resolution/split never reads stale features)."""

    def __init__(self, model, data: NearIDData, n_variants: int = 0, seed: int = 0, batch_size: int = 32,
                 path: str | Path | None = None):
        self.model, self.data, self.V, self.seed, self.bs = model, data, int(n_variants), seed, batch_size
        self.feats: dict[tuple[str, int], torch.Tensor] = {}
        self.path = Path(path) if path else None
        self.n_computed = 0
        self._saved_at = -1
        if self.path and self.path.exists():
            with safe_open(str(self.path), "pt") as f:
                meta = f.metadata() or {}
            if (meta.get("cache_key") == model.cache_key() and meta.get("seed") == str(seed)
                    and meta.get("data") == self._data_key()):
                for k, v in load_file(str(self.path)).items():
                    key, _, var = k.rpartition("@")
                    self.feats[(key, int(var))] = v
                self._saved_at = 0          # the file holds everything this store has

    def _data_key(self) -> str:
        """Fingerprint of the dataset (its manifest): a rebuilt world never reads stale features."""
        man = json.dumps(getattr(self.data, "manifest", {}) or {}, sort_keys=True, default=str)
        return hashlib.blake2b(f"{self.data.root}|{man}".encode(), digest_size=8).hexdigest()

    def _image(self, key: str, variant: int) -> Image.Image:
        img = load_key(self.data, key, self.seed)
        if variant:
            img = augment(img, derive_seed("aug", key, variant, base=self.seed))
        return img

    def ensure(self, keys: Sequence[str], variants: Sequence[int] | None = None,
               progress: Callable[[str], None] | None = None) -> None:
        """Compute missing (key, variant) features (all variants by default)."""
        variants = list(range(self.V + 1)) if variants is None else list(variants)
        todo = [(k, v) for k in dict.fromkeys(keys) for v in variants if (k, v) not in self.feats]
        pre = self.model.preprocess
        for i in range(0, len(todo), self.bs):
            chunk = todo[i:i + self.bs]
            x = torch.stack([pre(self._image(k, v)) for k, v in chunk])
            f = self.model.prefix(x).to("cpu", torch.float16)
            for (k, v), fi in zip(chunk, f):
                self.feats[(k, v)] = fi.clone()
            self.n_computed += len(chunk)
            if progress and (i // self.bs) % 10 == 0:
                progress(f"prefix {min(i + self.bs, len(todo))}/{len(todo)}")

    def get(self, keys: Sequence[str], variants: Sequence[int] | None = None) -> torch.Tensor:
        """Stacked features [B, ...] (float32) of keys (variant 0 unless given)."""
        variants = [0] * len(keys) if variants is None else list(variants)
        for v in sorted(set(variants)):
            self.ensure([k for k, vv in zip(keys, variants) if vv == v and (k, v) not in self.feats], [v])
        return torch.stack([self.feats[(k, v)] for k, v in zip(keys, variants)]).float()

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
        """Persist to ``path`` (no-op without a path or when nothing was computed since the last save)."""
        if not self.path or (self.n_computed == self._saved_at and self.path.exists()):
            return
        self._saved_at = self.n_computed
        tensors = {f"{k}@{v}": t.contiguous() for (k, v), t in self.feats.items()}
        meta = {"cache_key": self.model.cache_key(), "seed": str(self.seed), "data": self._data_key()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, lambda p: save_file(tensors, str(p), metadata=meta))


@torch.no_grad()
def frozen_embeddings(model, store: PrefixStore, keys: Sequence[str], batch_size: int = 64) -> torch.Tensor:
    """L2-normalised frozen-backbone global embeddings [N, D] (LoRA disabled, no heads)."""
    out = []
    with model.adapters_disabled():
        for i in range(0, len(keys), batch_size):
            cls, _ = model.raw_from_prefix(store.get(keys[i:i + batch_size]))
            out.append(F.normalize(cls.float(), dim=-1).cpu())
    return torch.cat(out) if out else torch.zeros(0, 1)
