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
- :func:`projected_source_costs`: what regenerating each of the 9 sources would cost on A100s, from
  the stated seconds per denoising step (``GenerateConfig.a100_seconds_per_step``) and
  :data:`NEARID_VIEWS`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

import pandas as pd

from .base import get_backend
from .items import VIEWS
from .specs import NEARID_SOURCES, SPECS, source_backend

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["regeneration_root", "regeneration_plan", "released_source_summary", "NEARID_VIEWS",
           "projected_source_costs"]

NEARID_VIEWS = 45_215
"""Distinct positive images (views) of the released NearID dataset: NearID paper, Section 3.3
("Dataset Foundation and Curation": "19,386 unique object identities and 45,215 distinct images";
12,943 identities with two views, 6,433 with three). Every distractor source inpaints one
distractor into each view, so this is the number of fills one source costs."""


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


def projected_source_costs(seconds_per_step: Mapping[str, float], n_views: int = NEARID_VIEWS,
                           n_gpus: int = 8) -> pd.DataFrame:
    """Projected A100 cost of regenerating each NearID source (:data:`NEARID_SOURCES`), one row per
    source: ``backend``, ``source``, ``device``, ``steps`` (the backend's default denoising steps),
    ``resolution`` (the source's working resolution), ``s_per_step`` (``seconds_per_step[backend]``,
    stated at the backend's native resolution, scaled by the pixel count: x (res / native)^2),
    ``items_per_s``, ``a100_hours_per_source`` (``n_views`` fills at batch 1) and
    ``a100_hours_on_<n_gpus>_gpus`` (the same split over ``n_gpus`` GPUs).

    ``seconds_per_step``: backend -> seconds per step at batch 1, native resolution, bf16 (the
    profile's ``GenerateConfig.a100_seconds_per_step``, a stated assumption)."""
    rows = []
    for source, (name, res) in NEARID_SOURCES.items():
        spec = SPECS[name]
        px = spec.native_resolution if res == "native" else int(res)
        steps = spec.defaults["num_inference_steps"]
        s_img = steps * seconds_per_step[name] * (px / spec.native_resolution) ** 2
        rows.append({"backend": name, "source": source, "device": "A100 (projected)", "steps": steps,
                     "resolution": px, "s_per_step": seconds_per_step[name] * (px / spec.native_resolution) ** 2,
                     "items_per_s": 1.0 / s_img, "a100_hours_per_source": n_views * s_img / 3600,
                     f"a100_hours_on_{n_gpus}_gpus": n_views * s_img / 3600 / n_gpus})
    return pd.DataFrame(rows)
