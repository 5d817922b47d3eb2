"""Embeddings of dataset images from cached frozen-backbone features (NearID training and evaluation).

Images are grouped (``"positives@<split>"``, ``"dist:<source>@<split>"``, ``"mtg@<split>"``) and
every group gets its own :class:`~nearid_lib.features.TokenCache` per variant. Training and
evaluation therefore share the same caches, and a notebook that only needs the test split of one
source only builds the groups it touches. ``variant="fg"`` blacks the background out with the
object mask (a distractor uses the mask of the view it was inpainted into; an MTG image uses its
object mask)::

    cfg = get_profile("mini")
    enc, _ = load_encoder("efficientnet-lite0")                 # frozen backbone
    emb = Embedder(enc, data, profile=cfg)                      # frozen pooled output (the GAP baseline)
    emb = Embedder(enc, data, head=my_map_head, profile=cfg)    # backbone tokens -> trained head
    emb = Embedder(load_encoder("nearid", checkpoint=ckpt)[0], data, profile=cfg)  # same, from a ckpt
    emb = Embedder(enc, data)                                   # no profile: cache/ folder, one process
    e = emb.embed(relpaths, variant="full")                     # [n, E], L2-normalised

Every read is :func:`nearid_lib.features.embed` (payloads ``tokens`` and ``pooled``) over the
embedder's :class:`~nearid_lib.features.FeatureStore` (``emb.store``), whose layouts
(:mod:`nearid_lib.features.layouts`) hold the grids. Where tokens live follows the profile's
``train.token_store``: ``"cache"`` (smoke, mini) keeps them in each group's float16
:class:`TokenCache` (:class:`~nearid_lib.features.layouts.GroupArrays`); a codec (``"int8"`` in
paper) reads and fills the sharded store that training fills
(:func:`~nearid_lib.nearid.stream.open_train_store`: one store per backbone, dataset and codec,
each grid encoded once whichever job needs it first; :class:`~nearid_lib.features.layouts.ShardGrids`),
and the group caches keep only the pooled outputs. Embeddings from a store grid are the head on
the decoded grid, whether it was read or just computed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Sequence

import torch
import torch.nn.functional as F

from ..data.groups import group_items, image_groups
from ..features import FeatureStore, TokenCache, dataset_refs, dataset_scope, embed
from ..features.layouts import GroupArrays
from ..paths import cache_dir
from .stream import StreamFeatures, open_train_store

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["Embedder"]

class Embedder:
    """L2-normalised embeddings of dataset images, from cached frozen-backbone features.

    Args:
        encoder: from :func:`nearid_lib.models.load_encoder`. A ``NearIDEncoder`` (backbone + head)
            pools its backbone's cached tokens with its head; a plain backbone gives its own pooled
            output (frozen baseline: EfficientNet GAP, SigLIP's MAP head, CLIP/DINO CLS), unless
            ``head`` is given.
        data: the :class:`~nearid_lib.data.NearIDData` whose images are embedded.
        head: optional :class:`~nearid_lib.models.MAPHead` applied to the backbone's tokens.
        profile: the resolved :class:`~nearid_lib.config.Profile` (``get_profile(name)``, or a
            notebook's ``run.cfg``) the defaults below come from, and whose name selects the
            default cache folder (``cache_dir(profile.name) / "features"``). None: the defaults
            of no profile (``cache_dir() / "features"``, ``token_store="cache"``, one worker).
        use_cache: False runs the backbone on the images at every call (slow; for checks).
        store_tokens: keep the tokens in the cache (default: when the backbone has tokens; the
            cache key includes it, so keep it the same everywhere to share caches).
        cache_root: explicit cache folder (tests).
        token_store: ``"cache"`` or a codec of the sharded store (``"int8"``...); default: the
            profile's ``train.token_store`` (``"cache"`` without a profile).
        workers: processes :meth:`build` uses; default: the profile's ``runtime.workers`` (1
            without a profile).
    """

    def __init__(self, encoder, data: NearIDData, head=None, profile: Profile | None = None, use_cache: bool = True,
                 store_tokens: bool | None = None, batch_size: int = 64, cache_root=None,
                 progress: bool = True, head_batch: int = 512, token_store: str | None = None,
                 workers: int | None = None):
        self.encoder = encoder
        self.backbone = getattr(encoder, "backbone", encoder)
        # a NearIDEncoder's head runs on cached tokens; without tokens (store_tokens=False: its
        # embeddings come whole from its own forward, e.g. the released model's float path) it is not taken
        if head is None and store_tokens is not False and hasattr(encoder, "head") and hasattr(encoder, "backbone"):
            head = encoder.head
        self.head = head
        if isinstance(profile, str):
            raise TypeError(f"Embedder(profile={profile!r}): pass the resolved profile, "
                            f"nearid_lib.config.get_profile({profile!r}), or None for the defaults")
        self.cfg = profile
        self.profile = profile.name if profile is not None else None    # names the cache folder
        self.data, self.use_cache = data, use_cache
        self.batch_size, self.cache_root, self.progress, self.head_batch = batch_size, cache_root, progress, head_batch
        has_tokens = int(getattr(self.backbone, "n_tokens", 0) or 0) > 0
        self.store_tokens = has_tokens if store_tokens is None else bool(store_tokens)
        if head is not None and not self.store_tokens:
            raise ValueError("a head needs the backbone's tokens: store_tokens must be True")
        if token_store is None:
            token_store = profile.train.token_store if profile is not None else "cache"
        self.token_store = str(token_store)
        if workers is None:
            workers = profile.runtime.workers if profile is not None else 1
        self.workers = int(workers)
        self._stream = None                                 # StreamFeatures over the shared store
        # where the grids live: group caches (pooled, and tokens unless a sharded store holds them)
        self.arrays = GroupArrays(self.backbone, data, image_groups(data), lambda g: group_items(data, g),
                                  self._cache_kw(), progress=progress,
                                  tune_malloc=profile.runtime.tune_malloc if profile is not None else True)
        layouts = {"pooled": self.arrays}
        if self._cached_tokens:
            layouts["tokens"] = self.arrays
        self.store = FeatureStore(layouts=layouts if use_cache else None)   # uncached: rows in memory
        self.scope = dataset_scope(data)

    # -- caches
    @property
    def _caches(self) -> dict[tuple[str, str], TokenCache]:
        """``(variant, group) -> TokenCache`` of the caches loaded so far."""
        return self.arrays.caches

    def _owners(self) -> dict[str, tuple[str, str]]:
        return self.arrays.owners()

    def cache(self, group: str, variant: str = "full") -> TokenCache:
        """The :class:`TokenCache` of one image group and variant (built on first use)."""
        return self.arrays.cache(group, variant)

    @property
    def _cached_tokens(self) -> bool:
        """Whether the group caches hold tokens (not when they live in the sharded store)."""
        return self.store_tokens and self.token_store == "cache"

    def _cache_kw(self) -> dict[str, Any]:
        """Where and how a group cache of this embedder is built (:meth:`TokenCache.build_or_load`)."""
        return dict(profile=self.profile, cache_root=self.cache_root, batch_size=self.batch_size,
                    store_tokens=self._cached_tokens)

    def complete(self, group: str, variant: str = "full") -> bool:
        """Whether the cache of ``group`` / ``variant`` is built (on disk or loaded)."""
        return self.arrays.complete(group, variant)

    def prefetch(self, groups: Iterable[str], variants: Sequence[str] = ("full",),
                 extra: tuple[Sequence[str], Sequence[str]] | None = None) -> None:
        """Make every image of ``groups`` ready for each variant before a protocol scores them: the
        caches of :meth:`build`. ``extra`` ``(relpaths, masks)`` are images outside the groups (the
        edit grids, full image) that an embedder without caches embeds in the same pass; this one
        embeds them when they are scored."""
        self.build(groups, variants)

    def build(self, groups: Iterable[str] | None = None, variants: Sequence[str] = ("full",),
              workers: int | None = None) -> None:
        """Build (or load) the caches of ``groups`` (default: all) for each variant.

        ``workers`` (default this embedder's ``workers``; tiny backbones: 1 unless given): build the
        missing caches in that many spawned processes, largest first, each with this process's
        torch thread count. A cache's bytes do not depend on which process builds it (one image
        list, the same batches), so results are the same as a serial build. With a sharded token
        store, the store gets every grid of ``groups`` x ``variants`` it lacks (in this process,
        resumable) and the group caches only the pooled outputs."""
        groups = list(image_groups(self.data) if groups is None else groups)
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
    def stream(self):
        """The :class:`~nearid_lib.nearid.stream.StreamFeatures` over the sharded token store that
        training fills (same folder: backbone, dataset and codec); this process writes its own shards."""
        if self._stream is None:
            store = open_train_store(self.backbone, self.data, self.cache_root or cache_dir(self.profile),
                                     dtype=self.token_store)
            cuda = getattr(self.backbone, "device", torch.device("cpu")).type == "cuda"
            self._stream = StreamFeatures(self.backbone, self.data, store=store, batch_size=self.batch_size,
                                          amp_dtype=torch.bfloat16 if cuda else None)
        return self._stream

    def _rows(self, relpaths: Sequence[str], variant: str, payload: str,
              masks: Sequence[str] | None = None) -> torch.Tensor:
        """:func:`~nearid_lib.features.embed` of dataset images (``masks``: images outside the
        dataset's groups too, such as edit grids) for ``payload`` ``tokens`` / ``pooled``."""
        relpaths = list(relpaths)
        if masks is None:
            own = self._owners()
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

    @torch.no_grad()
    def embed(self, relpaths: Sequence[str], variant: str = "full", masks: Sequence[str] | None = None,
              head_batch: int | None = None) -> torch.Tensor:
        """L2-normalised embeddings [n, E] (float32, CPU) of dataset images: the head on the
        backbone's tokens (in batches of ``head_batch``, default this embedder's), or the
        backbone's pooled output without a head. ``masks``: as in :meth:`tokens`."""
        relpaths = list(relpaths)
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
