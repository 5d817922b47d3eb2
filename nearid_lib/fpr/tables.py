"""FPR's per-dataset result tables (paper Tables 5-13) from the per-query scores of
:func:`~nearid_lib.fpr.protocol.rank_generator`.

Each paper table is one gallery dataset (a WildlifeReID species, a CUB group, Stanford Cars) with
one row per personalization method and, per encoder *role*, the pairwise similarity and the
gallery mAP: ``clip_i`` (CLIP ViT-B/32), ``dino`` (DINOv2) and ``spec`` (the dataset's specialised
model: MiewID for Re-ID, BioCLIP 2 for CUB, SP-Cars for Stanford Cars).

mAP of a dataset = the **mean of its per-species mAPs** (the authors' scripts average the
per-species galleries); the mean over all queries is given beside it (``<role>_map_all``), so the
two aggregations can be compared (they differ when species have different numbers of queries).
Per-query APs are the expected AP over tie orders (``ties="expected"`` of
:func:`nearid_lib.metrics.retrieval_map`), so no number depends on the gallery's order.

In ``mini`` the roles are filled by what exists offline (``clip_i``: the frozen EfficientNet-Lite0,
the general-purpose encoder; ``dino``: none; ``spec``: the NearID head) and each species of the
procedural world is one "dataset" (``mini/<species>``), plus the whole world (``NearID-mini``).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..chance import CHANCE_COLUMNS, chance_check, chance_encoder

__all__ = ["chance_table", "ROLES", "PAPER_DATASETS", "paper_dataset_key", "role_encoders", "dataset_scores",
           "generated_table", "paper_table_name", "split_by_dataset", "dataset_view"]

ROLES = ("clip_i", "dino", "spec")
# paper tables 5-13 by dataset key (``paper_values/fpr_table<N>_<key>.csv``)
PAPER_DATASETS = {"leopard": 5, "cow": 6, "zebra": 7, "tiger": 8, "giraffe": 9, "cub_sparrow": 10,
                  "cub_tern": 11, "cub_wren": 12, "stanford_cars": 13}
_GENERAL = {"clip_i": ("clip-vit-b32", "efficientnet-lite0"), "dino": ("dinov2-base",)}
_SPECIALISED = {"reid": ("miewid", "nearid"), "cub": ("bioclip2", "nearid"), "cars": ("spcars", "nearid"),
                "": ("nearid",)}


def paper_dataset_key(dataset: str) -> str:
    """The paper's key of a gallery folder name: ``reid_zebra``/``wildlife_zebra``/``zebra`` ->
    ``zebra``, ``cars``/``stanford_cars`` -> ``stanford_cars``, ``cub_sparrow`` unchanged; any other
    name is returned lower-cased (not a paper dataset)."""
    k = str(dataset).strip().lower().replace("-", "_")
    for pre in ("reid_", "wildlife_", "wildlifereid_"):
        if k.startswith(pre):
            k = k[len(pre):]
    return "stanford_cars" if k in ("cars", "stanford_cars") else k


def _group(dataset: str) -> str:
    k = paper_dataset_key(dataset)
    if k.startswith("cub"):
        return "cub"
    if k == "stanford_cars":
        return "cars"
    return "reid" if k in PAPER_DATASETS else ""


def role_encoders(dataset: str, encoders: Sequence[str]) -> dict[str, str | None]:
    """``{role: encoder or None}`` for a dataset, from the encoders that were scored: the first
    available candidate of each role (``spec`` by dataset group, the NearID head as the fallback)."""
    have = list(encoders)
    cands = {**_GENERAL, "spec": _SPECIALISED[_group(dataset)]}
    return {r: next((e for e in cands[r] if e in have), None) for r in ROLES}


def dataset_scores(per_query: pd.DataFrame, dataset_col: str = "dataset", species_col: str = "species",
                   by: Sequence[str] = ("encoder", "method")) -> pd.DataFrame:
    """Per (dataset, ``by``): ``map`` = mean over species of the species' mAP (mean AP of its
    queries), ``map_all`` = mean AP over all queries, ``sim`` = mean pairwise similarity over all
    queries, ``n_species``, ``n_queries``. ``per_query`` needs columns ``ap``, ``sim``,
    ``dataset_col``, ``species_col`` and ``by``."""
    keys = [dataset_col, *by]
    miss = [c for c in (*keys, species_col, "ap", "sim") if c not in per_query.columns]
    if miss:
        raise KeyError(f"dataset_scores: per_query lacks column(s) {miss}")
    sp = per_query.groupby([*keys, species_col], sort=False).ap.mean().rename("map_species").reset_index()
    out = per_query.groupby(keys, sort=False).agg(map_all=("ap", "mean"), sim=("sim", "mean"),
                                                  n_queries=("ap", "size")).reset_index()
    per = sp.groupby(keys, sort=False).agg(map=("map_species", "mean"), n_species=("map_species", "size"))
    return out.merge(per.reset_index(), on=keys)[[*keys, "map", "map_all", "sim", "n_species", "n_queries"]]


def generated_table(per_query: pd.DataFrame, dataset_col: str = "dataset", species_col: str = "species"
                    ) -> pd.DataFrame:
    """The paper's per-dataset table (Tables 5-13, stacked): one row per (dataset, method) with
    ``<role>_sim``, ``<role>_map`` (mean of per-species mAPs) and ``<role>_map_all`` (all-queries
    mean) for the roles of :func:`role_encoders`, ``specialized_model`` and ``ours_label`` (which
    encoder fills each role). Roles without an encoder stay NaN."""
    scores = dataset_scores(per_query, dataset_col, species_col)
    rows = []
    for (ds, method), d in scores.groupby([dataset_col, "method"], sort=False):
        by_enc = d.set_index("encoder")
        roles = role_encoders(ds, list(by_enc.index))
        row = {"dataset": ds, "method": method, "specialized_model": roles["spec"] or "",
               "ours_label": ", ".join(f"{r}={e}" for r, e in roles.items() if e)}
        for r, e in roles.items():
            for m, col in (("sim", "sim"), ("map", "map"), ("map_all", "map_all")):
                row[f"{r}_{m}"] = float(by_enc.at[e, col]) if e else np.nan
        row["n_queries"] = int(d.n_queries.max())
        row["n_species"] = int(d.n_species.max())
        rows.append(row)
    return pd.DataFrame(rows)


def paper_table_name(dataset: str) -> str | None:
    """The table name notebook 11 writes for a dataset that is one of the paper's Tables 5-13
    (``11_fpr_<key>``, the ``ours`` of ``paper_values/fpr_table<N>_<key>.meta.json``); None for
    any other dataset (the ``mini`` species)."""
    k = paper_dataset_key(dataset)
    return f"11_fpr_{k}" if k in PAPER_DATASETS else None


def split_by_dataset(table: pd.DataFrame, names: Mapping[str, str] | None = None) -> dict[str, pd.DataFrame]:
    """``{table name: rows}`` of :func:`generated_table` for the paper's datasets (see
    :func:`paper_table_name`); ``names`` overrides the mapping."""
    out = {}
    for ds, d in table.groupby("dataset", sort=False):
        name = (names or {}).get(ds) or paper_table_name(ds)
        if name:
            out[name] = d.reset_index(drop=True)
    return out


def dataset_view(per_query: pd.DataFrame, whole: str, species_col: str = "species") -> pd.DataFrame:
    """Per-query scores with the ``dataset`` column the tables group by: unchanged when it exists
    (the paper profile: one gallery folder per dataset); otherwise (``mini``) every query twice,
    once under ``mini/<species>`` (each species of the world as one dataset) and once under
    ``whole`` (the world: mean of its per-species mAPs)."""
    if "dataset" in per_query.columns:
        return per_query
    if species_col not in per_query.columns:
        raise KeyError(f"dataset_view: per_query has neither 'dataset' nor {species_col!r}")
    return pd.concat([per_query.assign(dataset="mini/" + per_query[species_col].astype(str)),
                      per_query.assign(dataset=whole)], ignore_index=True)


def chance_table(oracle: pd.DataFrame | None, agreement: pd.DataFrame | None, encoders: Sequence[str],
                 general: str = "efficientnet-lite0") -> pd.DataFrame:
    """The pretrained ``general`` encoder beside the ``"<name>@random"`` of ``encoders``
    (``cfg.retrieval.encoders``): the oracle's mAP and top-1 per species group, and the per-identity
    agreement of mAP and similarity with the true drift (:func:`nearid_lib.chance.chance_check`)."""
    chance = chance_encoder(encoders)
    parts = []
    if chance is not None and oracle is not None and len(oracle):
        parts.append(chance_check(oracle, "encoder", general, chance, ["map", "top1"], "FPR Table 1 (oracle)",
                                  by=["group"]))
    if chance is not None and agreement is not None and len(agreement):
        parts.append(chance_check(agreement, "encoder", general, chance, ["mean_rho"],
                                  "FPR agreement with the true drift", by=["metric"]))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=CHANCE_COLUMNS)
