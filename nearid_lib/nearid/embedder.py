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

Where tokens live follows the profile's ``train.token_store``: ``"cache"`` (smoke, mini) keeps
them in each group's float16 :class:`TokenCache`; a codec (``"int8"`` in paper) reads and fills
the sharded store that training fills (:func:`~nearid_lib.nearid.stream.open_train_store`: one
store per backbone, dataset and codec, each grid encoded once whichever job needs it first), and
the group caches keep only the pooled outputs. Embeddings from a store grid are the head on the
decoded grid, whether it was read or just computed.
"""
from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..features import TokenCache, dataset_refs, variant_images

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["Embedder", "image_groups", "group_items", "VIEWS", "SPLITS"]

VIEWS = (1, 2, 3)

SPLITS = ("train", "val", "test")


def image_groups(data: NearIDData, splits: Sequence[str] = SPLITS, sources: Sequence[str] | None = None,
                 mtg: bool = True) -> list[str]:
    """Image groups ``<kind>@<split>``: kind = ``positives``, ``dist:<source>`` (default: every
    source), ``mtg`` (if present). One cache per group and variant, so training only encodes the
    train split of the training sources, and evaluation only val/test."""
    kinds = ["positives"] + [f"dist:{s}" for s in (data.sources if sources is None else sources)]
    if mtg and data.mtg is not None and len(data.mtg):
        kinds.append("mtg")
    return [f"{k}@{sp}" for k in kinds for sp in splits]


def group_items(data: NearIDData, group: str) -> tuple[list[str], list[str]]:
    """``(relpaths, masks)`` of every image in ``group`` = ``<kind>@<split>`` (table order, no empties).

    Distractor ``nimg_k`` uses ``mask_k`` (it is inpainted into that view's background and mask);
    MTG originals and their part edits use the image's object mask."""
    group, _, split = group.partition("@")
    if split not in SPLITS:
        raise KeyError(f"image group {group!r}: split {split!r} must be one of {SPLITS} (name kind@split)")
    sel = (data.positives["split"] == split).to_numpy()
    pos = data.positives[sel]
    rels: list[str] = []
    masks: list[str] = []
    if group == "positives":
        for k in VIEWS:
            ok = pos[f"img{k}"] != ""
            rels += pos.loc[ok, f"img{k}"].tolist()
            masks += pos.loc[ok, f"mask{k}"].tolist()
    elif group.startswith("dist:"):
        src = group[5:]
        if src not in data.distractors:
            raise KeyError(f"unknown distractor source {src!r}; valid: {', '.join(data.distractors)}")
        d = data.distractors[src][sel]
        for k in VIEWS:
            ok = (d[f"nimg{k}"] != "").to_numpy()
            rels += d.loc[ok, f"nimg{k}"].tolist()
            masks += pos.loc[ok, f"mask{k}"].tolist()
    elif group == "mtg":
        if data.mtg is None:
            raise KeyError("dataset has no mtg.csv")
        m = data.mtg[data.mtg["split"] == split]
        for j in (1, 2):
            for kind in ("original", "inpainted"):
                rels += m[f"image_{j}_{kind}"].tolist()
                masks += m[f"image_{j}_object_mask"].tolist()
    else:
        raise KeyError(f"unknown image group {group!r}; valid: positives, dist:<source>, mtg")
    return rels, masks


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
        if head is None and hasattr(encoder, "head") and hasattr(encoder, "backbone"):
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
        self._caches: dict[tuple[str, str], Any] = {}      # (variant, group) -> TokenCache
        self._index: dict[str, dict[str, tuple[str, int]]] = {}   # variant -> relpath -> (group, row)
        self._owner: dict[str, tuple[str, str]] | None = None     # relpath -> (group, mask)

    # -- caches
    def _owners(self) -> dict[str, tuple[str, str]]:
        if self._owner is None:
            own: dict[str, tuple[str, str]] = {}
            for g in image_groups(self.data):
                for r, m in zip(*group_items(self.data, g)):
                    own.setdefault(r, (g, m))
            self._owner = own
        return self._owner

    def cache(self, group: str, variant: str = "full"):
        """The :class:`TokenCache` of one image group and variant (built on first use)."""
        key = (variant, group)
        if key not in self._caches:
            rels, masks = group_items(self.data, group)
            c = TokenCache.build_or_load(self.backbone, rels, masks=masks, variant=variant, data=self.data,
                                         progress=self.progress, **self._cache_kw())
            self._caches[key] = c
            idx = self._index.setdefault(variant, {})
            for r, row in c.index.items():
                idx.setdefault(r, (group, row))
        return self._caches[key]

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
        if (variant, group) in self._caches:
            return True
        rels, masks = group_items(self.data, group)
        kw = self._cache_kw()
        kw.pop("batch_size")
        return TokenCache.complete(self.backbone, rels, masks=masks, variant=variant, data=self.data, **kw)

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
        pairs = [(v, g) for v in variants for g in groups]
        if self.use_cache and self.store_tokens and self.token_store != "cache":
            items: dict[str, str] = {}
            for g in groups:
                for r, m in zip(*group_items(self.data, g)):
                    items.setdefault(r, m)
            self.stream().prefill(items.items(), variants=variants, progress=self.progress)
        if workers is None:
            workers = 1 if getattr(self.backbone, "tiny", False) else self.workers
        if workers > 1 and self.use_cache:
            todo = [(v, g) for v, g in pairs if not self.complete(g, v)]
            if len(todo) > 1:
                self._build_in_workers(todo, workers)
        for v, g in pairs:
            self.cache(g, v)

    def _build_in_workers(self, todo: list[tuple[str, str]], workers: int) -> None:
        todo = sorted(todo, key=lambda vg: -len(group_items(self.data, vg[1])[0]))
        n = min(workers, len(todo))
        print(f"building {len(todo)} feature caches in {n} worker processes", flush=True)
        from tqdm.auto import tqdm

        with ProcessPoolExecutor(n, mp_context=get_context("spawn")) as ex:
            tune = self.cfg.runtime.tune_malloc if self.cfg is not None else True
            futs = [ex.submit(_cache_in_worker, self.backbone, str(self.data.root), g, v, self._cache_kw(),
                              torch.get_num_threads(), tune) for v, g in todo]
            for f in tqdm(as_completed(futs), total=len(futs), desc="feature caches", unit="cache",
                          disable=not self.progress):
                f.result()                  # a failed build raises here, with the worker's error

    def _locate(self, relpaths: Sequence[str], variant: str) -> list[tuple[str, int]]:
        idx = self._index.setdefault(variant, {})
        out = []
        for r in relpaths:
            if r not in idx:
                own = self._owners().get(r)
                if own is None:
                    raise KeyError(f"{r!r} is not an image of the dataset at {self.data.root}")
                self.cache(own[0], variant)
            out.append(idx[r])
        return out

    # -- features
    def tokens(self, relpaths: Sequence[str], variant: str = "full") -> torch.Tensor:
        """Backbone tokens [n, N, D] (float32, CPU) of ``relpaths`` (from the caches or the store)."""
        if self.token_store != "cache":
            return self._store_tokens(list(relpaths), variant).float().cpu()
        return self._gather(relpaths, variant, "tokens")

    def stream(self):
        """The :class:`~nearid_lib.nearid.stream.StreamFeatures` over the sharded token store that
        training fills (same folder: backbone, dataset and codec); this process writes its own shards."""
        if self._stream is None:
            from ..paths import cache_dir
            from .stream import StreamFeatures, open_train_store

            store = open_train_store(self.backbone, self.data, self.cache_root or cache_dir(self.profile),
                                     dtype=self.token_store)
            cuda = getattr(self.backbone, "device", torch.device("cpu")).type == "cuda"
            self._stream = StreamFeatures(self.backbone, self.data, store=store, batch_size=self.batch_size,
                                          amp_dtype=torch.bfloat16 if cuda else None)
        return self._stream

    def _store_tokens(self, relpaths: list[str], variant: str) -> torch.Tensor:
        if not self.store_tokens:
            raise ValueError("this Embedder was made with store_tokens=False: it reads no tokens")
        if variant not in ("full", "fg"):
            raise ValueError(f"the token store holds the variants full and fg, not {variant!r}")
        own = self._owners()
        missing = [r for r in relpaths if r not in own]
        if missing:
            raise KeyError(f"{missing[0]!r} is not an image of the dataset at {self.data.root}")
        masks = [own[r][1] for r in relpaths]
        fg = np.full(len(relpaths), variant == "fg")
        return self.stream().tokens(relpaths, masks, fg, np.random.default_rng(0))

    def pooled(self, relpaths: Sequence[str], variant: str = "full") -> torch.Tensor:
        """The backbone's own pooled outputs [n, E] (not normalised)."""
        return self._gather(relpaths, variant, "pooled")

    def _gather(self, relpaths, variant, what):
        loc = self._locate(relpaths, variant)
        names = np.array([g for g, _ in loc], dtype=object)
        rows = np.fromiter((r for _, r in loc), dtype=np.int64, count=len(loc))
        out = None
        for g in sorted(set(names)):
            sel = np.flatnonzero(names == g)
            c = self._caches[(variant, g)]
            t = c.tokens(rows[sel]) if what == "tokens" else c.pooled(rows[sel])
            if out is None:
                out = torch.empty((len(relpaths),) + tuple(t.shape[1:]), dtype=t.dtype)
            out[torch.from_numpy(sel)] = t
        if out is None:
            dim = (self.backbone.n_tokens, self.backbone.token_dim) if what == "tokens" else (self.backbone.embed_dim,)
            out = torch.zeros((0,) + dim)
        return out

    @torch.no_grad()
    def embed(self, relpaths: Sequence[str], variant: str = "full") -> torch.Tensor:
        """L2-normalised embeddings [n, E] (float32, CPU) of dataset images."""
        relpaths = list(relpaths)
        if not self.use_cache:
            return self._embed_uncached(relpaths, variant)
        if self.head is None:
            return F.normalize(self.pooled(relpaths, variant).float(), dim=-1)
        was = self.head.training
        self.head.eval()
        p = next(self.head.parameters())
        outs = []
        try:
            for i in range(0, len(relpaths), self.head_batch):
                part = relpaths[i:i + self.head_batch]
                tok = self._store_tokens(part, variant) if self.token_store != "cache" else self.tokens(part, variant)
                outs.append(self.head(tok.to(device=p.device, dtype=p.dtype)).float().cpu())
        finally:
            self.head.train(was)
        if not outs:
            return torch.zeros(0, self.head.out_dim)
        return F.normalize(torch.cat(outs), dim=-1)

    def _embed_uncached(self, relpaths: list[str], variant: str) -> torch.Tensor:
        own = self._owners()
        refs = dataset_refs(self.data, relpaths, [own.get(r, (None, ""))[1] for r in relpaths])
        outs = []
        for i in range(0, len(refs), self.batch_size):
            imgs = variant_images(refs[i:i + self.batch_size], variant)     # the one image path
            pix = self.backbone.preprocess.batch(imgs)
            with torch.no_grad():
                out = self.backbone(pix)
                if self.head is None:
                    e = out.pooled
                else:
                    was = self.head.training
                    self.head.eval()
                    p = next(self.head.parameters())
                    e = self.head(out.tokens.to(device=p.device, dtype=p.dtype))
                    self.head.train(was)
            outs.append(e.float().cpu())
        if not outs:
            return torch.zeros(0, self.backbone.embed_dim if self.head is None else self.head.out_dim)
        return F.normalize(torch.cat(outs), dim=-1)


def _cache_in_worker(backbone, root: str, group: str, variant: str, kw: dict[str, Any], threads: int,
                     tune_malloc: bool = True) -> str:
    """Build one cache in a worker process (:meth:`Embedder.build`: what :meth:`Embedder.cache`
    builds, ``kw`` = its ``_cache_kw()``); returns the group."""
    from ..data import load_nearid
    from ..run import set_torch_threads

    set_torch_threads(threads, tune_malloc)
    data = load_nearid(root)
    rels, masks = group_items(data, group)
    TokenCache.build_or_load(backbone, rels, masks=masks, variant=variant, data=data, progress=False, **kw)
    return group
