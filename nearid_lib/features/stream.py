"""Paper-scale training inputs: the frozen backbone streamed in bf16, its token grids kept in a
sharded compact store (:class:`~nearid_lib.features.shards.ShardedTokenStore`) the first time a
step asks for them: NearID training's paper-scale inputs (a drop-in for
:class:`~nearid_lib.nearid.train_inputs.TrainFeatures`), and the layout an
:class:`~nearid_lib.features.embedder.Embedder` reads token grids from when a profile keeps them in a
sharded store (:class:`~nearid_lib.features.layouts.ShardGrids`)::

    feats = StreamFeatures(backbone, data, store=open_train_store(backbone, data, cache_root))
    tok = feats.tokens(rels, masks, fg, rng)      # float32 [S, N, D], slot i = variant fg[i] of rels[i]

Why a hybrid (numbers in ``benchmarks/README.md``): the paper's run touches every training
image ~5-40 times over 11 epochs with a random fg/full choice per slot, so streaming the backbone at
every step (the authors' recipe) costs ~4.6x more backbone FLOPs than encoding each (image, variant)
once, while a preallocated float16 cache of both variants is ~800 GB. Lazily filling an int8 store
computes each (image, variant) at most once, never computes what training never reads, halves the
disk of float16 (0.84 MB per 729 x 1152 grid) and degrades to pure streaming past a disk budget
(by default the reserve of free space its file system keeps, :mod:`~nearid_lib.features.disk`).

Modes:
* ``store`` given: the store is a layout of a :class:`~nearid_lib.features.FeatureStore`
  (``feats.features``, :class:`~nearid_lib.features.layouts.ShardGrids`) and each variant's slots go
  through :func:`~nearid_lib.features.embed`: hits are read from the store (uint8 records decoded
  on the backbone's device), misses run the backbone and are written (up to the store's budget;
  past it, they are streamed). No pixel augmentation (the stored grid is reused across steps);
  token-level augmentations stay in the head/trainer.
* ``store=None``: pure streaming, every slot runs the backbone; ``augment(img, rng)`` may then
  apply per-slot pixel augmentations exactly as the paper does.

Role-aware masking: slot i is encoded from ``apply_variant(image, mask, "fg" if fg[i] else "full")``
and keyed by ``(relpath, variant)``, so the fg decision of a slot selects that image's fg grid
(tested in ``tests/test_nearid_stream.py``). Which images a profile's training and evaluation read
(what :mod:`nearid_lib.nearid.prefill_step` fills) is NearID's: ``prefill_step.train_items`` / ``eval_items``.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from ..runtime.code_closure import closure_fingerprint
from .disk import STORES, ReservedTokenStore, reserve_bytes
from .embed import dataset_refs, embed
from .layouts import ShardGrids
from .shards import ShardedTokenStore
from .store import FeatureStore
from .variants import apply_variant

__all__ = ["StreamFeatures", "open_train_store", "store_dir", "store_prefix", "store_code", "autocast_for", "process_writer",
           "variant_image", "VARIANTS"]

VARIANTS = ("full", "fg")


def autocast_for(device: torch.device, dtype: torch.dtype | None):
    """bf16/fp16 autocast on CUDA (the streamed backbone), nothing elsewhere or when dtype is None."""
    if dtype is None or device.type != "cuda":
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=dtype)


class StreamFeatures:
    """Backbone tokens for a list of (relpath, mask, fg) slots: from the store, else the backbone.

    Args:
        encoder: the frozen backbone (or an encoder with ``.backbone``).
        data: anything with ``image(relpath) -> PIL`` and ``mask(relpath) -> bool [H, W]``.
        store: a writable :class:`ShardedTokenStore` (None: stream every slot).
        batch_size: images per backbone forward.
        amp_dtype: autocast dtype of the streamed backbone on CUDA (default bf16; None = off).
        augment: ``augment(img, rng) -> img`` per slot, only without a store.
        out_dtype: dtype of the returned tokens.
    """

    def __init__(self, encoder, data, store: ShardedTokenStore | None = None, batch_size: int = 64,
                 amp_dtype: torch.dtype | None = torch.bfloat16,
                 augment: Callable | None = None, out_dtype: torch.dtype = torch.float32):
        self.backbone = getattr(encoder, "backbone", encoder)
        self.data, self.store, self.batch_size = data, store, int(batch_size)
        self.amp_dtype, self.augment, self.out_dtype = amp_dtype, augment, out_dtype
        if store is not None and augment is not None:
            raise ValueError("pixel augmentations change every step: a stored grid could not be reused "
                             "(use store=None to stream with augmentations)")
        if store is not None and (store.n_tokens, store.token_dim) != (self.n_tokens, self.token_dim):
            raise ValueError(f"store grids [{store.n_tokens}, {store.token_dim}] do not match the backbone's "
                             f"[{self.n_tokens}, {self.token_dim}]")
        self.stats = {"slots": 0, "hits": 0, "forwards": 0, "written": 0, "read_s": 0.0, "backbone_s": 0.0}
        # the store as a layout of a FeatureStore: what tokens() and an Embedder read through embed()
        self.features = FeatureStore(layouts={"tokens": ShardGrids(self)}) if store is not None else None

    @property
    def n_tokens(self) -> int:
        return int(self.backbone.n_tokens)

    @property
    def token_dim(self) -> int:
        return int(self.backbone.token_dim)

    @property
    def device(self) -> torch.device:
        return next(self.backbone.parameters()).device

    # ------------------------------------------------------------------ the seam
    def tokens(self, rels: Sequence[str], masks: Sequence[str], fg: np.ndarray,
               rng: np.random.Generator) -> torch.Tensor:
        """Tokens [S, N, D] (``out_dtype``, on the backbone's device): slot i is the ``fg`` variant
        of ``rels[i]`` (background blacked out with ``masks[i]``) when ``fg[i]``, else the full image."""
        fg = np.asarray(fg, dtype=bool)
        if not len(rels) == len(masks) == len(fg):
            raise ValueError(f"rels, masks, fg differ in length: {len(rels)}, {len(masks)}, {len(fg)}")
        if self.store is not None:
            return self._from_store(list(map(str, rels)), list(masks), fg)
        # pure streaming: one forward per distinct image and variant; with augmentations every slot
        # draws its own
        keys = [(str(r), VARIANTS[int(f)]) for r, f in zip(rels, fg)]
        first: dict = {}
        uniq, inv = [], []
        for i in range(len(keys)):
            k = keys[i] if self.augment is None else i
            if k not in first:
                first[k] = len(uniq)
                uniq.append(i)
            inv.append(first[k])
        uniq, inv = np.asarray(uniq, dtype=np.int64), np.asarray(inv, dtype=np.int64)
        tok = self.encode([rels[i] for i in uniq], [masks[i] for i in uniq], fg[uniq], rng)
        self.stats["slots"] += len(keys)
        return tok[torch.from_numpy(inv).to(tok.device)].to(self.out_dtype)

    def _from_store(self, rels: list[str], masks: list[str], fg: np.ndarray) -> torch.Tensor:
        """Slots through the one feature path: :func:`~nearid_lib.features.embed` of each variant's
        slots over :attr:`features` (grids read from the store, the missing ones encoded and
        written; a step sees the store's precision whether a grid was read or just computed)."""
        out = torch.empty(len(rels), self.n_tokens, self.token_dim, dtype=self.out_dtype, device=self.device)
        for variant in VARIANTS:
            sel = np.flatnonzero(fg == (variant == "fg"))
            if len(sel):
                refs = dataset_refs(self.data, [rels[i] for i in sel], [masks[i] for i in sel])
                out[torch.from_numpy(sel).to(self.device)] = embed(
                    self.backbone, refs, variant, self.features, payload="tokens", batch_size=self.batch_size,
                    progress=False, tensor=True, device=self.device).to(self.out_dtype)
        return out

    # ------------------------------------------------------------------ the backbone
    def _image(self, rel: str, mask: str, fg: bool, rng) -> "object":
        im = variant_image(self.data, rel, mask, fg)
        if self.augment is not None:
            im = self.augment(im, rng)
        return im

    def encode(self, rels: Sequence[str], masks: Sequence[str], fg: np.ndarray,
               rng: np.random.Generator | None = None, images: Sequence | None = None) -> torch.Tensor:
        """Run the backbone (no grad, autocast on CUDA) on the role-masked images: float32 [S, N, D].
        ``images``: those images already decoded and masked (:func:`variant_image`, e.g. by
        DataLoader workers), else they are read here."""
        t0 = time.perf_counter()
        bb, outs = self.backbone, []
        for b0 in range(0, len(rels), self.batch_size):
            sl = range(b0, min(len(rels), b0 + self.batch_size))
            imgs = ([images[i] for i in sl] if images is not None
                    else [self._image(rels[i], masks[i], bool(fg[i]), rng) for i in sl])
            with torch.no_grad(), autocast_for(self.device, self.amp_dtype):
                outs.append(bb(bb.preprocess.batch(imgs)).tokens.float())
        self.stats["forwards"] += len(rels)
        self.stats["backbone_s"] += time.perf_counter() - t0
        return torch.cat(outs) if outs else torch.empty(0, self.n_tokens, self.token_dim)

    def prefill(self, items: Iterable[tuple[str, str]], variants: Sequence[str] = VARIANTS,
                progress: bool = True, chunk: int | None = None, rank: int = 0, world: int = 1,
                workers: int = 0) -> int:
        """Encode every (relpath, mask) x variant not yet stored, in store order (a killed prefill
        resumes: every chunk is committed). Returns the number of grids written.

        Over several processes (:mod:`nearid_lib.nearid.prefill_step`): grid ``j`` of the whole
        list (items x variants, in order) belongs to rank ``j % world``, so every grid is encoded by
        exactly one rank whatever is already stored. ``workers``: DataLoader processes decoding and
        masking the images (:func:`variant_image`) while the backbone runs (0: in this process)."""
        if self.store is None:
            raise ValueError("prefill needs a store")
        grids = [(r, m, v) for r, m in dict.fromkeys(map(tuple, items)) for v in variants]
        todo = [g for j, g in enumerate(grids) if j % world == rank and (g[0], g[2]) not in self.store]
        chunk = chunk or 4 * self.batch_size
        loader = torch.utils.data.DataLoader(_VariantImages(self.data, todo), batch_size=chunk, shuffle=False,
                                             num_workers=int(workers), collate_fn=_as_list)
        written = 0
        with tqdm(total=len(todo), desc=f"token store [{self.store.dtype}]", unit="img", disable=not progress) as bar:
            for c0, imgs in zip(range(0, len(todo), chunk), loader):
                part = todo[c0:c0 + chunk]
                if self.store.room() <= 0:
                    break
                fg = np.array([v == "fg" for _, _, v in part])
                tok = self.encode([r for r, _, _ in part], [m for _, m, _ in part], fg, images=imgs)
                written += self.store.put([(r, v) for r, _, v in part], tok)
                bar.update(len(part))
        self.stats["written"] += written
        return written


def variant_image(data, rel: str, mask: str, fg: bool):
    """The backbone's input image of a slot: ``rel`` of ``data``, its background blacked out with
    ``mask`` when ``fg``."""
    im = data.image(rel)
    if fg:
        if not mask:
            raise ValueError(f"slot {rel!r} is fg-masked but has no mask")
        im = apply_variant(im, data.mask(mask), "fg")
    return im


class _VariantImages(torch.utils.data.Dataset):
    """``(relpath, mask, variant)`` grids as decoded, masked images (what DataLoader workers make)."""

    def __init__(self, data, grids: Sequence[tuple[str, str, str]]):
        self.data, self.grids = data, list(grids)

    def __len__(self) -> int:
        return len(self.grids)

    def __getitem__(self, i: int):
        r, m, v = self.grids[i]
        return variant_image(self.data, r, m, v == "fg")


def _as_list(batch: list) -> list:
    return batch


def _fingerprint(data) -> str:
    man = Path(getattr(data, "root", "")) / "manifest.json"
    return hashlib.sha1(man.read_bytes()).hexdigest() if man.is_file() else f"root={getattr(data, 'root', None)}"


def store_dir(backbone, data, cache_root: str | Path, dtype: str = "int8") -> Path:
    """``cache_root/shards/<backbone>-<dtype>-<hash>``: the hash covers what determines the store's
    bytes -- the backbone's cache key (weights, dtype, preprocessing, the code of its forward and
    image reading), the codec and feature path (:func:`store_code`), the dataset's manifest -- and
    nothing else: an edit of unrelated library code (training, tables, reports) keeps the store."""
    bb = getattr(backbone, "backbone", backbone)
    h = hashlib.sha1(f"{bb.cache_key()}\0{store_code()}\0{_fingerprint(data)}\0{dtype}".encode()).hexdigest()[:16]
    return Path(cache_root) / STORES / f"{store_prefix(bb.name, dtype)}{h}"


def store_prefix(backbone_name: str, dtype: str) -> str:
    """The start of the folder name of every store of this backbone and dtype (:func:`store_dir`):
    what tells, without the backbone's weights, which folders may be a run's store."""
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in backbone_name)
    return f"{name}-{dtype}-"


def store_code() -> str:
    """Fingerprint of the code between an image and its stored record: the int8 codec
    (:class:`ShardedTokenStore`), its layout and :func:`~nearid_lib.features.embed` with the variants
    (:func:`~nearid_lib.runtime.code_closure.closure_fingerprint`)."""
    return closure_fingerprint(ShardedTokenStore, ShardGrids, embed, apply_variant)


def process_writer(prefix: str = "rank0") -> str:
    """A shard-writer name no other live process uses: ``<prefix>-<host>-p<pid>``. Processes that
    share a store (the ranks of one training, the sweep's workers, an evaluation beside them) each
    append to their own shards; a writer's shards are never appended to by another process."""
    return f"{prefix}-{socket.gethostname()}-p{os.getpid()}"


def open_train_store(backbone, data, cache_root: str | Path, dtype: str = "int8", writer: str | None = None,
                     max_gb: float | None = None, shard_records: int = 1024,
                     keep_free_gb: float | None = None) -> ReservedTokenStore:
    """The writable store of (backbone, dataset, dtype) under ``cache_root`` (created on first use),
    shared by training and evaluation; ``writer`` defaults to :func:`process_writer`.

    The store writes while its file system keeps ``keep_free_gb`` free (None: the default reserve,
    :func:`~.disk.reserve_bytes`; 0: until the disk is full) and at most ``max_gb`` in all; past
    either it stops writing and a grid it lacks is computed by the backbone when read (streaming),
    so a full disk ends the store's growth, not the run."""
    bb = getattr(backbone, "backbone", backbone)
    writer = process_writer() if writer is None else writer
    root = store_dir(bb, data, cache_root, dtype)
    keep = reserve_bytes(root) if keep_free_gb is None else int(keep_free_gb * 1e9)
    return ReservedTokenStore(root, bb.n_tokens, bb.token_dim, dtype, key=root.name, writer=writer,
                              shard_records=shard_records, keep_free=keep,
                              max_bytes=None if max_gb is None else int(max_gb * 1e9))
