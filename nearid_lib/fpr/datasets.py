"""The FPR paper's datasets as reference / gallery splits, and gallery sampling.

Builders for the paper's real datasets (:func:`build_cub_split`, :func:`build_cars_split`,
:func:`build_wildlife_split`) are pure functions over metadata tables (``name``, ``species``,
``file_path``, one row per image), so they are tested with small fixture tables; gallery sampling
(:func:`sample_gallery`) is random, k-means (the image nearest each centroid) or curated, all
deterministic for a seed. The resulting tables follow :mod:`nearid_lib.data.fpr_layout`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from ..data.fpr_layout import FPR_COLUMNS, FPRLayoutError, check_disjoint
from ..runtime.seeding import derive_seed, make_rng

__all__ = ["CUB_GROUPS", "CUB_GROUP_IDS", "CARS_MODELS", "WILDLIFE_SPECIES", "N_CARS_MODELS", "FPRSizeError", "split_reference_gallery", "sample_gallery",
           "build_cub_split", "build_cars_split", "build_wildlife_split"]

# CUB-200-2011 classes of the three groups, as the FPR authors' data script selects them by
# class id (``data_load_scripts/load_cub_data.py`` of OSU-MLB/Finer-Personalization-Rank: wren
# 193-197, tern 143-147, sparrow 113-117); the names are those of CUB's ``classes.txt``. The
# sparrows match the paper's text (Baird, Black-throated, Brewer, Sec. 4.1; Chipping /
# Clay-colored, Fig. 8).
CUB_GROUP_IDS: dict[str, tuple[int, ...]] = {
    "sparrow": (113, 114, 115, 116, 117),
    "tern": (143, 144, 145, 146, 147),
    "wren": (193, 194, 195, 196, 197),
}
CUB_GROUPS: dict[str, tuple[str, ...]] = {
    "sparrow": ("Baird_Sparrow", "Black_throated_Sparrow", "Brewer_Sparrow", "Chipping_Sparrow",
                "Clay_colored_Sparrow"),
    "tern": ("Caspian_Tern", "Common_Tern", "Elegant_Tern", "Forsters_Tern", "Least_Tern"),
    "wren": ("Bewick_Wren", "Cactus_Wren", "Carolina_Wren", "House_Wren", "Marsh_Wren"),
}
WILDLIFE_SPECIES = ("cow", "zebra", "tiger", "giraffe", "leopard")
# Stanford Cars: the authors' script takes labels [1,2,3,4,6] + [11,12,13,18,19] + [25,27,28,33,34]
# ("acura audi bmw") of the test split of the hub copy ``Donghyun99/Stanford-Cars``. Its labels are
# the devkit's class order counted from 0 (as every hub copy of the dataset we could read); the
# class names below are those labels' names in the devkit's ``cars_meta.mat`` (class id = label + 1).
CARS_MODELS: tuple[str, ...] = (
    "Acura RL Sedan 2012", "Acura TL Sedan 2012", "Acura TL Type-S 2008", "Acura TSX Sedan 2012",
    "Acura ZDX Hatchback 2012",
    "Audi RS 4 Convertible 2008", "Audi A5 Coupe 2012", "Audi TTS Coupe 2012", "Audi TT Hatchback 2011",
    "Audi S6 Sedan 2011",
    "BMW ActiveHybrid 5 Sedan 2012", "BMW 1 Series Coupe 2012", "BMW 3 Series Sedan 2012",
    "BMW M3 Coupe 2012", "BMW M5 Sedan 2010",
)
N_CARS_MODELS = len(CARS_MODELS)


class FPRSizeError(FPRLayoutError):
    """A dataset is well formed but too small for the requested gallery (too few images per
    identity, too few identities): the notebook skips its tables with this message as the reason."""


def _norm(s: str) -> str:
    return "".join(ch for ch in str(s).lower() if ch.isalnum())


def split_reference_gallery(meta: pd.DataFrame, n_ref: int | tuple[int, int] = (5, 10),
                            n_gallery: int = 10, seed: int = 0, sampling: str = "random",
                            embeddings: np.ndarray | None = None, key: str = "fpr") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split a metadata table (``name``, ``species``, ``file_path``, one row per image) into a
    reference set and a disjoint gallery, per identity: the gallery is chosen first from all of
    the identity's images (:func:`sample_gallery`), then ``n_ref`` references (an int, or a range
    ``(lo, hi)``: the paper's "5-10 images per subject", capped by what is left) from the rest.
    ``ref_path`` = the identity's first reference. An identity with fewer than
    ``n_gallery + min refs`` images is an error naming it. ``embeddings`` (kmeans / curated) are
    row-aligned with ``meta``."""
    lo, hi = (n_ref, n_ref) if isinstance(n_ref, int) else n_ref
    need_cols = ("name", "species", "file_path")
    missing = [c for c in need_cols if c not in meta.columns]
    if missing:
        raise FPRLayoutError(f"metadata table: missing column(s) {missing}")
    if embeddings is not None and len(embeddings) != len(meta):
        raise ValueError(f"split_reference_gallery: {len(embeddings)} embeddings for {len(meta)} rows")
    meta = meta.reset_index(drop=True).assign(_row=np.arange(len(meta)))   # row -> embedding
    train_rows, gal_rows = [], []
    for name, grp in meta.groupby("name", sort=True):
        grp = grp.sort_values("file_path").reset_index(drop=True)
        if len(grp) < n_gallery + lo:
            raise FPRSizeError(f"identity {name!r}: {len(grp)} images, need at least "
                                 f"{n_gallery} gallery + {lo} reference images")
        emb = None if embeddings is None else np.asarray(embeddings)[grp["_row"].to_numpy()]
        gal_idx = sample_gallery(grp, n_gallery, method=sampling, seed=derive_seed(key, name, base=seed),
                                 embeddings=emb)
        rest = np.setdiff1d(np.arange(len(grp)), gal_idx)
        rng = make_rng(seed, key, "ref", name)
        n = min(int(rng.integers(lo, hi + 1)), len(rest))
        ref_idx = np.sort(rng.choice(rest, size=n, replace=False))
        refs = grp.iloc[ref_idx].copy()
        ref0 = refs.file_path.iloc[0]
        refs["ref_path"] = ref0
        gal = grp.iloc[np.sort(gal_idx)].copy()
        gal["ref_path"] = ref0
        train_rows.append(refs)
        gal_rows.append(gal)
    cols = list(FPR_COLUMNS) + [c for c in meta.columns if c not in FPR_COLUMNS and not c.startswith("_")]
    train = pd.concat(train_rows, ignore_index=True)[cols]
    gallery = pd.concat(gal_rows, ignore_index=True)[cols]
    check_disjoint(train, gallery, "reference set", "gallery")
    return train, gallery


def sample_gallery(group: pd.DataFrame, n: int, method: str = "random", seed: int = 0,
                   embeddings: np.ndarray | None = None) -> np.ndarray:
    """Row positions (into ``group``) of ``n`` gallery images of one identity.

    - ``random``: a uniform sample without replacement (``make_rng(seed)``),
    - ``kmeans``: k-means (k = ``n``, scikit-learn, ``random_state=seed``, ``n_init=10``) on the
      identity's ``embeddings`` [len(group), D] (L2-normalised first); per cluster, the image
      nearest its centroid (paper Appendix A). Ties and repeated nearest images fall back to the
      next-nearest unused image, so exactly ``n`` distinct images come back,
    - ``curated``: the paper filtered a random gallery by hand (duplicates, bad angles). Our
      documented rule: drop near-duplicates (cosine > 0.98 to an earlier image, needs
      ``embeddings``), then sample randomly.
    With fewer than ``n`` images, all are returned (sorted)."""
    m = len(group)
    if n >= m:
        return np.arange(m)
    if method == "random":
        return np.sort(make_rng(seed, "gallery").choice(m, size=n, replace=False))
    if embeddings is None:
        raise ValueError(f"sample_gallery: method {method!r} needs embeddings of the images")
    x = np.asarray(embeddings, dtype=np.float64)
    if x.shape[0] != m:
        raise ValueError(f"sample_gallery: {x.shape[0]} embeddings for {m} images")
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    if method == "kmeans":
        from sklearn.cluster import KMeans

        km = KMeans(n_clusters=n, n_init=10, random_state=int(seed) % (2 ** 31)).fit(x)
        d = ((x[:, None, :] - km.cluster_centers_[None]) ** 2).sum(-1)      # [m, n]
        chosen: list[int] = []
        for c in range(n):
            for i in np.argsort(d[:, c], kind="stable"):
                if i not in chosen:
                    chosen.append(int(i))
                    break
        return np.sort(np.array(chosen))
    if method == "curated":
        sims = x @ x.T
        keep = [i for i in range(m) if not any(sims[i, j] > 0.98 for j in range(i))]
        if len(keep) <= n:
            rest = [i for i in range(m) if i not in keep]
            return np.sort(np.array(keep + rest[:n - len(keep)]))
        pick = make_rng(seed, "gallery_curated").choice(len(keep), size=n, replace=False)
        return np.sort(np.array(keep)[pick])
    raise ValueError(f"sample_gallery: unknown method {method!r}; valid: random, kmeans, curated")


def build_cub_split(meta: pd.DataFrame, seed: int = 0, n_gallery: int = 10,
                    n_ref: int | tuple[int, int] = (5, 10), sampling: str = "random",
                    embeddings: np.ndarray | None = None) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """CUB-200-2011 galleries: three groups (wren, tern, sparrow) of five similar species each
    (:data:`CUB_GROUPS`); identity = species, ``species`` column = the group. ``meta`` has one row
    per image with ``class_name`` (e.g. ``"001.Black_footed_Albatross"`` or ``"Baird_Sparrow"``)
    and ``file_path``. Returns ``{group: (train, gallery)}``."""
    if "class_name" not in meta.columns or "file_path" not in meta.columns:
        raise FPRLayoutError("CUB metadata: need columns class_name, file_path")
    bare = meta.class_name.astype(str).str.replace(r"^\d+\.", "", regex=True)
    out = {}
    for group, species in CUB_GROUPS.items():
        want = {_norm(s): s for s in species}
        sel = meta[bare.map(_norm).isin(want)].copy()
        found = set(bare[sel.index].map(_norm))
        if found != set(want):
            raise FPRLayoutError(f"CUB metadata: group {group!r} misses species "
                                 f"{sorted(want[k] for k in set(want) - found)}")
        sel["name"] = bare[sel.index].map(lambda s: want[_norm(s)])
        sel["species"] = group
        out[group] = split_reference_gallery(sel, n_ref, n_gallery, seed, sampling,
                                             _sub_emb(embeddings, meta, sel), key=f"cub_{group}")
    return out


def _sub_emb(embeddings, meta, sel):
    """The rows of ``embeddings`` (aligned with ``meta``) that belong to the subset ``sel``."""
    if embeddings is None:
        return None
    if not meta.index.is_unique:
        raise ValueError("metadata table: index must be unique to align embeddings")
    return np.asarray(embeddings)[meta.index.get_indexer(sel.index)]


def build_cars_split(meta: pd.DataFrame, models: Sequence[str] | None = None, seed: int = 0,
                     n_gallery: int = 10, n_ref: int | tuple[int, int] = (5, 10),
                     sampling: str = "random", embeddings: np.ndarray | None = None
                     ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Stanford Cars: 15 car models (identity = model, ``species`` = "car"). ``models`` defaults to
    :data:`CARS_MODELS`, the authors' 15 classes (Acura / Audi / BMW; the paper calls them "visually
    similar luxury sedan models"). ``meta`` has ``class_name`` and ``file_path`` (the authors use
    the test split only: pass those rows)."""
    if "class_name" not in meta.columns or "file_path" not in meta.columns:
        raise FPRLayoutError("Cars metadata: need columns class_name, file_path")
    names = set(meta.class_name.astype(str).unique())
    models = list(CARS_MODELS if models is None else models)
    missing = sorted(set(models) - names)
    if missing:
        raise FPRLayoutError(f"Cars metadata: model(s) {missing} not found among its {len(names)} classes")
    sel = meta[meta.class_name.isin(models)].copy()
    sel["name"], sel["species"] = sel.class_name.astype(str), "car"
    return split_reference_gallery(sel, n_ref, n_gallery, seed, sampling,
                                   _sub_emb(embeddings, meta, sel), key="cars")


def build_wildlife_split(meta: pd.DataFrame, species: Sequence[str] = WILDLIFE_SPECIES,
                         ids_per_species: int = 10, seed: int = 0, n_gallery: int = 10,
                         n_ref: int | tuple[int, int] = (5, 10), sampling: str = "random",
                         embeddings: np.ndarray | None = None, datasets: Sequence[str] | None = None
                         ) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """WildlifeReID-10k: ``ids_per_species`` identities for each of cow, zebra, tiger, giraffe,
    leopard. ``meta`` is WildlifeReID-10k's ``metadata.csv`` (``identity``, ``species``, ``path``;
    ``file_path`` is accepted for ``path``); ``species`` matches the metadata's (lower-cased)
    species exactly; ``datasets`` keeps only those source datasets (its ``dataset`` column).

    Identities with at least ``n_gallery + min refs`` images are eligible; of those, the
    ``ids_per_species`` with the most images are taken (ties: identity name), the authors' rule
    (``load_data_reid.py`` takes the largest subjects per species). Too few eligible identities
    raise :class:`FPRSizeError`. Returns ``{species: (train, gallery)}``."""
    meta = meta.rename(columns={"path": "file_path"}) if "file_path" not in meta.columns else meta
    for c in ("identity", "species", "file_path"):
        if c not in meta.columns:
            raise FPRLayoutError(f"WildlifeReID metadata: missing column {c!r}")
    full = meta                         # ``embeddings`` are row-aligned with the unfiltered table
    if datasets:
        if "dataset" not in meta.columns:
            raise FPRLayoutError("WildlifeReID metadata: datasets=... needs a 'dataset' column")
        meta = meta[meta.dataset.astype(str).isin(set(datasets))]
    lo = n_ref if isinstance(n_ref, int) else n_ref[0]
    out = {}
    sp_norm = meta.species.astype(str).str.strip().str.lower()
    for sp in species:
        sel = meta[sp_norm == sp.lower()].copy()
        counts = sel.groupby(sel.identity.astype(str)).size()
        counts = counts[counts >= n_gallery + lo]
        if len(counts) < ids_per_species:
            raise FPRSizeError(f"WildlifeReID metadata: species {sp!r} has {len(counts)} identities with "
                               f">= {n_gallery + lo} images, need {ids_per_species}")
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        keep = {k for k, _ in ranked[:ids_per_species]}
        sel = sel[sel.identity.astype(str).isin(keep)].copy()
        sel["name"], sel["species"] = sel.identity.astype(str), sp
        out[sp] = split_reference_gallery(sel, n_ref, n_gallery, seed, sampling,
                                          _sub_emb(embeddings, full, sel), key=f"wildlife_{sp}")
    return out
