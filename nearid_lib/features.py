"""Feature cache for frozen backbones: encode every image once, train and evaluate heads over it.

A cache is a folder under ``cache_dir(profile) / "features"`` named
``<backbone>-<variant>-<hash>``, where the hash covers the backbone's identity and preprocessing
(:meth:`Encoder.cache_key`: name, weights, image size, resize, normalisation), the variant
(``"full"`` image, or ``"fg"``: background blacked out with the object mask), the storage dtype, and
the list of (image, mask) paths plus a fingerprint of the dataset (its ``manifest.json``, else the
files' sizes and mtimes). Anything that would change the features gives a new folder::

    meta.json      written last: key, N, n_tokens, token_dim, embed_dim, dtype, variant, ...
    index.csv      relpath, mask, row
    tokens.npy     float16 [N, n_tokens, token_dim]   (np.load(mmap_mode="r"): no RAM cost)
    pooled.npy     float16 [N, embed_dim]             (the backbone's own pooled output)

Builds run in chunks into ``<name>.partial/`` with a chunk manifest (``chunks.jsonl``): a killed
build resumes where it stopped, and the folder is renamed into place only when complete, so a
half-built cache is never read.

Augmentations that cannot be cached (random crops, colour jitter of the pixels) use
:class:`OnTheFlyFeatures`, which has the same ``features(relpaths)`` call but runs the backbone.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
from PIL import Image

from .io_utils import Manifest, write_csv, write_json
from .paths import cache_dir

__all__ = ["TokenCache", "OnTheFlyFeatures", "VARIANTS", "register_variant", "apply_variant",
           "default_loaders", "cache_name"]

ImageLoader = Callable[[str], Image.Image]
MaskLoader = Callable[[str], np.ndarray]


# ----------------------------------------------------------------------------- variants
def _full(image: Image.Image, mask: np.ndarray | None) -> Image.Image:
    return image


def _fg(image: Image.Image, mask: np.ndarray | None) -> Image.Image:
    """Background blacked out: keep the pixels where ``mask`` is True."""
    if mask is None:
        raise ValueError("variant 'fg' needs a mask for every image")
    arr = np.asarray(image.convert("RGB"))
    m = np.asarray(mask)
    if m.shape != arr.shape[:2]:
        raise ValueError(f"variant 'fg': mask shape {m.shape} does not match image {arr.shape[:2]}")
    return Image.fromarray(np.where(m.astype(bool)[..., None], arr, 0).astype(np.uint8))


VARIANTS: dict[str, Callable[[Image.Image, np.ndarray | None], Image.Image]] = {"full": _full, "fg": _fg}
_NEEDS_MASK = {"fg"}


def register_variant(name: str, fn: Callable[[Image.Image, np.ndarray | None], Image.Image],
                     needs_mask: bool = True) -> None:
    """Add a deterministic image variant ``fn(image, mask) -> image`` that the cache can key on."""
    VARIANTS[name] = fn
    if needs_mask:
        _NEEDS_MASK.add(name)


def apply_variant(image: Image.Image, mask: np.ndarray | None, variant: str) -> Image.Image:
    """``VARIANTS[variant](image, mask)``, with a clear error for unknown names."""
    if variant not in VARIANTS:
        raise KeyError(f"unknown feature variant {variant!r}; valid: {', '.join(VARIANTS)}")
    return VARIANTS[variant](image, mask)


# ----------------------------------------------------------------------------- loading
def default_loaders(root: str | os.PathLike | None = None, data: Any = None) -> tuple[ImageLoader, MaskLoader]:
    """``(image_loader, mask_loader)``: a dataset object's ``.image`` / ``.mask`` (NearIDData) if
    given, else PNG files under ``root`` (masks: mode L, > 127 = foreground)."""
    if data is not None:
        return data.image, data.mask
    if root is None:
        raise ValueError("give root=, data= or loader= to read images")
    root = Path(root)

    def image(rel: str) -> Image.Image:
        p = root / rel
        if not p.exists():
            raise FileNotFoundError(f"image {rel!r} not found under {root}")
        with Image.open(p) as im:
            return im.convert("RGB")

    def mask(rel: str) -> np.ndarray:
        p = root / rel
        if not p.exists():
            raise FileNotFoundError(f"mask {rel!r} not found under {root}")
        with Image.open(p) as im:
            return np.asarray(im.convert("L")) > 127

    return image, mask


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


def _backbone(encoder):
    # a NearID encoder caches its backbone's tokens: the head is what trains over them
    return getattr(encoder, "backbone", encoder)


# ----------------------------------------------------------------------------- the cache
class TokenCache:
    """A built cache (read-only). Use :meth:`build_or_load` to get one."""

    def __init__(self, directory: str | os.PathLike, in_memory: bool = False):
        import pandas as pd

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
        if variant not in VARIANTS:
            raise KeyError(f"unknown feature variant {variant!r}; valid: {', '.join(VARIANTS)}")
        if dtype not in ("float16", "float32"):
            raise ValueError(f"dtype must be 'float16' or 'float32', got {dtype!r}")
        entries = _entries(list(relpaths), None if masks is None else list(masks))
        if variant in _NEEDS_MASK:
            missing = [rel for rel, m in entries if not m]
            if missing:
                raise ValueError(f"variant {variant!r} needs a mask for every image; none for {missing[:3]}")
        bb = _backbone(encoder)
        root_p = Path(root) if root is not None else (Path(data.root) if data is not None and
                                                       hasattr(data, "root") else None)
        name, digest = cache_name(bb.cache_key(), bb.name, variant, entries, _fingerprint(root_p, entries),
                                  dtype, store_tokens)
        parent = Path(cache_root) if cache_root is not None else cache_dir(profile) / "features"
        final = parent / name
        if (final / "meta.json").exists():
            return cls(final, in_memory=in_memory)

        d_img, d_mask = (None, None)
        if loader is None or (mask_loader is None and variant in _NEEDS_MASK):
            d_img, d_mask = default_loaders(root_p, data)
        loader = loader or d_img
        mask_loader = mask_loader or d_mask

        part = parent / (name + ".partial")
        part.mkdir(parents=True, exist_ok=True)
        n = len(entries)
        np_dtype = np.float16 if dtype == "float16" else np.float32
        building = {"key": digest, "backbone": bb.cache_key(), "variant": variant, "n": n,
                    "n_tokens": bb.n_tokens, "token_dim": bb.token_dim, "embed_dim": bb.embed_dim,
                    "dtype": dtype, "store_tokens": store_tokens, "chunk_size": chunk_size}
        bpath = part / "building.json"
        if bpath.exists() and json.loads(bpath.read_text()) != building:
            shutil.rmtree(part)          # an incompatible leftover: start over
            part.mkdir(parents=True)
        if not bpath.exists():
            import pandas as pd

            write_csv(pd.DataFrame({"relpath": [e[0] for e in entries], "mask": [e[1] for e in entries],
                                    "row": np.arange(n)}), part / "index.csv")
            np.lib.format.open_memmap(part / "pooled.npy", mode="w+", dtype=np_dtype,
                                      shape=(n, bb.embed_dim)).flush()
            if store_tokens:
                np.lib.format.open_memmap(part / "tokens.npy", mode="w+", dtype=np_dtype,
                                          shape=(n, bb.n_tokens, bb.token_dim)).flush()
            write_json(building, bpath)     # last: marks the partial folder as initialised

        chunks = Manifest(part / "chunks.jsonl")
        pooled = np.load(part / "pooled.npy", mmap_mode="r+")
        tokens = np.load(part / "tokens.npy", mmap_mode="r+") if store_tokens else None
        starts = list(range(0, n, chunk_size))
        todo = chunks.pending(starts)
        done_imgs = sum(min(chunk_size, n - s) for s in starts if s in chunks)
        bar = _progress(total=n, initial=done_imgs, desc=f"caching {bb.name} [{variant}]", enable=progress)
        new_chunks = 0
        for start in todo:
            if max_chunks is not None and new_chunks >= max_chunks:
                bar.close()
                return None  # type: ignore[return-value]
            stop = min(n, start + chunk_size)
            for b0 in range(start, stop, batch_size):
                b1 = min(stop, b0 + batch_size)
                imgs = []
                for rel, m in entries[b0:b1]:
                    im = loader(rel)
                    mk = mask_loader(m) if (m and variant in _NEEDS_MASK) else None
                    imgs.append(apply_variant(im, mk, variant))
                with torch.no_grad():
                    out = bb(bb.preprocess.batch(imgs))
                pooled[b0:b1] = out.pooled.float().cpu().numpy().astype(np_dtype)
                if tokens is not None:
                    if out.tokens is None:
                        raise ValueError(f"{bb.name} has no tokens; build with store_tokens=False")
                    tokens[b0:b1] = out.tokens.float().cpu().numpy().astype(np_dtype)
                bar.update(b1 - b0)
            pooled.flush()
            if tokens is not None:
                tokens.flush()
            chunks.add(start, stop=stop)     # only after the rows are on disk
            new_chunks += 1
        bar.close()
        del pooled, tokens
        meta = {**building, "name": name, "backbone_name": bb.name, "image_size": bb.image_size,
                "preprocess": bb.preprocess.key(), "root": str(root_p) if root_p else None}
        write_json(meta, part / "meta.json")
        try:
            os.replace(part, final)
        except OSError:
            if not (final / "meta.json").exists():   # someone else finished first: use theirs
                raise
            shutil.rmtree(part, ignore_errors=True)
        return cls(final, in_memory=in_memory)


def _progress(total: int, initial: int, desc: str, enable: bool):
    try:
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, disable=not enable, unit="img")
    except ImportError:  # pragma: no cover
        class _Null:
            def update(self, *_):
                pass

            def close(self):
                pass
        return _Null()


# ----------------------------------------------------------------------------- uncached
class OnTheFlyFeatures:
    """Same role as :class:`TokenCache` but runs the backbone every call: for augmentations
    that change pixels randomly (``augment(image, mask, rng) -> image``, applied after the variant).

    ``features(relpaths, masks=None, rng=None, grad=False) -> EncoderOutput`` (tokens [B, N, D])."""

    def __init__(self, encoder, root: str | os.PathLike | None = None, data: Any = None,
                 loader: ImageLoader | None = None, mask_loader: MaskLoader | None = None,
                 variant: str = "full", augment: Callable | None = None):
        if variant not in VARIANTS:
            raise KeyError(f"unknown feature variant {variant!r}; valid: {', '.join(VARIANTS)}")
        self.encoder = _backbone(encoder)
        self.variant, self.augment = variant, augment
        if loader is None or mask_loader is None:
            d_img, d_mask = default_loaders(root, data)
            loader, mask_loader = loader or d_img, mask_loader or d_mask
        self.loader, self.mask_loader = loader, mask_loader

    def images(self, relpaths: Sequence[str], masks: Sequence[str | None] | None = None,
               rng: np.random.Generator | None = None) -> list[Image.Image]:
        """The PIL images after the variant and the augmentation."""
        out = []
        for i, rel in enumerate(relpaths):
            m = masks[i] if masks is not None else None
            mk = self.mask_loader(m) if m else None
            if self.variant in _NEEDS_MASK and mk is None:
                raise ValueError(f"variant {self.variant!r} needs a mask for {rel!r}")
            im = apply_variant(self.loader(rel), mk, self.variant)
            if self.augment is not None:
                im = self.augment(im, mk, rng)
            out.append(im)
        return out

    def features(self, relpaths: Sequence[str], masks: Sequence[str | None] | None = None,
                 rng: np.random.Generator | None = None, grad: bool = False):
        """Backbone outputs for the (augmented) images; no grad unless ``grad=True``."""
        pix = self.encoder.preprocess.batch(self.images(relpaths, masks, rng))
        with torch.set_grad_enabled(grad):
            return self.encoder(pix)
