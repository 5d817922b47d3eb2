"""Embeddings of one encoder, whatever keeps them: :class:`Embedder`, the one interface through which
the three papers' protocols and ``score_encoder`` get L2-normalised embeddings of a dataset's images,
of images outside its tables (an edit grid's cells), of image files and of images in memory::

    cfg = get_profile("mini")
    enc, _ = load_encoder("efficientnet-lite0")                 # frozen backbone
    emb = Embedder(enc, data, profile=cfg)                      # frozen pooled output (the GAP baseline)
    emb = Embedder(enc, data, head=my_map_head, profile=cfg)    # backbone tokens -> trained head
    emb = Embedder(load_encoder("nearid", checkpoint=ckpt)[0], data, profile=cfg)  # same, from a ckpt
    emb = Embedder(UserEncoder(fn, "mine"), data, folder=cache_dir("mini") / "score")  # any callable
    e = emb.embed(relpaths, variant="full")                     # [n, E], dataset images
    e = emb.embed(relpaths, "fg", masks=masks)                  # any image the dataset reads, with its mask
    e = emb.embed_refs(file_refs(paths))                        # files (content-keyed); memory_refs(images, keys)

Two layouts keep the features; the calls are the same:

* ``"grids"`` (a library encoder: a backbone, or a NearID encoder = backbone + head): the backbone's
  token grids and pooled outputs, read through :func:`~.embed.embed` (payloads ``tokens`` and
  ``pooled``) over :attr:`Embedder.store`, whose layouts hold them (:mod:`.layouts`). Where tokens
  live follows the profile's ``train.token_store``: ``"cache"`` (smoke, mini) keeps them in each
  image group's float16 :class:`~.cache.TokenCache` (:class:`~.layouts.GroupArrays`); a codec
  (``"int8"`` in paper) reads and fills the sharded store training fills
  (:func:`~.stream.open_train_store`, :class:`~.layouts.ShardGrids`) and the group caches keep only
  the pooled outputs. An embedding is the head on the tokens, or the backbone's own pooled output
  without a head. Images outside every group get one cache over exactly the images asked, and
  their embeddings are kept for the next call.
* ``"rows"`` (a callable wrapped as :class:`~nearid_lib.models.UserEncoder`, which has no grids; or
  any model embedded whole, e.g. the released NearID model's float forward): ``encoder.embed`` of
  each image, one row per image in a :class:`~.store.FeatureStore` under ``folder`` (None: memory),
  scoped to the dataset's fingerprint and written in chunks as they fill, so a killed run resumes.

Images are grouped (``"positives@<split>"``, ``"dist:<source>@<split>"``, ``"mtg@<split>"``,
:mod:`nearid_lib.data.groups`): training and evaluation share one cache per group and variant, and
a job that only needs one split of one source builds only those. ``variant="fg"`` blacks the
background out with the object mask (a distractor uses the mask of the view it was inpainted into).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..data.groups import group_items, image_groups
from ..paths import cache_dir
from .cache import TokenCache
from .embed import dataset_refs, dataset_scope, embed
from .layouts import GroupArrays
from .payloads import ImageRef, backbone_of
from .store import FeatureStore
from .stream import StreamFeatures, open_train_store

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["Embedder", "LAYOUTS"]

LAYOUTS = ("grids", "rows")
# images outside the dataset's groups (edit-grid cells) go through the head in batches of this
# size, as they always have: a head's float sums may depend on the batch it runs in
OUTSIDE_HEAD_BATCH = 256


class Embedder:
    """L2-normalised embeddings of ``data``'s images by ``encoder`` (module docstring).

    Args:
        encoder: from :func:`nearid_lib.models.load_encoder`. A ``NearIDEncoder`` (backbone + head)
            pools its backbone's cached tokens with its head; a plain backbone gives its own pooled
            output (frozen baseline: EfficientNet GAP, SigLIP's MAP head, CLIP/DINO CLS), unless
            ``head`` is given; a :class:`~nearid_lib.models.UserEncoder` is embedded in rows.
        data: the :class:`~nearid_lib.data.NearIDData` whose images are embedded.
        head: optional :class:`~nearid_lib.models.MAPHead` applied to the backbone's tokens.
        profile: the resolved :class:`~nearid_lib.config.Profile` (``get_profile(name)``, or a
            notebook's ``run.cfg``) the defaults below come from, and whose name selects the
            default cache folder (``cache_dir(profile.name) / "features"``). None: the defaults
            of no profile (``cache_dir() / "features"``, ``token_store="cache"``, one worker).
        layout: ``"grids"`` or ``"rows"`` (:data:`LAYOUTS`); default: rows for an encoder without a
            backbone forward (a wrapped callable) or when ``folder`` is given, else grids.
        folder: where the rows layout keeps its rows (None: memory).
        name, label, seed: how the tables name this encoder (default: the encoder's name) and the
            training seed of a trained head (None: a frozen encoder).
        use_cache: False runs the backbone on the images at every call (slow; for checks).
        store_tokens: keep the tokens in the cache (default: when the backbone has tokens; the
            cache key includes it, so keep it the same everywhere to share caches).
        cache_root: explicit cache folder (tests).
        token_store: ``"cache"`` or a codec of the sharded store (``"int8"``...); default: the
            profile's ``train.token_store`` (``"cache"`` without a profile).
        workers: processes :meth:`build` uses; default: the profile's ``runtime.workers`` (1
            without a profile).
        chunk_images: rows written per chunk (rows layout).
    """

    def __init__(self, encoder, data: NearIDData, head=None, profile: Profile | None = None, *,
                 layout: str | None = None, folder=None, name: str | None = None, label: str | None = None,
                 seed: int | None = None, use_cache: bool = True, store_tokens: bool | None = None,
                 batch_size: int = 64, cache_root=None, progress: bool = True, head_batch: int = 512,
                 token_store: str | None = None, workers: int | None = None, chunk_images: int = 256):
        if isinstance(profile, str):
            raise TypeError(f"Embedder(profile={profile!r}): pass the resolved profile, "
                            f"nearid_lib.config.get_profile({profile!r}), or None for the defaults")
        self.encoder, self.backbone, self.data = encoder, backbone_of(encoder), data
        if layout is None:
            layout = "rows" if folder is not None or not hasattr(self.backbone, "preprocess") else "grids"
        if layout not in LAYOUTS:
            raise ValueError(f"Embedder layout {layout!r}: valid {', '.join(LAYOUTS)}")
        self.layout = layout
        self.name = name or str(getattr(encoder, "name", type(encoder).__name__))
        self.label, self.seed = label or self.name, seed
        self.cfg = profile
        self.profile = profile.name if profile is not None else None    # names the cache folder
        self.batch_size, self.cache_root, self.progress, self.head_batch = batch_size, cache_root, progress, head_batch
        self.scope = dataset_scope(data)
        self._outside_rows: dict[str, dict[str, np.ndarray]] = {}      # variant -> relpath -> embedding
        self._ref_store: FeatureStore | None = None
        self._own: dict[str, tuple[str, str]] | None = None
        if layout == "rows":
            if head is not None:
                raise ValueError("the rows layout embeds with the encoder itself: no separate head")
            self.head, self.use_cache, self.store_tokens, self.token_store, self.workers = None, False, False, "", 1
            self.arrays = None
            self.store = FeatureStore(folder, chunk_items=chunk_images)
            return
        # a NearIDEncoder's head runs on cached tokens; without tokens (store_tokens=False: its
        # embeddings come whole from its own forward, e.g. the released model's float path) it is not taken
        if head is None and store_tokens is not False and hasattr(encoder, "head") and hasattr(encoder, "backbone"):
            head = encoder.head
        self.head, self.use_cache = head, use_cache
        has_tokens = int(getattr(self.backbone, "n_tokens", 0) or 0) > 0
        self.store_tokens = has_tokens if store_tokens is None else bool(store_tokens)
        if head is not None and not self.store_tokens:
            raise ValueError("a head needs the backbone's tokens: store_tokens must be True")
        if token_store is None:
            token_store = profile.train.token_store if profile is not None else "cache"
        self.token_store = str(token_store)
        self.workers = int(workers if workers is not None else (profile.runtime.workers if profile is not None else 1))
        self._stream = None                                 # StreamFeatures over the shared store
        # where the grids live: group caches (pooled, and tokens unless a sharded store holds them)
        self.arrays = GroupArrays(self.backbone, data, image_groups(data), lambda g: group_items(data, g),
                                  self._cache_kw(), progress=progress,
                                  tune_malloc=profile.runtime.tune_malloc if profile is not None else True)
        layouts = {"pooled": self.arrays}
        if self._cached_tokens:
            layouts["tokens"] = self.arrays
        self.store = FeatureStore(layouts=layouts if use_cache else None)   # uncached: rows in memory

    def __repr__(self) -> str:
        return f"Embedder({self.name!r}, layout={self.layout}, {self.store!r})"

    # -- which images
    def owners(self) -> dict[str, tuple[str, str]]:
        """``relpath -> (group, mask)`` of every image of the dataset's groups (the first claiming it)."""
        if self.arrays is not None:
            return self.arrays.owners()
        if self._own is None:
            self._own = {}
            for g in image_groups(self.data):
                for r, m in zip(*group_items(self.data, g)):
                    self._own.setdefault(r, (g, m))
        return self._own

    def _masks_of(self, relpaths: Sequence[str]) -> list[str]:
        own = self.owners()
        missing = [r for r in relpaths if r not in own]
        if missing:
            raise KeyError(f"{missing[0]!r} is not an image of the dataset at {self.data.root}")
        return [own[r][1] for r in relpaths]

    # -- caches (grids layout)
    @property
    def caches(self) -> dict[tuple[str, str], TokenCache]:
        """``(variant, group) -> TokenCache`` of the caches loaded so far (grids layout)."""
        return self.arrays.caches if self.arrays is not None else {}

    def cache(self, group: str, variant: str = "full") -> TokenCache:
        """The :class:`TokenCache` of one image group and variant (built on first use)."""
        return self._grids("cache").cache(group, variant)

    @property
    def _cached_tokens(self) -> bool:
        """Whether the group caches hold tokens (not when they live in the sharded store)."""
        return self.store_tokens and self.token_store == "cache"

    def _cache_kw(self) -> dict[str, Any]:
        """Where and how a group cache of this embedder is built (:meth:`TokenCache.build_or_load`)."""
        return dict(profile=self.profile, cache_root=self.cache_root, batch_size=self.batch_size,
                    store_tokens=self._cached_tokens)

    def _grids(self, what: str) -> GroupArrays:
        if self.arrays is None:
            raise ValueError(f"Embedder.{what}: the rows layout of {self.name!r} keeps embeddings, not token grids")
        return self.arrays

    def complete(self, group: str, variant: str = "full") -> bool:
        """Whether the cache of ``group`` / ``variant`` is built (on disk or loaded)."""
        return self._grids("complete").complete(group, variant)

    def prefetch(self, groups: Iterable[str], variants: Sequence[str] = ("full",),
                 extra: tuple[Sequence[str], Sequence[str]] | None = None) -> None:
        """Make every image of ``groups`` ready for each variant before a protocol scores them: the
        caches of :meth:`build` (grids), or every row (rows: one pass per variant, the ``extra``
        ``(relpaths, masks)`` -- images outside the groups, such as the edit grids -- in the
        full-image pass; the grids layout embeds those when they are scored)."""
        groups = list(groups)
        if self.layout == "grids":
            self.build(groups, variants)
            return
        for v in variants:
            rels, masks = [], []
            for g in groups:
                r, m = group_items(self.data, g)
                rels += r
                masks += m
            if v == "full" and extra is not None:
                rels += list(extra[0])
                masks += list(extra[1])
            self._row_embed(rels, masks, v)

    def build(self, groups: Iterable[str] | None = None, variants: Sequence[str] = ("full",),
              workers: int | None = None) -> None:
        """Build (or load) the caches of ``groups`` (default: all) for each variant (rows layout:
        embed their images, :meth:`prefetch`).

        ``workers`` (default this embedder's ``workers``; tiny backbones: 1 unless given): build the
        missing caches in that many spawned processes, largest first, each with this process's
        torch thread count. A cache's bytes do not depend on which process builds it (one image
        list, the same batches), so results are the same as a serial build. With a sharded token
        store, the store gets every grid of ``groups`` x ``variants`` it lacks (in this process,
        resumable) and the group caches only the pooled outputs."""
        groups = list(image_groups(self.data) if groups is None else groups)
        if self.layout == "rows":
            self.prefetch(groups, variants)
            return
        if self.use_cache and self.store_tokens and self.token_store != "cache":
            items: dict[str, str] = {}
            for g in groups:
                for r, m in zip(*group_items(self.data, g)):
                    items.setdefault(r, m)
            self.stream().prefill(items.items(), variants=variants, progress=self.progress)
        if workers is None:
            workers = 1 if getattr(self.backbone, "tiny", False) else self.workers
        self.arrays.build(groups, variants, workers=workers if self.use_cache else 1)

    # -- features: every read goes through features.embed over this embedder's store
    def stream(self) -> StreamFeatures:
        """The :class:`~.stream.StreamFeatures` over the sharded token store that training fills
        (same folder: backbone, dataset and codec); this process writes its own shards."""
        if self._stream is None:
            store = open_train_store(self.backbone, self.data, self.cache_root or cache_dir(self.profile),
                                     dtype=self.token_store)
            cuda = getattr(self.backbone, "device", torch.device("cpu")).type == "cuda"
            self._stream = StreamFeatures(self.backbone, self.data, store=store, batch_size=self.batch_size,
                                          amp_dtype=torch.bfloat16 if cuda else None)
        return self._stream

    def _rows(self, relpaths: Sequence[str], variant: str, payload: str,
              masks: Sequence[str] | None = None) -> torch.Tensor:
        """:func:`~.embed.embed` of dataset images (``masks``: images outside the dataset's groups
        too, such as edit grids) for ``payload`` ``tokens`` / ``pooled``."""
        self._grids(payload)
        relpaths = list(relpaths)
        if masks is None:
            own = self.owners()
            if self.use_cache:
                missing = [r for r in relpaths if r not in own]
                if missing:
                    raise KeyError(f"{missing[0]!r} is not an image of the dataset at {self.data.root}")
            masks = [own.get(r, (None, ""))[1] for r in relpaths]
        if payload == "tokens":
            if not self.store_tokens:
                raise ValueError("this Embedder was made with store_tokens=False: it reads no tokens")
            if self.use_cache and "tokens" not in self.store.layouts:      # a sharded token store
                self.store.layouts["tokens"] = self.stream().features.layouts["tokens"]
        return embed(self.backbone, dataset_refs(self.data, relpaths, list(masks)), variant, self.store,
                     payload=payload, scope=self.scope, batch_size=self.batch_size, progress=self.progress,
                     tensor=True)

    def tokens(self, relpaths: Sequence[str], variant: str = "full",
               masks: Sequence[str] | None = None) -> torch.Tensor:
        """Backbone tokens [n, N, D] (float32, CPU) of ``relpaths`` (from the caches or the store)."""
        return self._rows(relpaths, variant, "tokens", masks).float().cpu()

    def pooled(self, relpaths: Sequence[str], variant: str = "full",
               masks: Sequence[str] | None = None) -> torch.Tensor:
        """The backbone's own pooled outputs [n, E] (not normalised)."""
        return self._rows(relpaths, variant, "pooled", masks)

    # -- embeddings
    @torch.no_grad()
    def embed(self, relpaths: Sequence[str], variant: str = "full", masks: Sequence[str] | None = None,
              head_batch: int | None = None) -> torch.Tensor:
        """L2-normalised embeddings [n, E] (float32, CPU) of images of the dataset: with ``masks``
        (one per image, read by masked variants) any image it reads, those outside its groups (edit
        grids) included; without, images of its groups (masks from the groups). Grids: the head on
        the backbone's tokens (in batches of ``head_batch``, default this embedder's), or the
        backbone's pooled output without a head; rows: the encoder's own embeddings."""
        relpaths = list(relpaths)
        if self.layout == "rows":
            masks = self._masks_of(relpaths) if masks is None else list(masks)
            return torch.from_numpy(self._row_embed(relpaths, masks, variant).astype(np.float32))
        if masks is None or not relpaths:
            return self._grid_embed(relpaths, variant, None, head_batch)
        own = self.owners()
        known = [i for i, r in enumerate(relpaths) if r in own]
        rest = [i for i, r in enumerate(relpaths) if r not in own]
        parts = []
        if known:       # from the group caches
            parts.append((known, self._grid_embed([relpaths[i] for i in known], variant, None, head_batch)))
        if rest:        # outside every group: kept once computed
            parts.append((rest, torch.from_numpy(self._outside([relpaths[i] for i in rest],
                                                               [masks[i] for i in rest], variant))))
        out = torch.full((len(relpaths), parts[0][1].shape[1]), float("nan"))
        for idx, e in parts:
            out[idx] = e
        return out

    def _grid_embed(self, relpaths: list[str], variant: str, masks: Sequence[str] | None,
                    head_batch: int | None) -> torch.Tensor:
        """The head on the tokens of ``relpaths``, or their pooled outputs (grids layout)."""
        if self.head is None:
            return F.normalize(self.pooled(relpaths, variant, masks).float(), dim=-1)
        was = self.head.training
        self.head.eval()
        p = next(self.head.parameters())
        step = head_batch or self.head_batch
        outs = []
        try:
            for i in range(0, len(relpaths), step):
                part_masks = None if masks is None else list(masks)[i:i + step]
                tok = self._rows(relpaths[i:i + step], variant, "tokens", part_masks)
                outs.append(self.head(tok.to(device=p.device, dtype=p.dtype)).float().cpu())
        finally:
            self.head.train(was)
        if not outs:
            return torch.zeros(0, self.head.out_dim)
        return F.normalize(torch.cat(outs), dim=-1)

    def _outside(self, rels: list[str], masks: list[str], variant: str) -> np.ndarray:
        """Embeddings of images outside every group, each computed once per variant: one cache
        over exactly the new images (built whole before the head reads it in batches)."""
        memo = self._outside_rows.setdefault(variant, {})
        todo = [i for i, r in enumerate(rels) if r not in memo]
        if todo:
            uniq = list(dict.fromkeys(rels[i] for i in todo))
            mk = {rels[i]: masks[i] for i in todo}
            um = [mk[u] for u in uniq]
            if self.use_cache and self.head is not None and self._cached_tokens:
                self.pooled(uniq, variant, masks=um)     # one cache over exactly these images, then read
            for u, v in zip(uniq, self._grid_embed(uniq, variant, um, OUTSIDE_HEAD_BATCH).numpy()):
                memo[u] = v
        return np.stack([memo[r] for r in rels])

    def _row_embed(self, rels: Sequence[str], masks: Sequence[str], variant: str) -> np.ndarray:
        """Rows ``[n, D]`` (L2-normalised) of ``rels`` with their ``masks``, computing the missing ones."""
        return embed(self.encoder, dataset_refs(self.data, list(rels), list(masks)), variant, self.store,
                     scope=self.scope, batch_size=self.batch_size, progress=self.progress)

    def embed_refs(self, refs: Sequence[ImageRef], variant: str = "full", batch_size: int | None = None,
                   desc: str | None = None) -> np.ndarray:
        """L2-normalised embeddings ``[n, D]`` (float32) of any images, by ``encoder.embed`` on each
        (``refs``: :func:`~.embed.file_refs` of image files, keyed by content, or
        :func:`~.embed.memory_refs` of images in memory), kept in this embedder's rows (rows
        layout) or in memory for its lifetime (grids layout, whose caches hold dataset images)."""
        if self.head is not None and self.head is not getattr(self.encoder, "head", None):
            raise ValueError(f"Embedder {self.name!r}: its head is not its encoder's, so encoder.embed would "
                             f"not use it; make the encoder with load_encoder('nearid', head=..., backbone=...)")
        if self.layout == "rows":
            store = self.store
        else:
            self._ref_store = self._ref_store if self._ref_store is not None else FeatureStore()
            store = self._ref_store
        return embed(self.encoder, list(refs), variant, store, batch_size=batch_size or self.batch_size,
                     progress=self.progress, desc=desc)
