"""Sharded, resumable generation of one distractor source into the NearID schema.

One *item* is one view of one identity: ``item_id = "<id>/<k>"`` (k = 1..3). For source ``S`` the
runner writes, under the dataset root::

    distractors/S/<id>_<k>.png            the distractor of view k (atomic writes)
    distractors/S.work/manifest_rank<r>.jsonl   one line per finished item (ok or rejected)
    distractors/S.work/done_rank<r>.json  rank r's summary, once its whole shard is done
    distractors/S.work/quality_report.csv       rejections per backend (after the merge)
    distractors/S.csv                     id, split, nimg1, nimg2, nimg3 - row-aligned with
                                          positives.csv (empty cell = no view k, or rejected)

Guarantees:
- per-item seeds are ``derive_seed(item_id, base=seed)`` (retries: ``derive_seed(item_id,
  "retry", a, base=seed)``), never the order of work, so any sharding / batching-by-item order /
  restart gives the same bytes;
- a killed run restarted with the same command skips the items in the manifests (of every rank,
  so a restart may even use a different number of ranks) and ends byte-identical;
- inputs of the pending items are checked before anything is generated (bad image/mask ->
  :class:`FillInputError` naming the item and field, nothing written);
- :func:`~nearid_lib.generate.merge.merge_source` assembles the row-aligned CSV only when every
  item was done exactly once.

Scale-out (diffusers' distributed-inference pattern): run the module under ``torchrun
--nproc_per_node N`` or ``accelerate launch --num_processes N``; each process takes its contiguous
block of the id-sorted item list from ``PartialState().split_between_processes`` (in-process callers
name a block with ``shard=(rank, N)``, :func:`~nearid_lib.generate.items.shard_items`: the same
blocks), writes its own manifest and completion record, and leaves; rank 0 prints its own summary.
No rank waits for another: after a resume one rank may still hold its whole block while the others
have nothing left, hours longer than a collective may wait (:mod:`nearid_lib.runtime.launch`). The
table is assembled afterwards by a separate pass in one process that reads every rank's manifest and
record from disk (``--merge-only``, :func:`~nearid_lib.generate.merge.merge_launch`; it names the items
not done yet while a rank is still working). Outputs are byte-identical whatever ``N`` (per-item
seeds)::

    torchrun --nproc_per_node 8 -m nearid_lib.generate.runner --profile paper --source SDXL
    python -m nearid_lib.generate.runner --profile paper --source SDXL --merge-only
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from PIL import Image
from tqdm.auto import tqdm
import torch

from ..config import get_profile
from ..io_utils import atomic_save_image
from ..runtime.launch import end_launch, launched_state
from ..paths import data_dir
from .base import FillBackend, FillRequest, get_backend
from .items import (GenItem, append_record, item_relpath, item_seed, items_from_dataset, load_inputs,
                    load_manifest_records, shard_items, work_dir, write_shard_record)
from .merge import merge_launch, merge_source
from .quality import QualityFilter
from .specs import NEARID_SOURCES

__all__ = ["generate_source", "main"]


@dataclass
class _Job:
    """The constants of one source's generation on this rank."""

    backend: FillBackend
    source_name: str
    in_root: Path
    seed: int
    settings: dict[str, Any]
    quality: QualityFilter | None
    retries: int
    request_fn: Callable[[GenItem, int], tuple[int, dict]] | None


def _check_items(items: Sequence[GenItem], source_name: str, batch_size: int) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", source_name):
        raise ValueError(f"source name {source_name!r} must match [A-Za-z0-9_.-]+")
    seen: set[str] = set()
    for it in items:
        if it.item_id in seen:
            raise ValueError(f"item {it.item_id!r} listed twice")
        seen.add(it.item_id)




def _request(job: _Job, it: GenItem, inputs, attempt: int) -> FillRequest:
    """The fill request of ``it`` at ``attempt``: per-item seed (or ``request_fn``'s) and settings."""
    if job.request_fn is None:
        s_item, extra = item_seed(it.item_id, job.seed, attempt), {}
    else:
        s_item, extra = job.request_fn(it, attempt)
    return FillRequest(it.item_id, *inputs, it.prompt, int(s_item), {**job.settings, **extra})


def _record(job: _Job, it: GenItem, req: FillRequest, out, inputs, attempt: int) -> dict[str, Any]:
    """The manifest record of one output: checked size, quality filter verdict, target path
    (the image itself rides along as ``_image`` until it is written)."""
    image, mask = inputs
    if not isinstance(out, Image.Image) or out.size != image.size:
        raise RuntimeError(
            f"item {it.item_id!r}: backend {job.backend.name!r} returned "
            f"{getattr(out, 'size', type(out).__name__)}, expected {image.size}")
    out = out.convert("RGB")
    rec: dict[str, Any] = {"id": it.item_id, "seed": req.seed, "attempt": attempt, "backend": job.backend.name}
    if job.quality is not None:
        q = job.quality.check(image, out, mask)
        rec.update(in_mask_diff=round(q.in_mask_diff, 6), out_mask_drift=round(q.out_mask_drift, 6))
        if not q.ok:
            rec.update(status="rejected", reason=q.reason, path=None)
            return rec
    rel = item_relpath(job.source_name, it)
    rec.update(status="ok", reason=None, path=rel, _image=out)
    return rec


def _fill_batch(job: _Job, batch: list[GenItem]) -> dict[str, dict]:
    """Fill a batch, retrying rejected items with fresh derived seeds: the final record per item."""
    inputs = {it.item_id: load_inputs(job.in_root, it) for it in batch}
    todo = list(batch)
    final: dict[str, dict] = {}
    for attempt in range(job.retries + 1):
        reqs = [_request(job, it, inputs[it.item_id], attempt) for it in todo]
        outs = job.backend.fill_batch(reqs)
        if len(outs) != len(reqs):
            raise RuntimeError(f"backend {job.backend.name!r} returned {len(outs)} images "
                               f"for {len(reqs)} requests")
        again = []
        for it, req, out in zip(todo, reqs, outs):
            rec = _record(job, it, req, out, inputs[it.item_id], attempt)
            final[it.item_id] = rec
            if rec["status"] == "rejected" and attempt < job.retries:
                again.append(it)
        todo = again
        if not todo:
            break
    return final


def generate_source(backend: FillBackend, items: Sequence[GenItem], out_root: str | Path,
                    source_name: str, seed: int = 0, shard: tuple[int, int] | None = None,
                    batch_size: int = 1, settings: dict[str, Any] | None = None,
                    quality: QualityFilter | None = None, retries: int = 0,
                    progress: bool = True, on_item: Callable[[str, dict], None] | None = None,
                    input_root: str | Path | None = None,
                    request_fn: Callable[[GenItem, int], tuple[int, dict]] | None = None,
                    ) -> dict[str, Any]:
    """Generate this rank's share of ``items`` for ``source_name``; returns a summary dict, which is
    also written as this shard's completion record (``done_rank<r>.json``) once every item of the
    shard is recorded. No collective: under a launch each rank returns as soon as its own share is
    done (the table is a separate pass, :func:`~nearid_lib.generate.merge.merge_launch`).

    Args:
        backend: any :class:`FillBackend` (``get_backend(name, ...)``).
        items: from :func:`~nearid_lib.generate.items.items_from_dataset` (all ranks pass the same list).
        out_root: dataset root; images go to ``distractors/<source>/``.
        seed: base seed; item seeds are ``derive_seed(item_id, base=seed)``.
        shard: ``(rank, world_size)``; ``None``: this process's block from
            ``PartialState().split_between_processes`` under a multi-process launch, else everything.
        batch_size: requests per ``backend.fill_batch`` call.
        settings: backend settings added to every request.
        quality: a :class:`QualityFilter` or ``None`` (accept everything).
        retries: extra attempts with fresh derived seeds for rejected outputs.
        on_item: called with ``(item_id, record)`` after each item is recorded (progress hooks;
            the tests raise ``KeyboardInterrupt`` here to simulate a kill).
        input_root: where the positives live (default: ``out_root``).
        request_fn: ``(item, attempt) -> (seed, per-item settings)``, for generators whose
            requests depend on the item beyond its image (the procedural world's rendered
            instance, see :func:`~nearid_lib.data.world_sources.world_request_fn`); default
            ``(item_seed(...), {})``.
    """
    out_root = Path(out_root)
    in_root = Path(input_root) if input_root is not None else out_root
    _check_items(items, source_name, batch_size)
    if shard is not None:
        rank, world = shard
        mine = shard_items(items, rank, world)
    else:
        state = launched_state()
        ordered = sorted(items, key=lambda it: it.item_id)
        rank, world = (state.process_index, state.num_processes) if state is not None else (0, 1)
        if state is None:
            mine = ordered
        else:
            with state.split_between_processes(ordered) as block:
                mine = list(block)
    done = {rec["id"] for _, rec in load_manifest_records(out_root, source_name)}
    pending = [it for it in mine if it.item_id not in done]
    # Pre-flight: every pending input is checked before the first output is written.
    for it in pending:
        load_inputs(in_root, it)

    job = _Job(backend, source_name, in_root, seed, dict(settings or {}), quality, retries, request_fn)
    manifest = work_dir(out_root, source_name) / f"manifest_rank{rank}.jsonl"
    t0 = time.perf_counter()
    n_new = {"ok": 0, "rejected": 0}
    bar = tqdm(total=len(mine), initial=len(mine) - len(pending), position=rank,
               desc=f"{source_name} rank {rank}/{world}", disable=not progress, leave=True)
    try:
        for start in range(0, len(pending), batch_size):
            batch = pending[start:start + batch_size]
            final = _fill_batch(job, batch)
            for it in batch:  # record in item order: manifests are identical across restarts
                rec = final[it.item_id]
                img = rec.pop("_image", None)
                if img is not None:
                    atomic_save_image(out_root / rec["path"], img)
                append_record(manifest, rec)
                n_new[rec["status"]] += 1
                bar.update(1)
                if on_item is not None:
                    on_item(it.item_id, rec)
    finally:
        bar.close()
    summary = {"source": source_name, "backend": backend.name, "rank": rank, "world_size": world,
               "n_shard": len(mine), "n_skipped": len(mine) - len(pending), "n_new_ok": n_new["ok"],
               "n_new_rejected": n_new["rejected"], "seconds": time.perf_counter() - t0}
    # the merge pass reads every rank's part from these records: nothing is gathered at the end
    write_shard_record(out_root, source_name, summary)
    return summary


# --------------------------------------------------------------------------- CLI
def _parse(argv: Iterable[str] | None):
    p = argparse.ArgumentParser(
        prog="python -m nearid_lib.generate.runner",
        description="Generate one NearID distractor source (run under `accelerate launch`).")
    p.add_argument("--profile", default="paper")
    p.add_argument("--source", required=True, help="source name, e.g. SDXL, Flux_1024, Qwen")
    p.add_argument("--backend", default=None, help="backend name (default: from the source name)")
    p.add_argument("--resolution", default=None, help="'native' or an int (default: from source)")
    p.add_argument("--root", default=None, help="dataset root (default: data_dir(profile)/nearid)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--retries", type=int, default=None)
    p.add_argument("--settings", default="{}", help="JSON dict of backend settings")
    p.add_argument("--no-merge", action="store_true",
                   help="do not assemble the table after generating (under a launch: do not print "
                        "the --merge-only command)")
    p.add_argument("--merge-only", action="store_true",
                   help="generate nothing: report every rank's completion record and assemble the "
                        "table (run once, in one process, after a multi-process launch)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="profile override, e.g. generate.mixed_precision=bf16")
    return p.parse_args(list(argv) if argv is not None else None)


def main(argv: Iterable[str] | None = None) -> dict[str, Any]:
    """CLI entry point. One process: generate, then merge. Under torchrun / accelerate: each process
    generates its block and leaves, rank 0 printing its own summary (no barrier, no gather: module
    docstring); ``--merge-only`` (one process) then reports every rank's record and merges."""

    args = _parse(argv)
    cfg = get_profile(args.profile, **dict(kv.split("=", 1) for kv in args.set))
    g = cfg.generate
    backend_name, resolution = NEARID_SOURCES.get(args.source, (None, "native"))
    backend_name = args.backend or backend_name
    if backend_name is None:
        raise SystemExit(f"--source {args.source!r} is not a NearID source; pass --backend")
    if args.resolution is not None:
        resolution = args.resolution if args.resolution == "native" else int(args.resolution)
    root = Path(args.root) if args.root else data_dir(cfg.name) / "nearid"
    seed = cfg.seed if args.seed is None else args.seed
    items = items_from_dataset(root, seed=seed)
    if args.merge_only:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise SystemExit("--merge-only reads what every rank wrote: run it in one process, not under a launch")
        records, _, report = merge_launch(root, args.source, items, profile=cfg.name, backend=backend_name)
        print(report.to_string(index=False))
        return {"source": args.source, "merged": True, "records": records}
    state = launched_state()
    device = str(state.device) if state is not None else ("cuda" if torch.cuda.is_available() else "cpu")
    kw: dict[str, Any] = {}
    if backend_name != "procedural":
        kw = dict(resolution=resolution, mixed_precision=g.mixed_precision,
                  hub_ids=dict(g.hub_ids), device=device)
    backend = get_backend(backend_name, **kw)
    summary = generate_source(
        backend, items, root, args.source, seed=seed, shard=None,
        batch_size=args.batch_size or g.batch_size, settings=json.loads(args.settings),
        quality=QualityFilter(g.reject_unchanged_below, g.reject_drift_above),
        retries=g.retries if args.retries is None else args.retries, progress=not args.no_progress)
    if state is None:
        print(json.dumps(summary))
        if not args.no_merge:
            _, report = merge_source(root, args.source, items, profile=cfg.name, backend=backend_name)
            print(report.to_string(index=False))
    elif state.is_main_process:
        # rank 0's own part only: the other ranks may still be working, for hours after a resume
        print(json.dumps(summary))
        if not args.no_merge:
            cmd = ["python", "-m", "nearid_lib.generate.runner", "--profile", cfg.name, "--source", args.source,
                   "--root", str(root), *(["--backend", args.backend] if args.backend else []),
                   *(x for kv in args.set for x in ("--set", kv)), "--merge-only"]
            print(f"rank 0 of {state.num_processes} is done; every rank records its shard in "
                  f"{work_dir(root, args.source)}/done_rank<r>.json. Once every rank has finished, "
                  f"assemble the table with: {shlex.join(cmd)}")
    end_launch()                            # each rank leaves the group on its own: no barrier
    return summary


if __name__ == "__main__":
    from ..runtime.launch import exit_entry

    exit_entry(main)
