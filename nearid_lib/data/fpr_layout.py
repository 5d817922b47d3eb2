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

Paths are relative to the CSV's folder unless absolute. This module reads, validates and writes
the tables; the paper's dataset builders and gallery sampling live in :mod:`nearid_lib.fpr.datasets`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from ..io_utils import write_csv

__all__ = [
    "FPR_COLUMNS", "FPRLayoutError", "FPRSplit", "read_fpr_table", "write_fpr_table", "load_fpr_split",
    "check_disjoint", "resolve_paths", "read_generated",
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
                   root: str | os.PathLike | None = None, *, numeric_metadata: bool = True) -> pd.DataFrame:
    """Read one FPR table and validate it: the one reader of the layout (also behind
    :func:`nearid_lib.data.eval_datasets.load_fpr`).

    ``kind`` is ``"train"``, ``"gallery"`` or ``"generated"`` (``generated`` requires ``method``).
    Paths are kept as written; ``root`` is where relative paths are resolved (default: the CSV's
    folder, or the nearest ancestor where the first file exists, as in our dataset root). Extra
    metadata columns come back as numbers where they parse (``numeric_metadata=False``: as
    written). Raises :class:`FPRLayoutError` naming the file, the CSV line numbers and the field
    for missing columns, empty cells, duplicate images and missing files."""
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
    if numeric_metadata:
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
    # table name -> why this run cannot produce it (the paper profile's absent downloads); empty
    # for the procedural world
    skipped: dict = field(default_factory=dict)


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
