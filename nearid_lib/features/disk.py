"""The token store's disk: how many grids a run's sharded store holds, the free space it leaves on
its file system, and what else lies under a cache folder beside the store a run opens.

* :func:`store_grids`: the (image, variant) grids of the store at a run's sizes, the one formula
  that the resource ledger's prefill step and the preflight's disk plan both count with.
* :func:`reserve_bytes` and :class:`ReservedTokenStore`: the store stops writing when its file
  system's free space falls to the reserve, and whatever it then lacks is computed by the backbone
  each time it is read (:class:`~.layouts.ShardGrids` hands a refused grid to the reader only). The
  free space is read at every write, not fixed as a byte budget when the store is opened: the
  ranks of a prefill each append to their own shards without reading the others', so a budget
  fixed at open would let every rank spend the whole free space.
* :func:`stored_grids`, :func:`cache_entries`: the grids already in a store folder, and every other
  folder under a cache with its size (stores of another backbone, dtype, codec or dataset; other
  cached outputs), which the preflight reports as used space instead of subtracting it.

The reserve lives here and not in :mod:`.shards` on purpose: a store's folder is keyed by the code
between an image and its record (:func:`~.stream.store_code`, of which :mod:`.shards` is part), and
how much a store may write changes no record, so it must not re-key a store a run has filled.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from .shards import ShardedTokenStore

if TYPE_CHECKING:
    from ..steps.ledger import Sizes

__all__ = ["store_grids", "reserve_bytes", "ReservedTokenStore", "stored_grids", "cache_entries", "folder_bytes",
           "RESERVE_FRACTION", "RESERVE_MAX_BYTES", "STORES"]

# The free space a store leaves its file system: 5% of the disk, at most 20 GB, for what the run
# writes after the store (checkpoints, judge answers, tables) and for the other users of the disk.
RESERVE_FRACTION = 0.05
RESERVE_MAX_BYTES = 20 * 10**9
STORES = "shards"            # the folder of a cache that holds the sharded stores (stream.store_dir)


def store_grids(sizes: Sizes) -> int:
    """(image, variant) grids of the store at ``sizes``: every training view with its training
    sources' distractors, every val/test view with every source's, MTG's four images a pair (every
    split), each in both variants (full and FG-only: prefill writes both, training masks by role)."""
    tr = sizes.views("train") * (1 + sizes.train_sources)
    ev = (sizes.views("val") + sizes.views("test")) * (1 + sizes.eval_sources)
    mtg = 4 * sum(int(n) for n in sizes.mtg_pairs.values())
    return 2 * (tr + ev + mtg)


def _existing(p: Path) -> Path:
    p = Path(p).resolve()
    while not p.exists():
        p = p.parent
    return p


def reserve_bytes(path: str | Path) -> int:
    """Bytes a store under ``path`` leaves free on its file system: :data:`RESERVE_FRACTION` of the
    disk's size, at most :data:`RESERVE_MAX_BYTES` (``path`` need not exist yet)."""
    total = shutil.disk_usage(_existing(Path(path))).total
    return int(min(RESERVE_MAX_BYTES, RESERVE_FRACTION * total))


class ReservedTokenStore(ShardedTokenStore):
    """A :class:`~.shards.ShardedTokenStore` that writes only while its file system keeps
    ``keep_free`` bytes free (module docstring): :meth:`room` is also bounded by the free space now,
    so every process writing the store, and every other writer on the disk, shares one limit.
    Reaching it is said once per process; the store then serves what it holds and refuses the rest."""

    def __init__(self, *args, keep_free: int = 0, **kw):
        self.keep_free = max(0, int(keep_free))
        self.reserve_reached = False
        super().__init__(*args, **kw)

    def room(self) -> int:
        n = super().room()
        if n <= 0:
            return 0
        free = shutil.disk_usage(self.root).free
        left = max(0, (free - self.keep_free) // self.rb)
        if left == 0 and not self.reserve_reached:
            self.reserve_reached = True
            print(f"token store {self.root.name}: {free / 1e9:.1f} GB free on its file system, the reserve is "
                  f"{self.keep_free / 1e9:.1f} GB: no more grids are written ({len(self)} stored); a grid it "
                  f"lacks is computed by the backbone each time it is read", flush=True)
        return int(min(n, left))


def stored_grids(folder: str | Path) -> int:
    """Committed grids of the store in ``folder`` (0 where there is none)."""
    folder = Path(folder)
    if not (folder / "meta.json").is_file():
        return 0
    return len(ShardedTokenStore.open(folder))


def folder_bytes(p: Path) -> int:
    """Bytes of the files under ``p`` (a file: its size)."""
    p = Path(p)
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else 0


def cache_entries(cache_root: str | Path, store: str | Path | None) -> list[tuple[Path, int, bool]]:
    """``[(path, bytes, is_a_store)]`` of everything under ``cache_root`` except ``store``: every
    entry of ``cache_root/shards`` but ``store`` (a store there is one this run does not open), and
    every other entry of ``cache_root``; largest first, empty ones left out."""
    root = Path(cache_root)
    if not root.is_dir():
        return []
    keep = Path(store).resolve() if store is not None else None
    out = []
    for p in sorted(root.iterdir()):
        if p.name == STORES and p.is_dir():
            out += [(q, folder_bytes(q), (q / "meta.json").is_file()) for q in sorted(p.iterdir())
                    if q.resolve() != keep]
        else:
            out.append((p, folder_bytes(p), False))
    return sorted((e for e in out if e[1] > 0), key=lambda e: -e[1])
