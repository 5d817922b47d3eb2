"""The per-item feature store: what an encoder computed for an image, kept once and read everywhere.

A :class:`FeatureStore` is a folder (or memory only) of :class:`FeatureTable` s. A table holds one
kind of feature, its key names everything the numbers depend on:

* ``encoder``: the encoder's fingerprint (:func:`encoder_fingerprint`: its ``cache_key()``, which
  covers name, weights and preprocessing, plus a hash of weights the key does not pin down);
* ``variant``: the image variant (:mod:`.variants`: ``full``, ``fg``, ``fg_grey``...);
* ``payload``: what is stored per image (``embedding``: the L2-normalised global embedding,
  ``prefix``: the frozen prefix features of an adapted model; :mod:`.embed`);
* ``scope``: what the item keys mean when they are not content hashes (a dataset's fingerprint
  for relpaths, a seed for augmentation draws).

Rows are keyed by item (a relpath, a content hash, ``key@draw``), so an image embedded for one
experiment is read, not recomputed, by the next one that lists it. On disk a table is a folder
``<name>-<payload>-<variant>-<hash>/`` with ``key.json`` and chunk files ``<stamp>.npz`` (``keys``,
``values``), each written atomically as soon as it fills: a killed job loses at most one chunk,
and the next run computes only the rest. When two chunks hold the same key, the older one wins.

A backbone's token grids (payloads ``tokens`` and ``pooled``) are too large for per-item rows and
training reads them by random rows: a store made with ``layouts={"tokens": ..., "pooled": ...}``
keeps them in a layout of :mod:`.layouts` instead (memory-mapped :class:`~.cache.TokenCache`
arrays per image group, or the paper profile's int8 :class:`~.shards.ShardedTokenStore`), behind
the same table calls; :func:`~.embed.embed` reads and fills every kind alike.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from ..io_utils import atomic_write, atomic_write_text
from .payloads import PAYLOADS, variant_images

__all__ = ["FeatureStore", "FeatureTable"]


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)[:48]


class FeatureTable:
    """The rows of one (encoder, variant, payload, scope) key: ``key in table``, ``table.get(keys)``,
    ``table.add(keys, values)`` (written in chunks of ``chunk_items``), ``table.flush()``."""

    def __init__(self, folder: Path | None, key: dict[str, str], chunk_items: int = 256):
        self.folder, self.key, self.chunk_items = folder, dict(key), int(chunk_items)
        self._rows: dict[str, np.ndarray] = {}
        self._pending: list[str] = []
        if folder is not None and folder.is_dir():
            for f in sorted(folder.glob("*.npz")):
                try:
                    with np.load(f) as z:
                        keys, values = z["keys"].tolist(), z["values"]
                except Exception as err:            # a chunk is written atomically: this is damage
                    raise ValueError(f"feature store chunk {f} cannot be read ({type(err).__name__}: {err}); "
                                     f"delete it and the rows it held are computed again") from err
                for k, v in zip(keys, values):
                    self._rows.setdefault(k, v)

    def __contains__(self, key: str) -> bool:
        return key in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def missing(self, keys: Iterable[str]) -> list[str]:
        """The keys without a row, deduplicated, in first-seen order."""
        return [k for k in dict.fromkeys(keys) if k not in self._rows]

    def get(self, keys: Sequence[str], tensor: bool = False, device=None):
        """The rows of ``keys`` stacked ``[n, ...]`` (C order; ``tensor``: a torch tensor on
        ``device``); a key without a row raises naming it."""
        try:
            rows = [self._rows[k] for k in keys]
        except KeyError as err:
            raise KeyError(f"feature store table {self.name}: no row for {err.args[0]!r}") from None
        if not rows:
            raise ValueError(f"feature store table {self.name}: get() of no keys has no shape")
        out = np.stack(rows)               # rows are C order (add), so is the stack
        if not tensor:
            return out
        t = torch.from_numpy(out)
        return t if device is None else t.to(device)

    def fill(self, encoder, refs, batch_size: int, progress: bool, desc: str | None) -> int:
        """Compute the rows of ``refs`` (:class:`~.payloads.ImageRef` s this table lacks) in the order
        given and in batches of ``batch_size``, keeping each batch (chunks on disk as they fill,
        the rest at the end, even on an error). Returns the number of rows computed."""
        compute = PAYLOADS[self.key["payload"]].compute
        starts = range(0, len(refs), batch_size)
        if progress and len(starts) > 1:

            starts = tqdm(starts, desc=desc, unit="batch")
        n = 0
        try:
            for i in starts:
                part = refs[i:i + batch_size]
                self.add([r.key for r in part], compute(encoder, variant_images(part, self.key["variant"]), batch_size))
                n += len(part)
        finally:
            self.flush()                      # what was computed is kept, even on an error
        return n

    def add(self, keys: Sequence[str], values: np.ndarray) -> None:
        """Keep ``values[i]`` as the row of ``keys[i]`` (an existing row is kept); a full chunk is
        written to disk at once."""
        if len(keys) != len(values):
            raise ValueError(f"feature store table {self.name}: {len(keys)} keys, {len(values)} rows")
        finite = np.isfinite(np.asarray(values)).reshape(len(keys), -1).all(1)
        if not finite.all():
            bad = [k for k, ok in zip(keys, finite) if not ok]
            raise ValueError(f"feature store table {self.name}: non-finite features (NaN/inf) for {bad[:3]}")
        for k, v in zip(keys, values):
            if k not in self._rows:        # C order whatever layout the encoder's output had
                self._rows[k] = np.ascontiguousarray(v)
                self._pending.append(k)
        if len(self._pending) >= self.chunk_items:
            self.flush()

    def flush(self) -> None:
        """Write the rows added since the last chunk (no-op in memory or with nothing pending)."""
        if self.folder is None or not self._pending:
            self._pending = []
            return
        keys, self._pending = self._pending, []
        if not (self.folder / "key.json").exists():
            atomic_write_text(self.folder / "key.json", json.dumps(self.key, indent=1, sort_keys=True))
        arr, values = np.array(keys, dtype=str), np.stack([self._rows[k] for k in keys])
        name = f"{time.time_ns():020d}-{os.getpid()}.npz"
        atomic_write(self.folder / name, lambda p: np.savez(open(p, "wb"), keys=arr, values=values))

    @property
    def name(self) -> str:
        return self.folder.name if self.folder is not None else f"{self.key.get('name', '?')} (in memory)"


class FeatureStore:
    """Per-item features of any encoder, variant and payload (module docstring), under ``folder``
    (None: in memory for this process); ``layouts`` maps a payload to the layout that holds it. ``hits`` / ``misses`` count :func:`~.embed.embed` calls
    that computed nothing / something; ``n_computed`` the rows computed."""

    def __init__(self, folder: str | os.PathLike | None = None, chunk_items: int = 256,
                 layouts: dict | None = None):
        self.folder = Path(folder) if folder is not None else None
        self.chunk_items = int(chunk_items)
        self.layouts = dict(layouts or {})      # payload -> a layout of .layouts (token grids)
        self._tables: dict[str, FeatureTable] = {}
        self.hits = self.misses = self.n_computed = 0

    def table(self, name: str, encoder: str, variant: str, payload: str, scope: str = "") -> FeatureTable:
        """The table of one key (opened once per store; ``name`` is for people, not part of the key)."""
        key = {"encoder": encoder, "variant": variant, "payload": payload, "scope": scope}
        digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()
        if digest not in self._tables:
            folder = (self.folder / f"{_slug(name)}-{_slug(payload)}-{_slug(variant)}-{digest[:16]}"
                      if self.folder is not None else None)
            self._tables[digest] = FeatureTable(folder, {**key, "name": name}, self.chunk_items)
        return self._tables[digest]

    def flush(self) -> None:
        """Write every table's pending rows."""
        for t in self._tables.values():
            t.flush()

    def __repr__(self) -> str:
        where = str(self.folder) if self.folder is not None else "memory"
        return f"FeatureStore({where}: {len(self._tables)} tables open, {self.n_computed} rows computed)"
