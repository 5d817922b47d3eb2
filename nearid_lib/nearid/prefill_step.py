"""Fill the paper profile's token store once, on every GPU, before any head trains
(``make prefill PROFILE=paper``; the paper profile's notebook 03 depends on it).

``torchrun --standalone --nproc_per_node N -m nearid_lib.nearid.prefill_step --profile paper``
encodes every grid that training and evaluation will read -- the train split of the training
sources and MTG (:func:`train_items`), the val and test splits of every
source (:func:`eval_items`), each in both variants (full and
foreground-only) -- into the sharded int8 store that training and evaluation open
(:func:`~nearid_lib.features.stream.open_train_store`). Grid ``j`` is encoded by rank ``j % N`` only
(:meth:`~nearid_lib.features.stream.StreamFeatures.prefill`), images are decoded and masked by
DataLoader workers while the backbone runs, each rank appends to its own shards, and a killed step
resumes (committed chunks are kept). Training then reads only: a step's misses are what the prefill
was not asked for.

The store's folder is keyed by what determines its bytes (backbone weights, preprocessing, the code
of the backbone and codec, the dataset: :func:`~nearid_lib.features.stream.store_dir`), so an edit of
training or report code keeps it. Profiles without a sharded store (``train.token_store = "cache"``:
smoke, mini) have nothing to prefill.

The store writes while its file system keeps its reserve of free space
(:func:`~nearid_lib.features.disk.reserve_bytes`): on a disk too small for every grid the prefill
stops there, says so, and exits 0; training then computes the grids the store lacks each time it
reads them (streaming), so a full disk costs time, not the run.

Prints the grids asked for, written and already stored, the seconds and grids per second, and
whether the store stopped at its disk reserve.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import TYPE_CHECKING, Sequence

from ..config import get_profile
from ..data import load_nearid, nearid_root
from ..data.groups import group_items, image_groups
from ..features.stream import VARIANTS
from ..runtime.launch import end_launch, launched_state
from ..models import load_backbone, resolve_device
from ..runtime import set_torch_threads
from .rows import train_groups
from .train_inputs import train_features

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["prefill_items", "train_items", "eval_items", "main"]


def _items(data: NearIDData, groups: Sequence[str]) -> list[tuple[str, str]]:
    out: dict[str, str] = {}
    for g in groups:
        for r, m in zip(*group_items(data, g)):
            out.setdefault(r, m)
    return list(out.items())


def train_items(data: NearIDData, cfg: Profile, by_reuse: bool = True) -> list[tuple[str, str]]:
    """(relpath, mask) of every image training can read (train split of the training sources + MTG).

    ``by_reuse``: most-read images first, the order in which a disk budget is best spent by
    :meth:`~nearid_lib.features.stream.StreamFeatures.prefill`: MTG images (read ~4x per epoch: the
    pairs are repeated), then the positive views (every epoch), then the distractors (only when
    their view is the anchor)."""
    groups = train_groups(data, cfg)
    if by_reuse:
        rank = {"mtg": 0, "positives": 1}
        groups = sorted(groups, key=lambda g: rank.get(g.partition("@")[0], 2))
    return _items(data, groups)


def eval_items(data: NearIDData, splits: Sequence[str] = ("test",), sources: Sequence[str] | None = None,
               mtg: bool = True) -> list[tuple[str, str]]:
    """(relpath, mask) of every image evaluation of ``splits`` reads (all sources by default)."""
    return _items(data, image_groups(data, splits, sources, mtg=mtg))


def prefill_items(data, cfg) -> list[tuple[str, str]]:
    """``(relpath, mask)`` of every image training (the profile's sources, MTG) and evaluation (val
    and ``eval.split`` of every source, MTG) read, most-reused first, each once."""
    splits = tuple(dict.fromkeys(("val", cfg.eval.split)))
    return list(dict.fromkeys([*train_items(data, cfg), *eval_items(data, splits)]))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nearid_lib.nearid.prefill_step --profile paper [--set KEY=VALUE ...] [--workers N]``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="paper")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--workers", type=int, default=None,
                    help="DataLoader processes per rank decoding images (default: cores / ranks - 1)")
    args = ap.parse_args(argv)
    cfg = get_profile(args.profile, overrides=dict(kv.split("=", 1) for kv in args.set))
    tc = cfg.train
    if not tc.use_cache or tc.token_store == "cache":
        print(f"prefill: profile {cfg.name} keeps tokens in per-group caches (train.token_store="
              f"{tc.token_store!r}); nothing to prefill")
        return 0
    set_torch_threads(cfg.runtime.threads, cfg.runtime.tune_malloc)
    state = launched_state()
    rank, world = (state.process_index, state.num_processes) if state is not None else (0, 1)
    device = state.device if state is not None else resolve_device(cfg.device)
    backbone = load_backbone(cfg, device=device)[0]
    data = load_nearid(nearid_root(cfg.name))
    # the very store (and forward settings) a training rank opens: train_inputs.train_features
    feats = train_features(cfg, data, backbone, rank)
    store = feats.store
    items = prefill_items(data, cfg)
    n_grids = len(items) * len(VARIANTS)
    before = len(store)
    if state is not None:
        # every rank has counted what an earlier run left before any rank writes (otherwise rank 0
        # could count rank 1's first grids as "stored before"); the ranks reach this point together
        state.wait_for_everyone()
    workers = args.workers if args.workers is not None else max(0, (os.cpu_count() or 2) // world - 1)
    t0 = time.perf_counter()
    written = feats.prefill(items, VARIANTS, progress=rank == 0, rank=rank, world=world, workers=workers)
    sec = time.perf_counter() - t0
    # no barrier before rank 0 reports: after a resume the ranks' remaining shares can differ by
    # hours, longer than any collective should wait (launch docstring); rank 0 reports its own part
    full = store.room() <= 0
    if rank == 0:
        print(json.dumps({"store": str(store.root), "processes": world, "grids": n_grids,
                          "stored_before": before, "written_by_rank0": written, "seconds": sec,
                          "grids_per_second_rank0": written / sec if sec > 0 else None,
                          "stopped_at_disk_reserve": full}, indent=1))
    if full:
        # every rank says it: after a resume one rank may stop long before the others
        print(f"prefill rank {rank}: the token store reached its disk reserve ({len(store):,} grids stored, "
              f"{n_grids:,} asked for): training streams the backbone for the grids it lacks", flush=True)
    end_launch()
    return 0


if __name__ == "__main__":  # pragma: no cover
    from ..runtime.launch import exit_entry

    exit_entry(main)
