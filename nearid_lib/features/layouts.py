"""Layouts of a :class:`~.store.FeatureStore` for a backbone's token grids (payloads ``tokens`` and
``pooled``): the tables :func:`~.embed.embed` reads and fills when a store is made with
``layouts={...}``, behind the same calls as a row table (``key in table``, ``fill``, ``get``).

A token grid is large (SigLIP2-so400m: 729 x 1152) and training reads grids by random rows, so
grids are not kept as per-item rows:

* :class:`GroupArrays` (smoke, mini): a float16 :class:`~.cache.TokenCache` per image group and
  variant (memory-mapped, built in chunks, resumable). ``fill`` builds the whole group of a
  missing image, in the group's order and batches, so an image's numbers do not depend on which
  caller asked first; images outside every group get one cache over exactly the images asked.
  Both payloads come from the same caches (``pooled``: the backbone's own pooled output).
* :class:`ShardGrids` (paper): payload ``tokens`` in the int8 :class:`~.shards.ShardedTokenStore`
  that training fills (one grid per image and variant, each process writing its own shards).
  ``fill`` runs the backbone on the missing images; a grid past the store's disk budget is handed
  to the next ``get`` only (past the budget, the store streams). ``get`` decodes on the backbone's
  device.

    arrays = GroupArrays(backbone, data, groups, items=lambda g: group_items(data, g))
    store = FeatureStore(layouts={"tokens": arrays, "pooled": arrays})
    tok = embed(backbone, dataset_refs(data, rels, masks), "fg", store, payload="tokens", tensor=True)
"""
from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from ..data import load_nearid
from ..runtime import set_torch_threads
from .cache import TokenCache, backbone_of
from .payloads import encoder_fingerprint
from .shards import decode_tokens, encode_tokens
from .variants import check_variant

__all__ = ["GroupArrays", "ShardGrids"]

Items = Callable[[str], tuple[Sequence[str], Sequence[str]]]


def _same_backbone(layout_bb, encoder, where: str) -> None:
    bb = backbone_of(encoder)
    if bb is not layout_bb and encoder_fingerprint(bb) != encoder_fingerprint(layout_bb):
        raise ValueError(f"{where} holds the grids of {layout_bb.name}, not of {getattr(bb, 'name', bb)!r}")


class GroupArrays:
    """Token grids and pooled outputs of one backbone in :class:`TokenCache` arrays, one per image
    group and variant.

    Args:
        backbone: the frozen backbone (an encoder with ``.backbone`` is reduced to it).
        data: the dataset (``data.image`` / ``data.mask``; ``data.root`` names it to worker processes).
        groups: the group names, in the order their images are claimed (an image in two groups
            belongs to the first).
        items: ``items(group) -> (relpaths, masks)``, the group's images in cache order.
        cache_kw: :meth:`TokenCache.build_or_load` keywords (``profile``, ``cache_root``,
            ``batch_size``, ``store_tokens``).
        tune_malloc: worker processes set glibc's malloc thresholds (:mod:`nearid_lib.runtime.allocator`).

    A worker process reopens the dataset with :func:`nearid_lib.data.load_nearid` (``data.root``).
    """

    def __init__(self, backbone, data, groups: Sequence[str], items: Items, cache_kw: dict[str, Any] | None = None,
                 progress: bool = True, tune_malloc: bool = True):
        self.backbone, self.data, self.groups, self.items = backbone_of(backbone), data, list(groups), items
        self.cache_kw, self.progress, self.tune_malloc = dict(cache_kw or {}), progress, tune_malloc
        self.caches: dict[tuple[str, str], TokenCache] = {}          # (variant, group) -> cache
        self._index: dict[str, dict[str, tuple[tuple[str, str], int]]] = {}   # variant -> rel -> (cache, row)
        self._owner: dict[str, tuple[str, str]] | None = None       # rel -> (group, mask)

    def owners(self) -> dict[str, tuple[str, str]]:
        """``relpath -> (group, mask)`` of every image of the groups (the first group claiming it)."""
        if self._owner is None:
            own: dict[str, tuple[str, str]] = {}
            for g in self.groups:
                for r, m in zip(*self.items(g)):
                    own.setdefault(r, (g, m))
            self._owner = own
        return self._owner

    def _load(self, key: tuple[str, str], rels: Sequence[str], masks: Sequence[str], progress: bool) -> TokenCache:
        if key not in self.caches:
            c = TokenCache.build_or_load(self.backbone, list(rels), masks=list(masks), variant=key[0],
                                         data=self.data, progress=progress, **self.cache_kw)
            self.caches[key] = c
            idx = self._index.setdefault(key[0], {})
            for r, row in c.index.items():
                idx.setdefault(r, (key, row))
        return self.caches[key]

    def cache(self, group: str, variant: str = "full") -> TokenCache:
        """The cache of one group and variant (built on first use)."""
        return self._load((variant, group), *self.items(group), progress=self.progress)

    def complete(self, group: str, variant: str = "full") -> bool:
        """Whether the cache of ``group`` / ``variant`` is built (on disk or loaded)."""
        return (variant, group) in self.caches or self._on_disk(*self.items(group), variant)

    def _on_disk(self, rels: Sequence[str], masks: Sequence[str], variant: str) -> bool:
        kw = {k: v for k, v in self.cache_kw.items() if k != "batch_size"}
        return TokenCache.complete(self.backbone, list(rels), masks=list(masks), variant=variant, data=self.data, **kw)

    def build(self, groups: Iterable[str], variants: Sequence[str] = ("full",), workers: int = 1) -> None:
        """Build (or load) the caches of ``groups`` x ``variants``; ``workers`` > 1 builds the missing
        ones in that many spawned processes, largest first, each with this process's torch thread
        count. A cache's bytes do not depend on the process that builds it (one list, the same batches)."""
        pairs = [(v, g) for v in variants for g in groups]
        if workers > 1:
            todo = [(v, g) for v, g in pairs if not self.complete(g, v)]
            if len(todo) > 1:
                self._build_in_workers(todo, workers)
        for v, g in pairs:
            self.cache(g, v)

    def _build_in_workers(self, todo: list[tuple[str, str]], workers: int) -> None:

        lists = {g: tuple(map(list, self.items(g))) for _, g in todo}
        todo = sorted(todo, key=lambda vg: -len(lists[vg[1]][0]))
        n = min(workers, len(todo))
        m = self.data.manifest
        splits = list(m["splits"]) if m.get("partial") and not m.get("complete") else None
        print(f"building {len(todo)} feature caches in {n} worker processes", flush=True)
        with ProcessPoolExecutor(n, mp_context=get_context("spawn")) as ex:
            futs = [ex.submit(_cache_in_worker, self.backbone, str(self.data.root), *lists[g], v, self.cache_kw,
                              torch.get_num_threads(), self.tune_malloc, splits) for v, g in todo]
            for f in tqdm(as_completed(futs), total=len(futs), desc="feature caches", unit="cache",
                          disable=not self.progress):
                f.result()                  # a failed build raises here, with the worker's error

    def table(self, encoder, variant: str, payload: str) -> "_GroupTable":
        """The ``tokens`` or ``pooled`` table of ``variant`` (:func:`~.embed.embed`)."""
        _same_backbone(self.backbone, encoder, "this group-array layout")
        check_variant(variant)
        if payload not in ("tokens", "pooled"):
            raise KeyError(f"group arrays hold payloads tokens and pooled, not {payload!r}")
        if payload == "tokens" and not self.cache_kw.get("store_tokens", True):
            raise ValueError("these group caches keep only pooled outputs (store_tokens=False)")
        return _GroupTable(self, variant, payload)


class _GroupTable:
    """One payload of one variant of a :class:`GroupArrays` (the row-table calls of :func:`~.embed.embed`)."""

    def __init__(self, arrays: GroupArrays, variant: str, payload: str):
        self.arrays, self.variant, self.payload = arrays, variant, payload
        self.key = {"name": arrays.backbone.name, "variant": variant, "payload": payload}

    def __contains__(self, key: str) -> bool:
        return key in self.arrays._index.get(self.variant, {})

    def fill(self, encoder, refs, batch_size: int, progress: bool, desc: str | None) -> int:
        """Build the caches holding ``refs``: each owned image's whole group, and one cache over
        the images of no group (their ``mask_key`` s). Returns the number of images encoded."""
        a, own = self.arrays, self.arrays.owners()
        groups = list(dict.fromkeys(own[r.key][0] for r in refs if r.key in own))
        outside = [r for r in refs if r.key not in own]
        lists = [((self.variant, g), *a.items(g), a.progress) for g in groups]
        if outside:
            lists.append(((self.variant, f"outside:{len(a.caches)}"), [r.key for r in outside],
                          [r.mask_key for r in outside], False))
        n = 0
        for key, rels, masks, progress in lists:      # every group is loaded (not in a.caches yet)
            n += 0 if a._on_disk(rels, masks, self.variant) else len(dict.fromkeys(rels))
            a._load(key, rels, masks, progress)
        return n

    def get(self, keys: Sequence[str], tensor: bool = False, device=None):
        """The rows of ``keys`` (float32), gathered group by group in ascending row order."""
        idx = self.arrays._index.get(self.variant, {})
        try:
            loc = [idx[k] for k in keys]
        except KeyError as err:
            raise KeyError(f"{err.args[0]!r} is not in any {self.variant} feature cache of "
                           f"{self.arrays.backbone.name}") from None
        out = None
        by_cache: dict[tuple[str, str], list[int]] = {}
        for i, (ck, _) in enumerate(loc):
            by_cache.setdefault(ck, []).append(i)
        for ck in sorted(by_cache):
            sel = np.asarray(by_cache[ck], dtype=np.int64)
            rows = np.fromiter((loc[i][1] for i in sel), dtype=np.int64, count=len(sel))
            c = self.arrays.caches[ck]
            t = c.tokens(rows) if self.payload == "tokens" else c.pooled(rows)
            if out is None:
                out = torch.empty((len(keys),) + tuple(t.shape[1:]), dtype=t.dtype)
            out[torch.from_numpy(sel)] = t
        if out is None:
            bb = self.arrays.backbone
            out = torch.zeros((0, bb.n_tokens, bb.token_dim) if self.payload == "tokens" else (0, bb.embed_dim))
        if tensor:
            return out if device is None else out.to(device)
        return out.numpy()


def _cache_in_worker(backbone, root: str, rels: list[str], masks: list[str], variant: str, kw: dict[str, Any],
                     threads: int, tune_malloc: bool = True, splits: list[str] | None = None) -> str:
    """Build one cache in a worker process (:meth:`GroupArrays.build`); returns its folder name.
    ``splits``: those of a split-selected build the parent loaded (accepted here as there)."""
    set_torch_threads(threads, tune_malloc)
    data = load_nearid(root, splits=splits)
    c = TokenCache.build_or_load(backbone, rels, masks=masks, variant=variant, data=data,
                                 progress=False, **kw)
    return c.dir.name


class ShardGrids:
    """Payload ``tokens`` of one backbone in the sharded compact store of ``stream`` (a
    :class:`~.stream.StreamFeatures` with a store: the one training fills)."""

    def __init__(self, stream):
        if stream.store is None:
            raise ValueError("ShardGrids needs a StreamFeatures with a store")
        self.stream = stream
        # grids past the disk budget, computed by the last fill and handed to the next get only:
        # past the budget the store degrades to streaming (no grid piles up in memory)
        self.overflow: dict[tuple[str, str], torch.Tensor] = {}
        self.just: set[tuple[str, str]] = set()     # filled since the last get (not counted as hits)

    def table(self, encoder, variant: str, payload: str) -> "_ShardTable":
        _same_backbone(self.stream.backbone, encoder, f"token store {self.stream.store.root.name}")
        if payload != "tokens":
            raise KeyError(f"the token store holds payload tokens, not {payload!r}")
        if variant not in ("full", "fg"):
            raise ValueError(f"the token store holds the variants full and fg, not {variant!r}")
        return _ShardTable(self, variant)


class _ShardTable:
    def __init__(self, grids: ShardGrids, variant: str):
        self.grids, self.variant = grids, variant
        st = grids.stream.store
        self.key = {"name": st.root.name, "variant": variant, "payload": "tokens"}

    def __contains__(self, key: str) -> bool:
        k = (key, self.variant)
        return k in self.grids.stream.store or k in self.grids.overflow

    def fill(self, encoder, refs, batch_size: int, progress: bool, desc: str | None) -> int:
        """Run the backbone on ``refs`` (the fg variant masks with each ref's ``mask_key``) and store
        the grids; what the disk budget refuses goes, at the store's precision, to the next
        :meth:`get` only (it is computed again when asked again: streaming)."""
        s, st = self.grids.stream, self.grids.stream.store
        rels, masks = [r.key for r in refs], [r.mask_key for r in refs]
        tok = s.encode(rels, masks, np.full(len(refs), self.variant == "fg"))
        keys = [(r, self.variant) for r in rels]
        self.grids.just.update(keys)
        s.stats["written"] += st.put(keys, tok)
        left = [i for i, k in enumerate(keys) if k not in st]
        if left:
            kept = decode_tokens(encode_tokens(tok[torch.as_tensor(left)], st.dtype), st.n_tokens, st.token_dim,
                                 st.dtype)
            for j, i in enumerate(left):
                self.grids.overflow[keys[i]] = kept[j].cpu()
        return len(refs)

    def get(self, keys: Sequence[str], tensor: bool = False, device=None):
        """Decoded grids [n, N, D] float32 of ``keys`` (on ``device``, default the backbone's)."""
        s = self.grids.stream
        dev = s.device if device is None else torch.device(device)
        ks = [(k, self.variant) for k in keys]
        s.stats["slots"] += len(ks)
        s.stats["hits"] += sum(k not in self.grids.just for k in ks)
        self.grids.just.clear()
        out = torch.empty(len(ks), s.n_tokens, s.token_dim, dtype=s.out_dtype, device=dev)
        stored = np.fromiter((k not in self.grids.overflow for k in ks), dtype=bool, count=len(ks))
        if stored.any():
            t0 = time.perf_counter()
            sel = np.flatnonzero(stored)
            out[torch.from_numpy(sel).to(dev)] = s.store.get([ks[i] for i in sel], device=dev,
                                                             out_dtype=s.out_dtype)
            s.stats["read_s"] += time.perf_counter() - t0
        for i in np.flatnonzero(~stored):
            out[int(i)] = self.grids.overflow[ks[i]].to(dev, s.out_dtype)
        self.grids.overflow.clear()
        return out if tensor else out.cpu().numpy()
