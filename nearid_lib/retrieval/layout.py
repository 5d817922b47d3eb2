"""The Finer-Personalization Rank (FPR) data layout: reference / gallery / generated CSVs.

Three tables, each with columns ``name`` (identity), ``species`` (the group the identity belongs
to: a CUB species group, a car model family, a Re-ID animal species), ``file_path`` (the image)
and ``ref_path`` (a reference image of the identity; for generated images, the reference that
prompted the generation). Optional ``mask_path`` (object mask, 255 = foreground; our procedural
world writes it) and, in ``generated_data.csv``, ``method`` (the personalization method) and
optionally ``prompt``.

- ``train_data.csv``   the reference set (used only to prompt personalization),
- ``gallery_data.csv`` the gallery (real images of the same identities, never in the reference
                       set: an overlap is an error),
- ``generated_data.csv`` the generated images (queries), one ``method`` per row.

Paths are relative to the CSV's folder unless absolute. Builders for the paper's real datasets
(:func:`build_cub_split`, :func:`build_cars_split`, :func:`build_wildlife_split`) are pure
functions over metadata tables, so they are tested with small fixture tables; gallery sampling
(:func:`sample_gallery`) is random or k-means (the image nearest each centroid), both
deterministic for a seed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from ..io_utils import write_csv
from ..seeding import derive_seed, make_rng

__all__ = [
    "FPR_COLUMNS", "FPRLayoutError", "FPRSplit", "read_fpr_table", "write_fpr_table", "load_fpr_split",
    "check_disjoint", "resolve_paths", "read_generated", "CUB_GROUPS", "WILDLIFE_SPECIES",
    "N_CARS_MODELS", "build_cub_split", "build_cars_split", "build_wildlife_split", "sample_gallery",
    "split_reference_gallery",
]

FPR_COLUMNS = ("name", "species", "file_path", "ref_path")
OPTIONAL_COLUMNS = ("mask_path", "method", "prompt")


class FPRLayoutError(ValueError):
    """A malformed FPR table: the message names the file, the row(s) and the field."""


# ----------------------------------------------------------------------------- reading / writing
def _rows(idx: Iterable[int], limit: int = 8) -> str:
    idx = list(idx)
    # +2: 1-based and the header line, so the number is the line in the CSV file
    shown = ", ".join(str(i + 2) for i in idx[:limit])
    return shown + (f" ... ({len(idx)} rows)" if len(idx) > limit else "")


def read_fpr_table(path: str | os.PathLike, kind: str = "gallery", check_files: bool = True,
                   root: str | os.PathLike | None = None) -> pd.DataFrame:
    """Read one FPR table and validate it.

    ``kind`` is ``"train"``, ``"gallery"`` or ``"generated"`` (``generated`` requires ``method``).
    Paths are kept as written; ``root`` is where relative paths are resolved (default: the CSV's
    folder, or the nearest ancestor where the first file exists, as in our dataset root). Raises :class:`FPRLayoutError` naming
    the file, the CSV line numbers and the field for missing columns, empty cells, duplicate
    images and missing files."""
    path = Path(path)
    if not path.exists():
        raise FPRLayoutError(f"{path}: FPR {kind} table not found")
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    need = list(FPR_COLUMNS) + (["method"] if kind == "generated" else [])
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise FPRLayoutError(f"{path}: missing column(s) {missing}; an FPR {kind} table needs "
                             f"{need} (found {list(df.columns)})")
    if len(df) == 0:
        raise FPRLayoutError(f"{path}: empty {kind} table")
    for col in need:
        bad = np.flatnonzero(df[col].str.strip().eq("").to_numpy())
        if len(bad):
            raise FPRLayoutError(f"{path}: empty '{col}' on line(s) {_rows(bad)}")
    key = ["file_path"] + (["method"] if kind == "generated" else [])
    dup = np.flatnonzero(df.duplicated(key, keep=False).to_numpy())
    if len(dup):
        raise FPRLayoutError(f"{path}: duplicate {'/'.join(key)} on line(s) {_rows(dup)} "
                             f"(e.g. {df.file_path.iloc[dup[0]]!r})")
    if root is None:
        root = _guess_root(path, df.file_path.iloc[0])
    if check_files:
        base = Path(root)
        cols = ["file_path", "ref_path"] + (["mask_path"] if "mask_path" in df.columns else [])
        for col in cols:
            vals = df[col].to_numpy()
            miss = [i for i, v in enumerate(vals) if v and not _resolve(base, v).exists()]
            if miss:
                raise FPRLayoutError(f"{path}: '{col}' names missing file(s) on line(s) {_rows(miss)}: "
                                     f"{vals[miss[0]]!r} (resolved under {base})")
    # extra metadata columns (e.g. the simulated methods' true ``drift``) come back as numbers
    for c in df.columns:
        if c not in FPR_COLUMNS + OPTIONAL_COLUMNS + ("context",):
            try:
                df[c] = pd.to_numeric(df[c])
            except (ValueError, TypeError):
                pass
    df.attrs["source"] = str(path)
    df.attrs["root"] = str(root)
    return df


def _guess_root(csv: Path, first: str) -> Path:
    """Where relative paths of ``csv`` live: its folder (the released FPR layout) or the nearest
    ancestor where the first row's file exists (our world: paths relative to the dataset root)."""
    if Path(first).is_absolute():
        return csv.parent
    for base in [csv.parent, *list(csv.parents)[1:4]]:
        if (base / first).exists():
            return base
    return csv.parent


def write_fpr_table(df: pd.DataFrame, path: str | os.PathLike, kind: str = "gallery") -> Path:
    """Write an FPR table atomically (the layout's columns first, extra columns after)."""
    need = list(FPR_COLUMNS) + (["method"] if kind == "generated" else [])
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise FPRLayoutError(f"{path}: cannot write an FPR {kind} table without column(s) {missing}")
    cols = need + [c for c in df.columns if c not in need]
    return write_csv(df[cols], Path(path))


def _resolve(base: Path, p: str) -> Path:
    q = Path(p)
    return q if q.is_absolute() else base / q


def resolve_paths(df: pd.DataFrame, cols: Sequence[str] = ("file_path", "ref_path", "mask_path"),
                  root: str | os.PathLike | None = None) -> pd.DataFrame:
    """A copy of ``df`` whose path columns are absolute (relative to ``root`` or ``df.attrs['root']``)."""
    base = Path(root if root is not None else df.attrs.get("root", "."))
    out = df.copy()
    for c in cols:
        if c in out.columns:
            out[c] = [str(_resolve(base, v)) if v else "" for v in out[c]]
    out.attrs = dict(df.attrs)
    return out


def check_disjoint(train: pd.DataFrame, gallery: pd.DataFrame, train_file: str = "train_data.csv",
                   gallery_file: str = "gallery_data.csv") -> None:
    """The protocol's rule: no image is both a reference and a gallery image; every reference
    identity has gallery images. Raises :class:`FPRLayoutError` naming the files and rows."""
    tp = train.attrs.get("root"), gallery.attrs.get("root")
    a = resolve_paths(train, ("file_path",)) if tp[0] else train
    b = resolve_paths(gallery, ("file_path",)) if tp[1] else gallery
    ta = {os.path.normpath(p): i for i, p in enumerate(a.file_path)}
    both = [(ta[os.path.normpath(p)], j) for j, p in enumerate(b.file_path) if os.path.normpath(p) in ta]
    if both:
        ti, gi = zip(*both)
        raise FPRLayoutError(
            f"reference/gallery overlap: {len(both)} image(s) are in both {train_file} (line(s) "
            f"{_rows(ti)}) and {gallery_file} (line(s) {_rows(gi)}), e.g. {b.file_path.iloc[gi[0]]!r}")
    no_gal = sorted(set(train.name) - set(gallery.name))
    if no_gal:
        raise FPRLayoutError(f"{train_file}: identities {no_gal[:8]} have no image in {gallery_file} "
                             f"(retrieval is undefined for them)")


@dataclass
class FPRSplit:
    """A validated reference set + gallery (absolute paths)."""

    train: pd.DataFrame
    gallery: pd.DataFrame
    root: Path


def load_fpr_split(folder: str | os.PathLike, check_files: bool = True) -> FPRSplit:
    """``train_data.csv`` + ``gallery_data.csv`` from ``folder`` (e.g. ``<dataset root>/fpr``),
    validated (columns, files, disjointness) and with absolute paths."""
    folder = Path(folder)

    def read(fn, kind):
        return read_fpr_table(folder / fn, kind, check_files=check_files)
    train, gallery = read("train_data.csv", "train"), read("gallery_data.csv", "gallery")
    check_disjoint(train, gallery, str(folder / "train_data.csv"), str(folder / "gallery_data.csv"))
    return FPRSplit(resolve_paths(train), resolve_paths(gallery), folder)


_IMG_EXT = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


def read_generated(source: str | os.PathLike | pd.DataFrame, method: str | None = None,
                   train: pd.DataFrame | None = None, check_files: bool = True) -> pd.DataFrame:
    """Generated images as a validated table with absolute paths.

    ``source`` is a ``generated_data.csv``, a DataFrame in that layout, or a *folder*: then every
    image ``<folder>/<name>/<file>`` (one subfolder per identity) or ``<folder>/<name>__<anything>.png``
    is a generated image of identity ``name``; ``species`` and ``ref_path`` come from ``train``
    (the reference table; its first reference of the identity). ``method`` fills or filters the
    ``method`` column (default for folders: the folder's name)."""
    if isinstance(source, pd.DataFrame):
        df = source.copy()
        df.attrs = dict(source.attrs)
        if "method" not in df.columns:
            df["method"] = method or "generated"
        for c in FPR_COLUMNS:
            if c not in df.columns:
                raise FPRLayoutError(f"generated table: missing column {c!r}")
        return df if method is None else df[df.method == method].reset_index(drop=True)
    src = Path(source)
    if src.is_file():
        if src.suffix.lower() != ".csv":
            raise FPRLayoutError(f"{src}: expected a generated_data.csv or a folder of images")
        has_method = "method" in pd.read_csv(src, nrows=0).columns
        if has_method:
            df = read_fpr_table(src, "generated", check_files=check_files)
        else:
            df = _with_method(pd.read_csv(src, dtype=str, keep_default_na=False), src,
                              method or src.parent.name, check_files)
        df = resolve_paths(df)
        return df if (method is None or not has_method) else df[df.method == method].reset_index(drop=True)
    if not src.is_dir():
        raise FPRLayoutError(f"{src}: no such generated_data.csv or folder")
    if train is None:
        raise FPRLayoutError(f"{src}: a folder of generated images needs the reference table "
                             f"(train=...) for each identity's species and ref_path")
    refs = train.drop_duplicates("name").set_index("name")
    rows = []
    for p in sorted(src.rglob("*")):
        if p.suffix.lower() not in _IMG_EXT or p.is_dir():
            continue
        rel = p.relative_to(src)
        name = rel.parts[0] if len(rel.parts) > 1 else p.stem.split("__")[0]
        if name not in refs.index:
            raise FPRLayoutError(f"{p}: identity {name!r} (from the file/folder name) is not in the "
                                 f"reference table; name files <identity>__<k>.png or put them in "
                                 f"<identity>/ subfolders")
        rows.append({"name": name, "species": refs.loc[name, "species"], "file_path": str(p),
                     "ref_path": refs.loc[name, "ref_path"], "method": method or src.name})
    if not rows:
        raise FPRLayoutError(f"{src}: no images ({', '.join(_IMG_EXT)}) found")
    df = pd.DataFrame(rows)
    df.attrs["source"] = str(src)
    return df


def _with_method(raw: pd.DataFrame, src: Path, method: str, check_files: bool) -> pd.DataFrame:
    raw = raw.copy()
    raw["method"] = method
    for c in FPR_COLUMNS:
        if c not in raw.columns:
            raise FPRLayoutError(f"{src}: missing column {c!r}")
    if check_files:
        for i, v in enumerate(raw.file_path):
            if not _resolve(src.parent, v).exists():
                raise FPRLayoutError(f"{src}: 'file_path' names a missing file on line {i + 2}: {v!r}")
    raw.attrs["source"], raw.attrs["root"] = str(src), str(src.parent)
    return raw


# ----------------------------------------------------------------------------- real datasets
# CUB-200-2011 class names. The paper names its three groups (wren, sparrow, tern) and, of the
# sparrows, Baird, Black-throated, Brewer (Section 4.1) and Chipping / Clay-colored (Appendix B,
# Fig. 8). Those five are exactly the first five sparrows in CUB's class order, so our documented
# rule is: each group = the first five CUB classes of that group in class-id order.
CUB_GROUPS: dict[str, tuple[str, ...]] = {
    "sparrow": ("Baird_Sparrow", "Black_throated_Sparrow", "Brewer_Sparrow", "Chipping_Sparrow",
                "Clay_colored_Sparrow"),
    "tern": ("Arctic_Tern", "Black_Tern", "Caspian_Tern", "Common_Tern", "Elegant_Tern"),
    "wren": ("Bewick_Wren", "Cactus_Wren", "Carolina_Wren", "House_Wren", "Marsh_Wren"),
}
WILDLIFE_SPECIES = ("cow", "zebra", "tiger", "giraffe", "leopard")
N_CARS_MODELS = 15


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
            raise FPRLayoutError(f"identity {name!r}: {len(grp)} images, need at least "
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
    """Stanford Cars: 15 visually similar luxury sedan models (identity = model). The paper does
    not list them; pass ``models`` (15 class names) to pin them. Without it, the documented rule:
    classes whose name contains "Sedan", from the brands with the most sedan classes among
    (Audi, BMW, Mercedes-Benz, Cadillac, Lexus, Jaguar, Bentley, Rolls-Royce, ...), the first 15 in
    class-name order. ``meta`` has ``class_name`` and ``file_path``; ``species`` = "car"."""
    if "class_name" not in meta.columns or "file_path" not in meta.columns:
        raise FPRLayoutError("Cars metadata: need columns class_name, file_path")
    names = sorted(meta.class_name.astype(str).unique())
    if models is None:
        lux = ("audi", "bmw", "mercedes", "cadillac", "lexus", "jaguar", "bentley", "rolls", "infiniti",
               "acura", "lincoln", "maybach", "porsche", "aston", "volvo")
        sedans = [n for n in names if "sedan" in n.lower() and n.lower().startswith(lux)]
        if len(sedans) < N_CARS_MODELS:
            raise FPRLayoutError(f"Cars metadata: only {len(sedans)} luxury sedan classes found "
                                 f"(need {N_CARS_MODELS}); pass models=[...]")
        models = sedans[:N_CARS_MODELS]
    missing = sorted(set(models) - set(names))
    if missing:
        raise FPRLayoutError(f"Cars metadata: model(s) {missing} not found")
    sel = meta[meta.class_name.isin(models)].copy()
    sel["name"], sel["species"] = sel.class_name.astype(str), "car"
    return split_reference_gallery(sel, n_ref, n_gallery, seed, sampling,
                                   _sub_emb(embeddings, meta, sel), key="cars")


def build_wildlife_split(meta: pd.DataFrame, species: Sequence[str] = WILDLIFE_SPECIES,
                         ids_per_species: int = 10, seed: int = 0, n_gallery: int = 10,
                         n_ref: int | tuple[int, int] = (5, 10), sampling: str = "random",
                         embeddings: np.ndarray | None = None) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """WildlifeReID-10k: ten identities for each of cow, zebra, tiger, giraffe, leopard. ``meta``
    has ``identity``, ``species`` and ``file_path`` (WildlifeReID-10k's metadata: ``identity``,
    ``species``, ``path``; ``path`` is accepted too). Identities with enough images
    (``n_gallery + min refs``) are eligible; ``ids_per_species`` are drawn with a seeded RNG.
    Returns ``{species: (train, gallery)}``."""
    meta = meta.rename(columns={"path": "file_path"}) if "file_path" not in meta.columns else meta
    for c in ("identity", "species", "file_path"):
        if c not in meta.columns:
            raise FPRLayoutError(f"WildlifeReID metadata: missing column {c!r}")
    lo = n_ref if isinstance(n_ref, int) else n_ref[0]
    out = {}
    sp_norm = meta.species.astype(str).str.lower()
    for sp in species:
        sel = meta[sp_norm.str.contains(sp.lower())].copy()
        counts = sel.groupby("identity").size()
        ok = sorted(counts[counts >= n_gallery + lo].index.astype(str))
        if len(ok) < ids_per_species:
            raise FPRLayoutError(f"WildlifeReID metadata: species {sp!r} has {len(ok)} identities with "
                                 f">= {n_gallery + lo} images, need {ids_per_species}")
        pick = make_rng(seed, "wildlife", sp).choice(len(ok), size=ids_per_species, replace=False)
        keep = {ok[i] for i in pick}
        sel = sel[sel.identity.astype(str).isin(keep)].copy()
        sel["name"], sel["species"] = sel.identity.astype(str), sp
        out[sp] = split_reference_gallery(sel, n_ref, n_gallery, seed, sampling,
                                          _sub_emb(embeddings, meta, sel), key=f"wildlife_{sp}")
    return out
