"""What a generation run works on and what it has done: the items of a dataset (one view of one
identity, ``item_id = "<id>/<k>"``), their per-item seeds and shards, the per-rank manifests of
finished items and the per-rank completion records of finished shards under
``distractors/<source>.work/`` (see :mod:`nearid_lib.generate.runner`)."""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd
from PIL import Image

from ..io_utils import write_json
from ..runtime.seeding import derive_seed
from .base import FillInputError, validate_fill_inputs
from .prompts import near_identity_prompt

__all__ = ["VIEWS", "GenItem", "items_from_dataset", "item_seed", "shard_items", "work_dir",
           "load_manifest_records", "append_record", "write_shard_record", "load_shard_records", "load_inputs", "safe_name", "item_relpath", "example_paths"]


VIEWS = (1, 2, 3)



@dataclass(frozen=True)
class GenItem:
    """One view to repaint: its positive image/mask (paths relative to the root) and prompt."""

    item_id: str    # "<id>/<k>"
    id: str
    split: str
    k: int
    image: str
    mask: str
    prompt: str


def safe_name(s: str) -> str:
    """``s`` with every character outside ``[A-Za-z0-9_.-]`` replaced (file names)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", s)


def _nonempty(v: Any) -> bool:
    return isinstance(v, str) and v.strip() != ""


def items_from_dataset(root: str | Path, seed: int = 0,
                       prompt_fn: Callable[[str, str, str, int], str] | None = None) -> list[GenItem]:
    """Every (identity, view) of ``positives.csv`` with a non-empty ``img_k``, in positives order.

    ``prompt_fn(class_name, description, identity_id, seed)`` defaults to
    :func:`near_identity_prompt` (one same-class, different-instance prompt per identity)."""
    root = Path(root)
    pos = pd.read_csv(root / "positives.csv", dtype=str, keep_default_na=False)
    ids = pd.read_csv(root / "identities.csv", dtype=str, keep_default_na=False)
    for col in ("id", "split", *(f"img{k}" for k in VIEWS), *(f"mask{k}" for k in VIEWS)):
        if col not in pos.columns:
            raise KeyError(f"{root / 'positives.csv'}: missing column {col!r}")
    meta = ids.set_index("id")
    prompt_fn = prompt_fn or (lambda c, d, i, s: near_identity_prompt(c, d, item_id=i, seed=s))
    items = []
    for row_no, row in enumerate(pos.itertuples(index=False), start=2):  # +header, 1-based
        rid = row.id
        if rid not in meta.index:
            raise KeyError(f"{root / 'positives.csv'} row {row_no}: id {rid!r} not in identities.csv")
        m = meta.loc[rid]
        prompt = prompt_fn(m.get("class_name", ""), m.get("description", ""), rid, seed)
        for k in VIEWS:
            img, msk = getattr(row, f"img{k}"), getattr(row, f"mask{k}")
            if not _nonempty(img):
                continue
            if not _nonempty(msk):
                raise FillInputError(f"{root / 'positives.csv'} row {row_no} (id {rid!r}): field "
                                     f"'mask{k}' is empty but 'img{k}' is {img!r}")
            items.append(GenItem(f"{rid}/{k}", rid, row.split, k, img, msk, prompt))
    return items


def item_seed(item_id: str, seed: int, attempt: int = 0) -> int:
    """The per-item seed (attempt 0) or the seed of retry ``attempt`` - order-independent."""
    if attempt == 0:
        return derive_seed(item_id, base=seed)
    return derive_seed(item_id, "retry", attempt, base=seed)


def shard_items(items: Sequence[Any], rank: int, world_size: int,
                key: Callable[[Any], Any] = lambda it: it.item_id) -> list[Any]:
    """Rank ``rank``'s share of the items sorted by ``key`` (default: the item id; independent of the
    order they were listed in): the contiguous block ``accelerate.PartialState.split_between_processes``
    gives that rank (sizes differ by at most one, the first ranks take the extra items)."""
    if not (0 <= rank < world_size):
        raise ValueError(f"shard rank {rank} not in [0, {world_size})")
    ordered = sorted(items, key=key)
    per, extra = divmod(len(ordered), world_size)
    start = rank * per + min(rank, extra)
    return ordered[start:start + per + (1 if rank < extra else 0)]


def item_relpath(source_name: str, it: GenItem) -> str:
    """Where the runner writes the distractor of ``it`` for ``source_name``, relative to its output
    root: ``distractors/<source>/<id>_<k>.png`` (the merged CSV then names it in ``nimg<k>``)."""
    return f"distractors/{source_name}/{safe_name(it.id)}_{it.k}.png"


def example_paths(items: Sequence[GenItem], columns: Sequence[tuple[str | Path, str | None]]
                  ) -> list[list[Path | None]]:
    """The image files of a figure of example fills: one row per item, one cell per column
    ``(root, source)``. ``source`` None: the item's positive view under ``root``; else its
    distractor of ``source`` under ``root``, as the merged ``distractors/<source>.csv`` there names
    it, or where no CSV was merged (a throughput run), the runner's own file (:func:`item_relpath`).
    A cell is None where there is no such file (a rejected fill)."""
    tables: dict[int, pd.DataFrame | None] = {}
    for c, (root, source) in enumerate(columns):
        csv = Path(root) / "distractors" / f"{source}.csv"
        tables[c] = (pd.read_csv(csv, dtype=str, keep_default_na=False).set_index("id")
                     if source is not None and csv.exists() else None)
    rows = []
    for it in items:
        row = []
        for c, (root, source) in enumerate(columns):
            if source is None:
                rel = it.image
            elif tables[c] is not None:
                rel = tables[c].loc[it.id, f"nimg{it.k}"]
            else:
                rel = item_relpath(source, it)
            path = Path(root) / rel if rel else None
            row.append(path if path is not None and path.exists() else None)
        rows.append(row)
    return rows


def work_dir(out_root: str | Path, source_name: str) -> Path:
    """``distractors/<source>.work``: the manifests and the quality report of a source."""
    return Path(out_root) / "distractors" / f"{source_name}.work"


def load_manifest_records(out_root: str | Path, source_name: str) -> list[tuple[str, dict]]:
    """All (manifest file name, record) of every rank; torn last lines are skipped."""
    out = []
    for f in sorted(work_dir(out_root, source_name).glob("manifest_rank*.jsonl")):
        for line in f.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill; that item is simply redone
            out.append((f.name, rec))
    return out


def append_record(path: Path, rec: dict) -> None:
    """Append one record to a manifest (fsynced: a finished item survives a kill)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell():                   # after a line torn by a kill: start a new line, or this
            fh.seek(fh.tell() - 1)      # record would be glued to the torn one and lost
            if fh.read(1) != "\n":
                fh.write("\n")
        fh.write(json.dumps(rec, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def write_shard_record(out_root: str | Path, source_name: str, summary: dict[str, Any]) -> Path:
    """Write ``done_rank<r>.json`` (``r = summary["rank"]``): the summary of a shard that finished,
    stamped with the time, written atomically by the rank itself.

    The ranks of a launch never wait for each other after generating (their shares can differ by
    hours after a resume, longer than a collective may wait), so what every rank did reaches the
    merge pass through these files instead of a gather."""
    path = work_dir(out_root, source_name) / f"done_rank{int(summary['rank'])}.json"
    write_json({**summary, "finished_at": time.time()}, path)
    return path


def load_shard_records(out_root: str | Path, source_name: str) -> list[dict[str, Any]]:
    """The completion records of the latest run's shards, by rank: those of its number of
    processes (the newest record's ``world_size``), so an earlier run with more processes leaves
    no stale ranks in the report. For reporting only: whether every item is done is what
    :func:`~nearid_lib.generate.merge.merge_source` checks, on the manifests."""
    recs = []
    for f in work_dir(out_root, source_name).glob("done_rank*.json"):
        try:
            recs.append(json.loads(f.read_text()))
        except json.JSONDecodeError:
            continue            # written atomically: only a foreign file can be torn
    if not recs:
        return []
    world = max(recs, key=lambda r: r.get("finished_at", 0.0)).get("world_size")
    return sorted((r for r in recs if r.get("world_size") == world), key=lambda r: r["rank"])


def load_inputs(root: Path, it: GenItem) -> tuple[Image.Image, Image.Image]:
    """The validated (image, mask) of an item; a bad one raises naming the item and dataset column."""
    where = f"item {it.item_id!r}"
    try:
        image = Image.open(root / it.image)
        image.load()
    except (OSError, FileNotFoundError) as e:
        raise FillInputError(f"{where}: field 'img{it.k}' ({it.image}) cannot be read: {e}") from e
    try:
        mask = Image.open(root / it.mask)
        mask.load()
    except (OSError, FileNotFoundError) as e:
        raise FillInputError(f"{where}: field 'mask{it.k}' ({it.mask}) cannot be read: {e}") from e
    try:
        return validate_fill_inputs(image, mask, where=f"{where} ({it.image}, {it.mask})")
    except FillInputError as e:
        # name the dataset column, not just the interface argument
        msg = str(e).replace("field 'image'", f"field 'img{it.k}'").replace(
            "field 'mask'", f"field 'mask{it.k}'")
        raise FillInputError(msg) from None
