"""The FPR authors' gallery rules, from their data scripts (``data_load_scripts/`` and
``evaluation/Evaluate.py`` of OSU-MLB/Finer-Personalization-Rank at b4552a6), wherever the rule is
deterministic from public data (``retrieval.gallery_rule = "authors"``, the ``paper`` profile).

Every random draw of those scripts is a pandas sample with an integer seed, i.e. a
``numpy.random.RandomState(seed)`` choosing positions without replacement; the draws below are the
same calls on the same rows in the same order, written with numpy so they do not depend on the
pandas version (:func:`rs_sample`: ``DataFrame.sample(n, random_state=seed)``; :func:`grouped_sample`:
``groupby(by).sample(n, random_state=seed)``, one state for all groups in sorted order;
:func:`per_group_sample`: ``groupby(by).apply(lambda g: g.sample(..., random_state=seed))``, a fresh
state per group; tests check them against pandas).

- **CUB-200-2011** (``load_cub_data.py``): every image (train and test split) of the 15 classes, in
  ``images.txt`` order; per group, the gallery is ``gallery_num`` images of each species
  (:func:`grouped_sample`, seed 101), the references ``train_num`` of the rest (the same rule).
- **Stanford Cars** (``load_cars_data.py``): the test split of ``Donghyun99/Stanford-Cars`` in its
  order; per label of :data:`~.downloads.CARS_LABELS`, the first ``gallery_num`` images are the
  gallery, the next ``train_num`` the references.
- **WildlifeReID-10k** (``load_data_reid.py``): the rows of the chosen species (and source datasets)
  in ``metadata.csv`` order; identities with at least ``refs[0] + gallery[0]`` images; references =
  ``min(n - gallery[0], refs[1])`` of each (:func:`per_group_sample`, seed 42); per species the
  ``per_species`` identities with most references (pandas ``value_counts().head()``: *among equal
  counts its order comes from numpy's unstable sort, so a tie at the last place can fall
  differently on another machine*, :func:`top_names` reports the tied set); gallery = up to
  ``gallery[1]`` of each one's other images (seed 42). The authors then removed some gallery
  images by hand (``filter_removed_data.py``: duplicates, bad angles); that list is not published,
  so the galleries here are their rule before that step (up to 15 images per subject, ~10 after it).
- **The ablation pool** (``load_data_reid_ablation.py``, FPR Fig. 5 / Table 2): the gallery plus,
  for every identity of the species (the chosen subjects included), up to 15 of its remaining
  images (seed 42), those extra rows first (``ablation_gallery_data.csv``).
- **Images per subject** (Fig. 5 left, ``Evaluate.evaluate(ablation_num_per_subj=k)``): each
  subject's pool rows sampled to ``min(n, k)`` with a fresh state of seed 101 (:func:`per_subject_gallery`).
- **Random / k-means galleries** (Table 2, ``reid_ablation_gallery_select.py``): per reference
  subject, in the order of the reference table, ``k = min(n, 10)`` of its pool images: Python's
  ``random.sample`` after one ``random.seed(101)`` (:func:`random_galleries`), or k-means (scikit-learn
  ``KMeans(k, random_state=42, n_init="auto", max_iter=300)``) on the subject's MiewID embeddings,
  unnormalised, the image nearest (Euclidean) to each centroid (:func:`kmeans_gallery`).

Not deterministic in the authors' code, so ours (seeded, documented in docs/paper-profile.md): which
extra subjects join a gallery of more than ten (``random.sample`` without a seed in ``Evaluate.py``),
and their manual gallery filtering.
"""
from __future__ import annotations

import random
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from ..data.fpr_layout import FPR_COLUMNS, FPRLayoutError, check_disjoint
from .datasets import CUB_GROUP_IDS, FPRSizeError

__all__ = ["AUTHORS_SEEDS", "rs_sample", "grouped_sample", "per_group_sample", "top_names", "authors_cub_split",
           "authors_cars_split", "authors_reid_split", "ablation_pool", "per_subject_gallery", "random_galleries",
           "kmeans_gallery", "ReidSplit"]

# the seeds of the authors' scripts (their CLI defaults / literals)
AUTHORS_SEEDS = {"cub": 101, "cars": 101, "reid": 42, "per_subject": 101, "random_gallery": 101, "kmeans": 42,
                 "extra_per_subject": 15}


# ----------------------------------------------------------------------------- pandas' draws
def _state(seed_or_state) -> np.random.RandomState:
    if isinstance(seed_or_state, np.random.RandomState):
        return seed_or_state
    return np.random.RandomState(int(seed_or_state))


def rs_sample(df: pd.DataFrame, n: int, seed_or_state) -> pd.DataFrame:
    """``df.sample(n, random_state=seed)``: the rows at ``RandomState(seed).choice(len(df), n,
    replace=False)``, in that order (a :class:`numpy.random.RandomState` is used and advanced)."""
    if n > len(df):
        raise FPRSizeError(f"cannot draw {n} rows from {len(df)}")
    return df.iloc[_state(seed_or_state).choice(len(df), size=int(n), replace=False)]


def _groups(df: pd.DataFrame, by: str) -> list[tuple[object, pd.DataFrame]]:
    """pandas' groupby order: keys sorted, each group's rows in their order in ``df``."""
    return [(k, df[df[by] == k]) for k in sorted(df[by].unique())]


def grouped_sample(df: pd.DataFrame, by: str, n: int, seed: int) -> pd.DataFrame:
    """``df.groupby(by).sample(n, random_state=seed)``: one ``RandomState(seed)`` drawing ``n`` rows
    of each group in turn (keys sorted); a group smaller than ``n`` is an :class:`FPRSizeError`
    naming it (pandas raises there too)."""
    rs = np.random.RandomState(int(seed))
    parts = []
    for key, g in _groups(df, by):
        if len(g) < n:
            raise FPRSizeError(f"{by} {key!r}: {len(g)} images, the authors' rule draws {n}")
        parts.append(rs_sample(g, n, rs))
    return pd.concat(parts) if parts else df.iloc[:0]


def per_group_sample(df: pd.DataFrame, by: str, n_of: Callable[[int], int], seed: int) -> pd.DataFrame:
    """``df.groupby(by, group_keys=False).apply(lambda g: g.sample(n=n_of(len(g)), random_state=seed))``:
    a fresh ``RandomState(seed)`` per group (keys sorted)."""
    parts = [rs_sample(g, n_of(len(g)), seed) for _, g in _groups(df, by)]
    return pd.concat(parts) if parts else df.iloc[:0]


def top_names(train: pd.DataFrame, species: str, k: int) -> tuple[list[str], list[str]]:
    """The authors' ``train[train.species == species]["name"].value_counts().head(k)`` (pandas' own
    call: its order among equal counts is numpy's unstable sort) and the names tied with the k-th
    count that fell outside (empty: the choice does not depend on tie order)."""
    counts = train[train["species"] == species]["name"].value_counts()
    top = [str(n) for n in counts.head(k).index]
    if len(counts) <= k:
        return top, []
    last = counts.iloc[k - 1]
    tied_out = [str(n) for n, c in counts.iloc[k:].items() if c == last]
    return top, tied_out


def _layout(df: pd.DataFrame, name_col: str, species: str, refs: pd.DataFrame | None = None) -> pd.DataFrame:
    """An FPR table (``name, species, file_path, ref_path`` + the source columns); ``ref_path`` = the
    identity's first reference image (the layout needs one; the authors' tables have none)."""
    out = df.copy()
    out["name"] = out[name_col].astype(str)
    out["species"] = species
    src = out if refs is None else refs
    first = src.drop_duplicates("name").set_index("name")["file_path"]
    out["ref_path"] = out["name"].map(first)
    cols = list(FPR_COLUMNS) + [c for c in out.columns if c not in FPR_COLUMNS and not str(c).startswith("_")]
    return out[cols].reset_index(drop=True)


# ----------------------------------------------------------------------------- CUB / Cars
def authors_cub_split(meta: pd.DataFrame, gallery_num: int = 10, train_num: int = 10,
                      seed: int = AUTHORS_SEEDS["cub"]) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """``{group: (train, gallery)}`` of CUB-200-2011 by ``load_cub_data.py``'s rule (module
    docstring). ``meta``: :func:`~.downloads.read_cub_metadata` (``class_id``, ``class_name``,
    ``file_path``, in ``images.txt`` order); ``name`` = the class name without its number."""
    for c in ("class_id", "class_name", "file_path"):
        if c not in meta.columns:
            raise FPRLayoutError(f"CUB metadata: missing column {c!r}")
    meta = meta.assign(_name=meta.class_name.astype(str).str.split(".", n=1).str[-1])
    out = {}
    for group, ids in CUB_GROUP_IDS.items():
        sel = meta[meta.class_id.isin(ids)]
        gallery = grouped_sample(sel, "_name", gallery_num, seed)
        rest = sel[~sel.file_path.isin(gallery.file_path)]
        train = grouped_sample(rest, "_name", train_num, seed)
        train_t = _layout(train, "_name", group)
        out[group] = (train_t, _layout(gallery, "_name", group, refs=train_t))
        check_disjoint(*out[group], "reference set", "gallery")
    return out


def authors_cars_split(cars: pd.DataFrame, labels: Sequence[int], gallery_num: int = 10,
                       train_num: int = 10) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(train, gallery)`` of Stanford Cars by ``load_cars_data.py``'s rule: per label, in the test
    split's order, the first ``gallery_num`` images are the gallery and the next ``train_num`` the
    references. ``cars``: :func:`~.downloads.read_cars_test` (``label``, ``class_name``, ``file_path``,
    ``row``); ``name`` = the model's name."""
    cars = cars.sort_values("row", kind="stable")
    tr, ga = [], []
    for lab in labels:
        rows = cars[cars.label == int(lab)]
        if len(rows) < gallery_num + train_num:
            raise FPRSizeError(f"Stanford Cars label {lab}: {len(rows)} test images, the authors' rule takes "
                               f"{gallery_num} gallery + {train_num} reference images")
        ga.append(rows.iloc[:gallery_num])
        tr.append(rows.iloc[gallery_num:gallery_num + train_num])
    train = _layout(pd.concat(tr), "class_name", "car")
    return train, _layout(pd.concat(ga), "class_name", "car", refs=train)


# ----------------------------------------------------------------------------- WildlifeReID-10k
class ReidSplit(dict):
    """``{species: (train, gallery)}`` plus ``pool`` ({species: ablation pool}) and ``ties``
    ({species: names tied at the last place of the subject choice, left out})."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.pool: dict[str, pd.DataFrame] = {}
        self.ties: dict[str, list[str]] = {}


def authors_reid_split(meta: pd.DataFrame, species: Sequence[str], datasets: Sequence[str] | None = None,
                       per_species: int = 10, refs: tuple[int, int] = (4, 10), gallery: tuple[int, int] = (5, 15),
                       seed: int = AUTHORS_SEEDS["reid"], extra: int = AUTHORS_SEEDS["extra_per_subject"]) -> ReidSplit:
    """WildlifeReID-10k by ``load_data_reid.py``'s rule (module docstring), with the ablation pool of
    ``load_data_reid_ablation.py`` per species. ``meta``: :func:`~.downloads.read_wildlife_metadata`
    (``identity``, ``species``, ``dataset``, ``file_path``) in ``metadata.csv`` order; ``refs`` /
    ``gallery``: (min, max) references / gallery images per subject (the authors' 4-10 / 5-15)."""
    for c in ("identity", "species", "file_path"):
        if c not in meta.columns:
            raise FPRLayoutError(f"WildlifeReID metadata: missing column {c!r}")
    sp_norm = meta.species.astype(str).str.strip().str.lower()
    df = meta[sp_norm.isin([s.lower() for s in species])].assign(_sp=sp_norm, _name=meta.identity.astype(str))
    if datasets:
        df = df[df.dataset.astype(str).isin(set(datasets))]
    counts = df.groupby("_name").size()
    eligible = df[df["_name"].map(counts) >= refs[0] + gallery[0]]
    train = per_group_sample(eligible, "_name", lambda n: min(n - gallery[0], refs[1]), seed)
    out = ReidSplit()
    keep: list[str] = []
    for sp in species:
        top, tied = top_names(train.assign(name=train["_name"], species=train["_sp"]), sp.lower(), per_species)
        if len(top) < per_species:
            raise FPRSizeError(f"WildlifeReID metadata: species {sp!r} has {len(top)} identities with >= "
                               f"{refs[0] + gallery[0]} images, the authors' rule takes {per_species}")
        keep += top
        out.ties[sp] = tied
    train = train[train["_name"].isin(keep)]
    rest = df[~df.file_path.isin(train.file_path)]
    gal = per_group_sample(rest[rest["_name"].isin(keep)], "_name", lambda n: min(n, gallery[1]), seed)
    left = rest[~rest.file_path.isin(gal.file_path)]
    extras = per_group_sample(left, "_name", lambda n: min(n, extra), seed)
    for sp in species:
        t = _layout(train[train["_sp"] == sp.lower()], "_name", sp)
        g = _layout(gal[gal["_sp"] == sp.lower()], "_name", sp, refs=t)
        check_disjoint(t, g, "reference set", "gallery")
        out[sp] = (t, g)
        ex = extras[extras["_sp"] == sp.lower()]
        pool = pd.concat([ex, gal[gal["_sp"] == sp.lower()]])
        out.pool[sp] = _layout(pool, "_name", sp, refs=pd.concat([t, _layout(ex, "_name", sp)]))
    return out


def ablation_pool(pool: pd.DataFrame, train: pd.DataFrame) -> pd.DataFrame:
    """The pool rows of the reference subjects (``train``'s names), in pool order."""
    return pool[pool.name.isin(set(train.name))]


# ----------------------------------------------------------------------------- ablation galleries
def per_subject_gallery(pool: pd.DataFrame, k: int, seed: int = AUTHORS_SEEDS["per_subject"]) -> pd.DataFrame:
    """Fig. 5 (left) as ``Evaluate.evaluate(ablation_num_per_subj=k)`` draws it: each subject's rows
    sampled to ``min(n, k)`` with a fresh ``RandomState(seed)``."""
    return per_group_sample(pool, "name", lambda n: min(n, int(k)), seed)


def random_galleries(pool: pd.DataFrame, names: Sequence[str], k: int = 10,
                     seed: int = AUTHORS_SEEDS["random_gallery"]) -> pd.DataFrame:
    """Table 2 "Random" (``reid_ablation_gallery_select.py --random``): ``random.seed(seed)`` once,
    then for each subject in ``names`` (the reference table's order) ``random.sample`` of
    ``min(n, k)`` of its pool paths; the pool rows of the chosen paths, in pool order."""
    rng = random.Random(int(seed))
    chosen: list[str] = []
    for name in names:
        paths = pool[pool.name == name].file_path.tolist()
        chosen += rng.sample(paths, min(len(paths), int(k)))
    return pool[pool.file_path.isin(set(chosen))]


def kmeans_gallery(embeddings: np.ndarray, k: int, seed: int = AUTHORS_SEEDS["kmeans"]) -> np.ndarray:
    """Table 2 "k-means" for one subject: scikit-learn ``KMeans(k, random_state=seed, n_init="auto",
    max_iter=300)`` on the subject's embeddings as they are (the authors' MiewID features, not
    normalised); per cluster, the row nearest (Euclidean) its centroid, first on ties. Returns row
    positions, one per cluster in cluster order."""
    from sklearn.cluster import KMeans

    x = np.asarray(embeddings, dtype=np.float64)
    if k > len(x):
        raise ValueError(f"kmeans_gallery: k={k} for {len(x)} images")
    km = KMeans(n_clusters=int(k), random_state=int(seed), n_init="auto", max_iter=300)
    labels = km.fit_predict(x)
    out = []
    for c in range(int(k)):
        idx = np.flatnonzero(labels == c)
        d = np.sqrt(((x[idx] - km.cluster_centers_[c]) ** 2).sum(1))
        out.append(int(idx[int(np.argmin(d))]))
    return np.asarray(out)
