"""The on-disk feature cache of a frozen backbone (:class:`TokenCache`); layout and keys in
:mod:`nearid_lib.features`."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from ..runtime.code_closure import closure_fingerprint
from ..io_utils import Manifest, file_lock, write_csv, write_json
from ..paths import cache_dir
from .payloads import ImageRef, backbone_of, encoder_fingerprint, variant_images
from .variants import ImageLoader, MaskLoader, apply_variant, check_variant, default_loaders, needs_mask

__all__ = ["TokenCache", "cache_name", "backbone_of"]


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)[:60]


def _entries(relpaths: Sequence[str], masks: Sequence[str | None] | None) -> list[tuple[str, str]]:
    """Deduplicated (relpath, mask) pairs in first-seen order; one image must keep one mask."""
    if masks is not None and len(masks) != len(relpaths):
        raise ValueError(f"masks has {len(masks)} entries, relpaths has {len(relpaths)}")
    seen: dict[str, str] = {}
    for i, rel in enumerate(relpaths):
        if not isinstance(rel, str) or not rel:
            raise ValueError(f"relpaths[{i}] is empty or not a string: {rel!r}")
        m = masks[i] if masks is not None else None
        m = "" if m is None or (isinstance(m, float) and np.isnan(m)) else str(m)
        if rel in seen and seen[rel] != m:
            raise ValueError(f"image {rel!r} listed with two masks: {seen[rel]!r} and {m!r}")
        seen[rel] = m
    return list(seen.items())


def _fingerprint(root: Path | None, entries: list[tuple[str, str]]) -> str:
    """The dataset's manifest.json if present (it names profile, seed and counts); else file stats."""
    if root is None:
        return "no-root"
    man = root / "manifest.json"
    if man.exists():
        return hashlib.sha1(man.read_bytes()).hexdigest()
    h = hashlib.sha1()
    for rel, _ in entries:
        try:
            st = (root / rel).stat()
            h.update(f"{rel}:{st.st_size}:{st.st_mtime_ns}\n".encode())
        except FileNotFoundError:
            h.update(f"{rel}:missing\n".encode())
    return h.hexdigest()


def cache_name(backbone_key: str, backbone_name: str, variant: str, entries: list[tuple[str, str]],
               fingerprint: str, dtype: str, store_tokens: bool) -> tuple[str, str]:
    """``(folder_name, full_hash)`` for a cache."""
    h = hashlib.sha1()
    for part in (backbone_key, variant, dtype, f"tokens={int(store_tokens)}", fingerprint):
        h.update(part.encode() + b"\0")
    for rel, m in entries:
        h.update(f"{rel}\t{m}\n".encode())
    digest = h.hexdigest()
    return f"{_slug(backbone_name)}-{_slug(variant)}-{digest[:16]}", digest



# ----------------------------------------------------------------------------- the cache
class TokenCache:
    """A built cache (read-only). Use :meth:`build_or_load` to get one."""

    def __init__(self, directory: str | os.PathLike, in_memory: bool = False):
        self.dir = Path(directory)
        meta_path = self.dir / "meta.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{self.dir} is not a complete feature cache (no meta.json)")
        self.meta = json.loads(meta_path.read_text())
        idx = pd.read_csv(self.dir / "index.csv", keep_default_na=False)
        self.relpaths: list[str] = idx["relpath"].astype(str).tolist()
        self.masks: list[str] = idx["mask"].astype(str).tolist()
        self.index: dict[str, int] = dict(zip(self.relpaths, idx["row"].astype(int)))
        mode = None if in_memory else "r"
        self._pooled = np.load(self.dir / "pooled.npy", mmap_mode=mode)
        tok = self.dir / "tokens.npy"
        self._tokens = np.load(tok, mmap_mode=mode) if tok.exists() else None
        if len(self._pooled) != len(self.relpaths):
            raise ValueError(f"{self.dir}: pooled.npy has {len(self._pooled)} rows, index.csv {len(self.relpaths)}")

    # -- properties
    def __len__(self) -> int:
        return len(self.relpaths)

    @property
    def n_tokens(self) -> int:
        return int(self.meta["n_tokens"])

    @property
    def token_dim(self) -> int:
        return int(self.meta["token_dim"])

    @property
    def embed_dim(self) -> int:
        return int(self.meta["embed_dim"])

    @property
    def has_tokens(self) -> bool:
        return self._tokens is not None

    def __repr__(self) -> str:
        return (f"TokenCache({self.dir.name}: {len(self)} images, tokens {self.n_tokens}x{self.token_dim}"
                f"{'' if self.has_tokens else ' (not stored)'}, pooled {self.embed_dim})")

    # -- reading
    def rows(self, relpaths: Iterable[str]) -> np.ndarray:
        """Row numbers of ``relpaths``; a missing one raises naming it."""
        out = []
        for rel in relpaths:
            try:
                out.append(self.index[rel])
            except KeyError:
                raise KeyError(f"{rel!r} is not in feature cache {self.dir.name}") from None
        return np.asarray(out, dtype=np.int64)

    @staticmethod
    def _take(arr: np.ndarray, rows, dtype) -> torch.Tensor:
        rows = np.asarray(rows.cpu() if isinstance(rows, torch.Tensor) else rows, dtype=np.int64)
        flat = rows.reshape(-1)
        # memmaps read fastest in ascending order; undo the sort afterwards
        order = np.argsort(flat, kind="stable")
        got = np.empty((len(flat),) + arr.shape[1:], dtype=arr.dtype)
        got[order] = arr[flat[order]]
        return torch.from_numpy(got.reshape(rows.shape + arr.shape[1:])).to(dtype)

    def tokens(self, rows, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Tokens for integer ``rows`` (any shape S): [*S, n_tokens, token_dim]."""
        if self._tokens is None:
            raise ValueError(f"feature cache {self.dir.name} was built with store_tokens=False")
        return self._take(self._tokens, rows, dtype)

    def pooled(self, rows, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The backbone's pooled outputs for ``rows`` (any shape S): [*S, embed_dim] (not normalised)."""
        return self._take(self._pooled, rows, dtype)

    def tokens_for(self, relpaths: Sequence[str], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.tokens(self.rows(relpaths), dtype)

    def pooled_for(self, relpaths: Sequence[str], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.pooled(self.rows(relpaths), dtype)

    # -- building
    @classmethod
    def build_or_load(cls, encoder, relpaths: Sequence[str], root: str | os.PathLike | None = None,
                      masks: Sequence[str | None] | None = None, variant: str = "full",
                      cache_root: str | os.PathLike | None = None, profile: str | None = None,
                      batch_size: int = 64, chunk_size: int = 1024, data: Any = None,
                      loader: ImageLoader | None = None, mask_loader: MaskLoader | None = None,
                      store_tokens: bool = True, dtype: str = "float16", progress: bool = True,
                      in_memory: bool = False, max_chunks: int | None = None) -> "TokenCache":
        """Load the cache for (encoder, preprocessing, variant, image list), building it if needed.

        Args:
            encoder: an :class:`~nearid_lib.models.Encoder` (a NearID encoder caches its backbone).
            relpaths: image paths relative to the dataset root (duplicates are stored once).
            root / data / loader: where images come from: ``loader(relpath) -> PIL`` wins, then
                ``data.image`` (NearIDData), then PNG files under ``root``.
            masks: mask relpaths aligned with ``relpaths`` (needed by ``variant="fg"``).
            cache_root: parent folder; default ``cache_dir(profile) / "features"``.
            chunk_size: images per resumable chunk; ``max_chunks`` stops after that many new
                chunks (for tests of resumption), returning None.
            store_tokens: False keeps only the pooled outputs (evaluation of global embeddings).
        """
        entries, bb, root_p, name, digest, parent = _target(encoder, relpaths, root, masks, variant, cache_root,
                                                            profile, data, dtype, store_tokens)
        final = parent / name
        if (final / "meta.json").exists():
            return cls(final, in_memory=in_memory)

        if loader is None or (mask_loader is None and needs_mask(variant)):
            d_img, d_mask = default_loaders(root_p, data)
            loader, mask_loader = loader or d_img, mask_loader or d_mask
        building = {"key": digest, "backbone": bb.cache_key(), "variant": variant, "n": len(entries),
                    "n_tokens": bb.n_tokens, "token_dim": bb.token_dim, "embed_dim": bb.embed_dim,
                    "dtype": dtype, "store_tokens": store_tokens, "chunk_size": chunk_size}
        part = parent / (name + ".partial")
        # one builder at a time (two sweep workers may need the same cache): the next one loads it
        with file_lock(parent / (name + ".lock")):
            if (final / "meta.json").exists():
                return cls(final, in_memory=in_memory)
            _init_partial(part, building, entries)
            encode = _Encoder(bb, entries, variant, loader, mask_loader, batch_size, _np_dtype(dtype))
            if not encode.chunks(part, chunk_size, store_tokens, progress, max_chunks):
                return None  # type: ignore[return-value]
            meta = {**building, "name": name, "backbone_name": bb.name, "image_size": bb.image_size,
                    "preprocess": bb.preprocess.key(), "root": str(root_p) if root_p else None}
            _publish(part, final, meta)
        return cls(final, in_memory=in_memory)


    @classmethod
    def complete(cls, encoder, relpaths: Sequence[str], root: str | os.PathLike | None = None,
                 masks: Sequence[str | None] | None = None, variant: str = "full",
                 cache_root: str | os.PathLike | None = None, profile: str | None = None, data: Any = None,
                 store_tokens: bool = True, dtype: str = "float16") -> bool:
        """Whether :meth:`build_or_load` with these arguments would load a finished cache (no work)."""
        _, _, _, name, _, parent = _target(encoder, relpaths, root, masks, variant, cache_root, profile, data,
                                           dtype, store_tokens)
        return (parent / name / "meta.json").exists()


def _target(encoder, relpaths, root, masks, variant, cache_root, profile, data, dtype, store_tokens):
    """``(entries, backbone, dataset root, folder name, full key, parent folder)`` of a cache request."""
    entries = _request(relpaths, masks, variant, dtype)
    bb = backbone_of(encoder)
    root_p = Path(root) if root is not None else (Path(data.root) if data is not None and
                                                   hasattr(data, "root") else None)
    # the backbone's key (its code included), the weights its key does not pin down (a trained
    # encoder's, a tiny one's: encoder_fingerprint) and the code of this cache's build and variants
    code = closure_fingerprint(TokenCache, _Encoder, apply_variant)
    key = f"{bb.cache_key()}|weights={encoder_fingerprint(bb)}|cache_code={code}"
    name, digest = cache_name(key, bb.name, variant, entries,
                              _fingerprint(root_p, entries), dtype, store_tokens)
    parent = Path(cache_root) if cache_root is not None else cache_dir(profile) / "features"
    return entries, bb, root_p, name, digest, parent


def _np_dtype(dtype: str):
    return np.float16 if dtype == "float16" else np.float32


def _request(relpaths, masks, variant: str, dtype: str) -> list[tuple[str, str]]:
    """Validate a cache request; the deduplicated (relpath, mask) entries."""
    check_variant(variant)
    if dtype not in ("float16", "float32"):
        raise ValueError(f"dtype must be 'float16' or 'float32', got {dtype!r}")
    entries = _entries(list(relpaths), None if masks is None else list(masks))
    if needs_mask(variant):
        missing = [rel for rel, m in entries if not m]
        if missing:
            raise ValueError(f"variant {variant!r} needs a mask for every image; none for {missing[:3]}")
    return entries


def _init_partial(part: Path, building: dict, entries: list[tuple[str, str]]) -> None:
    """Create (or keep, when compatible) the partial folder: index, empty arrays, ``building.json``."""
    part.mkdir(parents=True, exist_ok=True)
    bpath = part / "building.json"
    if bpath.exists() and json.loads(bpath.read_text()) != building:
        shutil.rmtree(part)          # an incompatible leftover: start over
        part.mkdir(parents=True)
    if bpath.exists():
        return
    n, np_dtype = building["n"], _np_dtype(building["dtype"])
    write_csv(pd.DataFrame({"relpath": [e[0] for e in entries], "mask": [e[1] for e in entries],
                            "row": np.arange(n)}), part / "index.csv")
    np.lib.format.open_memmap(part / "pooled.npy", mode="w+", dtype=np_dtype,
                              shape=(n, building["embed_dim"])).flush()
    if building["store_tokens"]:
        np.lib.format.open_memmap(part / "tokens.npy", mode="w+", dtype=np_dtype,
                                  shape=(n, building["n_tokens"], building["token_dim"])).flush()
    write_json(building, bpath)     # last: marks the partial folder as initialised


class _Encoder:
    """Runs the backbone over the entries, chunk by chunk, into the partial folder's arrays."""

    def __init__(self, bb, entries, variant, loader, mask_loader, batch_size, np_dtype):
        self.bb, self.entries, self.variant = bb, entries, variant
        self.loader, self.mask_loader, self.batch_size, self.np_dtype = loader, mask_loader, batch_size, np_dtype

    def chunks(self, part: Path, chunk_size: int, store_tokens: bool, progress: bool,
               max_chunks: int | None) -> bool:
        """Encode every chunk the manifest does not list yet; False when ``max_chunks`` stopped it."""
        n = len(self.entries)
        done = Manifest(part / "chunks.jsonl")
        pooled = np.load(part / "pooled.npy", mmap_mode="r+")
        tokens = np.load(part / "tokens.npy", mmap_mode="r+") if store_tokens else None
        starts = list(range(0, n, chunk_size))
        done_imgs = sum(min(chunk_size, n - s) for s in starts if s in done)
        bar = tqdm(total=n, initial=done_imgs, desc=f"caching {self.bb.name} [{self.variant}]", disable=not progress,
                   unit="img")
        for new_chunks, start in enumerate(done.pending(starts)):
            if max_chunks is not None and new_chunks >= max_chunks:
                bar.close()
                return False
            stop = min(n, start + chunk_size)
            for b0 in range(start, stop, self.batch_size):
                b1 = min(stop, b0 + self.batch_size)
                self.batch(b0, b1, pooled, tokens)
                bar.update(b1 - b0)
            pooled.flush()
            if tokens is not None:
                tokens.flush()
            done.add(start, stop=stop)     # only after the rows are on disk
        bar.close()
        return True

    def batch(self, b0: int, b1: int, pooled: np.ndarray, tokens: np.ndarray | None) -> None:
        """Rows ``b0:b1``: load, apply the variant, run the backbone, write pooled (and tokens)."""
        refs = [ImageRef(rel, lambda rel=rel: self.loader(rel), (lambda m=m: self.mask_loader(m)) if m else None, rel)
                for rel, m in self.entries[b0:b1]]
        imgs = variant_images(refs, self.variant)     # the one image path (features.embed)
        with torch.no_grad():
            out = self.bb(self.bb.preprocess.batch(imgs))
        pooled[b0:b1] = out.pooled.float().cpu().numpy().astype(self.np_dtype)
        if tokens is not None:
            if out.tokens is None:
                raise ValueError(f"{self.bb.name} has no tokens; build with store_tokens=False")
            tokens[b0:b1] = out.tokens.float().cpu().numpy().astype(self.np_dtype)


def _publish(part: Path, final: Path, meta: dict) -> None:
    """Write ``meta.json`` last and rename the partial folder into place (another process may have
    finished the same cache first: then theirs is used)."""
    write_json(meta, part / "meta.json")
    try:
        os.replace(part, final)
    except OSError:
        if not (final / "meta.json").exists():
            raise
        shutil.rmtree(part, ignore_errors=True)
