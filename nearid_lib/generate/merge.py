"""Finishing a generated source: :func:`merge_source` assembles ``distractors/<source>.csv``
row-aligned with ``positives.csv`` from every rank's manifest (and the quality report),
:func:`merge_launch` is that merge as the pass after a multi-process launch (it also reports every
rank's completion record), and :func:`register_source` adds the source to the dataset's
``sources.json``."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pandas as pd

from ..io_utils import write_csv, write_json
from .items import VIEWS, GenItem, items_from_dataset, load_manifest_records, load_shard_records, work_dir
from .quality import rejection_report

__all__ = ["merge_source", "merge_launch", "register_source"]


def merge_source(out_root: str | Path, source_name: str, items: Sequence[GenItem] | None = None,
                 profile: str = "", backend: str | None = None,
                 input_root: str | Path | None = None):
    """Assemble ``distractors/<source>.csv`` row-aligned with ``positives.csv``.

    Checks that every item of ``items`` (default: all views of positives.csv) was recorded
    exactly once over all rank manifests and that every accepted image exists; rejected items
    become empty cells. Also writes ``<source>.work/quality_report.csv``. Returns
    ``(table, report)`` DataFrames. ``input_root``: where positives.csv lives (default
    ``out_root``)."""
    out_root = Path(out_root)
    in_root = Path(input_root) if input_root is not None else out_root
    pos = pd.read_csv(in_root / "positives.csv", dtype=str, keep_default_na=False)
    if items is None:
        items = items_from_dataset(in_root, prompt_fn=lambda *a: "")
    expected = {it.item_id for it in items}
    recs: dict[str, dict] = {}
    where: dict[str, str] = {}
    for fname, rec in load_manifest_records(out_root, source_name):
        iid = rec["id"]
        if iid in recs:
            raise RuntimeError(f"{source_name}: item {iid!r} was done more than once "
                               f"({where[iid]} and {fname})")
        recs[iid] = rec
        where[iid] = fname
    missing = sorted(expected - set(recs))
    if missing:
        raise RuntimeError(f"{source_name}: {len(missing)} item(s) not done yet, e.g. "
                           f"{missing[:5]}; rerun the generation (it resumes)")
    extra = sorted(set(recs) - expected)
    if extra:
        raise RuntimeError(f"{source_name}: manifests hold items not in positives.csv: {extra[:5]}")
    rows = []
    for row in pos.itertuples(index=False):
        out = {"id": row.id, "split": row.split}
        for k in VIEWS:
            rec = recs.get(f"{row.id}/{k}")
            path = rec.get("path") if rec and rec.get("status") == "ok" else None
            if path and not (out_root / path).is_file():
                raise RuntimeError(f"{source_name}: manifest says {rec['id']!r} is done but "
                                   f"{path} is missing; delete its manifest line and rerun")
            out[f"nimg{k}"] = path or ""
        rows.append(out)
    table = pd.DataFrame(rows, columns=["id", "split", *(f"nimg{k}" for k in VIEWS)])
    write_csv(table, out_root / "distractors" / f"{source_name}.csv")
    bname = backend or (next(iter(recs.values())).get("backend", "") if recs else "")
    report = rejection_report([recs[i] for i in sorted(recs)], source_name, bname, profile)
    write_csv(report, work_dir(out_root, source_name) / "quality_report.csv")
    return table, report


def merge_launch(out_root: str | Path, source_name: str, items: Sequence[GenItem] | None = None,
                 profile: str = "", backend: str | None = None, input_root: str | Path | None = None,
                 echo: bool = True):
    """The pass after a launch: print every rank's completion record of the latest run
    (:func:`~nearid_lib.generate.items.load_shard_records`, one JSON line each, when ``echo``) and
    assemble the table from every rank's manifest (:func:`merge_source`,
    whose arguments these are; it raises naming the items not done yet while any rank is still
    working). Returns ``(records, table, report)``."""
    records = load_shard_records(out_root, source_name)
    if echo:
        for rec in records:
            print(json.dumps(rec))
    table, report = merge_source(out_root, source_name, items, profile=profile, backend=backend,
                                 input_root=input_root)
    return records, table, report


def register_source(root: str | Path, source_name: str, train: bool = False) -> dict:
    """Add ``source_name`` to ``sources.json`` (and to ``train_sources`` if ``train``)."""
    path = Path(root) / "sources.json"
    data = json.loads(path.read_text()) if path.exists() else {"sources": [], "train_sources": []}
    if source_name not in data["sources"]:
        data["sources"].append(source_name)
    if train and source_name not in data.setdefault("train_sources", []):
        data["train_sources"].append(source_name)
    write_json(data, path)
    return data
