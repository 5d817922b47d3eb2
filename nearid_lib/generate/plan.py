"""What notebook 02 does with the distractor sources of a *released* dataset (``paper``).

The released NearID data already holds the 9 distractor sources (``Aleksandar/NearID-<source>``),
so the ``paper`` profile reads them and regenerates nothing by default: regenerating all 9 would
cost hundreds of A100-hours (notebook 02's own projection). Regeneration is opt-in per source
(``NEARID_SET=generate.sources=Flux,SDXL``) and goes to a root of its own,
:func:`regeneration_root`; a regenerated source is never registered into the dataset's
``sources.json``, so it never enters an evaluation pool or a training set.

- :func:`regeneration_plan`: the requested sources that can run, and those excluded with the
  reason (unknown name; PowerPaint without a BrushNet pipeline, which diffusers does not ship).
- :func:`released_source_summary`: per released source, how many identities and views have a
  distractor, and its role (Table 5 training source or evaluation only).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from .items import VIEWS
from .specs import NEARID_SOURCES, source_backend

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["regeneration_root", "regeneration_plan", "released_source_summary"]


def regeneration_root(data_root: str | Path) -> Path:
    """Where opt-in regenerated sources of the dataset at ``data_root`` are written: a sibling
    folder ``<data_root>_regenerated``, never the dataset itself."""
    p = Path(data_root)
    return p.with_name(p.name + "_regenerated")


def regeneration_plan(cfg: Profile, probe: bool = True) -> tuple[list[tuple[str, str, int | str]], dict[str, str]]:
    """``(runnable, excluded)`` for ``cfg.generate.sources``: ``runnable`` = ``(source, backend,
    resolution)`` in the requested order; ``excluded`` = source -> reason. With ``probe``, a backend
    whose pipeline cannot be built at all in this install (PowerPaint: ``load_pipeline`` raises
    ``NotImplementedError`` before any weight is read) is excluded up front, so the failure does
    not come after hours of the other sources."""
    runnable, excluded = [], {}
    for source in cfg.generate.sources:
        if source not in NEARID_SOURCES:
            excluded[source] = f"unknown NearID source; valid: {', '.join(NEARID_SOURCES)}"
            continue
        name, res = source_backend(source)
        if probe and name == "powerpaint":
            from .base import get_backend

            try:
                get_backend(name, hub_ids=dict(cfg.generate.hub_ids)).load_pipeline()
            except NotImplementedError as err:
                excluded[source] = str(err)
                continue
        runnable.append((source, name, res))
    return runnable, excluded


def released_source_summary(root: str | Path) -> pd.DataFrame:
    """One row per source of ``<root>/sources.json``: ``n_identities`` (rows of
    ``distractors/<source>.csv``), ``n_views`` (positive views), ``n_with_distractor`` (views whose
    ``nimg<k>`` is set), ``n_test_with_distractor``, ``role`` (``train + eval`` for the Table 5
    training sources, else ``eval``)."""
    root = Path(root)
    meta = json.loads((root / "sources.json").read_text())
    train = set(meta.get("train_sources", []))
    pos = pd.read_csv(root / "positives.csv", dtype=str, keep_default_na=False)
    n_views = sum(int((pos[f"img{k}"] != "").sum()) for k in VIEWS if f"img{k}" in pos)
    rows = []
    for s in meta["sources"]:
        d = pd.read_csv(root / "distractors" / f"{s}.csv", dtype=str, keep_default_na=False)
        have = sum((d[f"nimg{k}"] != "") for k in VIEWS if f"nimg{k}" in d)
        test = d["split"].to_numpy() == "test" if "split" in d else pos["split"].to_numpy() == "test"
        rows.append({"source": s, "n_identities": len(d), "n_views": n_views,
                     "n_with_distractor": int(have.sum()), "n_test_with_distractor": int(have[test].sum()),
                     "role": "train + eval" if s in train else "eval"})
    return pd.DataFrame(rows)
