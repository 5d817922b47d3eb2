"""Notebook 01's materialisation of the release on every GPU, before the notebook and outside its
kernel (``make curate PROFILE=paper``; the paper profile's notebook 01 depends on it).

``torchrun --standalone --nproc_per_node N -m nearid_lib.data.curate_step --profile paper`` runs one
process per GPU: each loads the object masker (CLIPSeg) on its own GPU and writes its blocks of
identities (:mod:`~nearid_lib.data.released_identities`: block ``b`` to rank ``b % N``, images decoded
and PNGs written by CPU threads, one batched masker call per block), resumable per identity; rank 0
then writes the tables, MTG and the manifest. Notebook 01 finds the dataset complete and only loads
it. The bytes written are those of a single process (tested). Without a launch it is one process.

Prints the identities written, the seconds and the identities per second of the launch.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Sequence

from ..config import get_profile
from ..runtime.launch import end_launch, launched_state
from . import nearid_root, prepare_profile_data
from .released import load_released_from_hub
from .released_identities import progress_records

__all__ = ["main", "io_workers_per_rank"]


def io_workers_per_rank(world: int, cores: int | None = None) -> int:
    """CPU threads per rank for decoding and PNG writes: the node's cores shared among the ranks."""
    cores = cores or os.cpu_count() or 2
    return max(1, cores // max(1, world))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nearid_lib.data.curate_step --profile paper [--set KEY=VALUE ...] [--io-workers N]``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="paper")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--io-workers", type=int, default=None, help="threads per rank (default: cores / ranks)")
    args = ap.parse_args(argv)
    cfg = get_profile(args.profile, overrides=dict(kv.split("=", 1) for kv in args.set))
    state = launched_state()
    rank, world = (state.process_index, state.num_processes) if state is not None else (0, 1)
    root = nearid_root(cfg.name)
    t0 = time.perf_counter()
    if cfg.world.source != "released":
        # a procedural world: its build has its own worker pool (data.build); one process does it
        if rank == 0:
            prepare_profile_data(cfg)
        end_launch()
        return 0
    t_start = time.time()
    device = str(state.device) if state is not None else None
    load_released_from_hub(cfg, root, progress=rank == 0, shard=(rank, world),
                           barrier=state.wait_for_everyone if state is not None else None, device=device,
                           io_workers=args.io_workers or io_workers_per_rank(world))
    if rank == 0:
        sec = time.perf_counter() - t0
        # identities written by this launch (every rank's log; earlier launches' lines are older)
        n = sum(1 for r in progress_records(root / "_progress").values() if r.get("written_at", 0) >= t_start)
        print(json.dumps({"root": str(root), "processes": world, "identities_written": n, "seconds": sec,
                          "identities_per_second": n / sec if sec > 0 else None}, indent=1))
    end_launch()
    return 0


if __name__ == "__main__":  # pragma: no cover
    from ..runtime.launch import exit_entry

    exit_entry(main)
