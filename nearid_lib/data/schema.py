"""The on-disk NearID dataset schema (profile-blind contract between data, training and
evaluation) and its validating loader :func:`load_nearid`.

Layout under ``root`` (all paths in tables relative to ``root``; images PNG RGB, masks PNG ``L``
with 255 = object)::

    manifest.json                {"complete": true, "schema_version": 1, "profile", "seed", "counts"}
    identities.csv               id, split, class_name, description, n_views
    positives.csv                id, split, img1, img2, img3, mask1, mask2, mask3
    distractors/<source>.csv     id, split, nimg1, nimg2, nimg3   (row-aligned with positives.csv)
    sources.json                 {"sources": [...], "train_sources": [...]}
    mtg.csv                      pair_id, split, class_name, image_{1,2}_{original,inpainted,
                                 object_mask,part_mask}, oracle_1, oracle_2
    grids.csv                    anchor_id, split, grid, identity_level, factor_level,
                                 identity_change, factor_change, path, mask
    graded.csv                   the grids.csv columns: edit grids of anchors of their own (ID-Sim's
                                 Subjects2k / DreamBench++ analogue; optional)
    fpr/train_data.csv, fpr/gallery_data.csv   name, species, file_path, ref_path, mask_path

Image-mode rule: the library's one loader, :mod:`nearid_lib.imageio` (:func:`read_rgb` and
:func:`read_mask` delegate to it): EXIF orientation applied, alpha composited onto black (as
foreground-only evaluation does), 16-bit images scaled by their bit depth, other modes converted
to RGB. Masks are read as "pixel >= 128".
Every other problem raises :class:`DataError` naming the dataset, row and field.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
from PIL import Image

from ..imageio import ImageError, load_image, load_mask

__all__ = ["SCHEMA_VERSION", "DataError", "NearIDData", "load_nearid", "read_rgb", "read_mask",
           "validate_images", "COLUMNS", "is_complete"]

SCHEMA_VERSION = 1

COLUMNS = {
    "identities.csv": ["id", "split", "class_name", "description", "n_views"],
    "positives.csv": ["id", "split", "img1", "img2", "img3", "mask1", "mask2", "mask3"],
    "distractor": ["id", "split", "nimg1", "nimg2", "nimg3"],
    "mtg.csv": ["pair_id", "split", "class_name", "image_1_original", "image_2_original",
                "image_1_inpainted", "image_2_inpainted", "image_1_object_mask",
                "image_2_object_mask", "image_1_part_mask", "image_2_part_mask", "oracle_1",
                "oracle_2"],
    "grids.csv": ["anchor_id", "split", "grid", "identity_level", "factor_level",
                  "identity_change", "factor_change", "path", "mask"],
    "fpr": ["name", "species", "file_path", "ref_path", "mask_path"],
}
_SPLITS = {"train", "val", "test"}


class DataError(ValueError):
    """A dataset problem; the message names the dataset (file), the row and the field."""


def _where(dataset: str, row: Any = None, field_: str | None = None) -> str:
    parts = [f"dataset {dataset}"]
    if row is not None:
        parts.append(f"row {row}")
    if field_ is not None:
        parts.append(f"field {field_!r}")
    return ", ".join(parts)


def read_rgb(path: str | os.PathLike | Any, where: str = "") -> Image.Image:
    """Open an image (a path, or any source :func:`~nearid_lib.imageio.load_image` takes, e.g. a
    PIL image or a file object) as 8-bit RGB by the rule of :mod:`nearid_lib.imageio` (errors: DataError)."""
    try:
        return load_image(Path(path) if isinstance(path, (str, os.PathLike)) else path, where)
    except ImageError as e:
        raise DataError(str(e)) from None


def read_mask(path: str | os.PathLike, where: str = "", size: tuple[int, int] | None = None,
              allow_empty: bool = False) -> np.ndarray:
    """Open a mask as a bool array (pixel >= 128 of its grayscale); check its ``size`` (W, H)
    against the image's and that it selects at least one pixel."""
    tag = f"{where}: " if where else ""
    try:
        m = load_mask(Path(path), where)
    except ImageError as e:
        raise DataError(str(e)) from None
    msize = (m.shape[1], m.shape[0])
    if size is not None and tuple(size) != tuple(msize):
        raise DataError(f"{tag}mask size {msize} differs from its image size {tuple(size)} ({path})")
    if not allow_empty and not m.any():
        raise DataError(f"{tag}mask is empty (no pixel >= 128): {path}")
    return m


def _read_csv(root: Path, rel: str, required: list[str]) -> pd.DataFrame:
    path = root / rel
    if not path.exists():
        raise DataError(f"{_where(rel)}: file missing under {root}")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except Exception as e:  # pandas raises several types on malformed CSV
        raise DataError(f"{_where(rel)}: cannot parse CSV: {e}") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DataError(f"{_where(rel)}: missing column(s) {missing}; has {list(df.columns)}")
    return df


def _check_split(df: pd.DataFrame, rel: str) -> None:
    bad = ~df["split"].isin(_SPLITS)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(f"{_where(rel, i, 'split')}: {df['split'].iloc[i]!r} is not one of "
                        f"{sorted(_SPLITS)}")


def _as_numeric(df: pd.DataFrame, cols: list[str], rel: str, kind=float) -> pd.DataFrame:
    for c in cols:
        try:
            df[c] = df[c].astype(kind)
        except ValueError:
            for i, v in enumerate(df[c]):
                try:
                    kind(v)
                except ValueError:
                    raise DataError(f"{_where(rel, i, c)}: {v!r} is not a number") from None
    return df


def is_complete(root: str | os.PathLike) -> bool:
    """True when ``root/manifest.json`` exists and says ``complete``."""
    p = Path(root) / "manifest.json"
    try:
        return bool(json.loads(p.read_text()).get("complete"))
    except (OSError, json.JSONDecodeError):
        return False


@dataclass
class NearIDData:
    """A loaded NearID dataset (procedural or released, same schema)."""

    root: Path
    manifest: dict
    identities: pd.DataFrame
    positives: pd.DataFrame
    distractors: dict[str, pd.DataFrame]
    sources: list[str]
    train_sources: list[str]
    mtg: pd.DataFrame | None = None
    grids: pd.DataFrame | None = None
    graded: pd.DataFrame | None = None
    fpr_train: pd.DataFrame | None = None
    fpr_gallery: pd.DataFrame | None = None
    source_splits: dict = field(default_factory=dict)   # source -> splits that have its distractors
    _size: dict = field(default_factory=dict, repr=False)

    def path(self, relpath: str) -> Path:
        """Absolute path of a table entry."""
        return self.root / relpath

    def image(self, relpath: str, where: str = "") -> Image.Image:
        """PIL RGB image (documented mode conversion, see module docstring)."""
        if not relpath:
            raise DataError(f"{where or 'image'}: empty path (missing view)")
        return read_rgb(self.root / relpath, where or relpath)

    def mask(self, relpath: str, where: str = "", size: tuple[int, int] | None = None) -> np.ndarray:
        """Bool foreground mask [H, W]; raises on an empty mask or a size mismatch with ``size``."""
        if not relpath:
            raise DataError(f"{where or 'mask'}: empty path (missing view)")
        return read_mask(self.root / relpath, where or relpath, size=size)

    def views(self, split: str | None = None) -> pd.DataFrame:
        """Long table: one row per (identity, view k) with img/mask and every source's nimg."""
        rows = []
        pos = self.positives if split is None else self.positives[self.positives.split == split]
        for i, r in pos.iterrows():
            for k in (1, 2, 3):
                if not r[f"img{k}"]:
                    continue
                row = {"id": r["id"], "split": r["split"], "view": k, "img": r[f"img{k}"],
                       "mask": r[f"mask{k}"]}
                for s, d in self.distractors.items():
                    row[f"nimg_{s}"] = d.at[i, f"nimg{k}"]
                rows.append(row)
        return pd.DataFrame(rows)


def load_nearid(root: str | os.PathLike, check_images: bool | int = False,
                require_complete: bool = True, splits: Sequence[str] | None = None) -> NearIDData:
    """Load and validate a NearID dataset at ``root``.

    ``splits`` (e.g. ``("test",)``, what scoring reads): also accept a finished split-selected
    build (``build_world(..., splits=...)``, manifest ``"partial": true``) that holds those splits;
    by default such a dataset is refused, so nothing mistakes it for the whole world.

    Checks: manifest complete (unless ``require_complete=False``), required columns, splits,
    every identity has at least two views (img1 and img2) with masks, distractor tables have the
    same length and id order as ``positives.csv`` and a distractor wherever a view exists, and
    ``sources.json`` lists existing tables. ``check_images``: True opens every positive
    image/mask (sizes, empty masks, corrupt files); an int opens that many rows of each table."""
    root = Path(root)
    if not root.exists():
        raise DataError(f"dataset root {root} does not exist (build it with "
                        f"nearid_lib.data.build_world or a released loader)")
    manifest = _read_manifest(root, require_complete, splits)
    ids = _read_identities(root)
    pos = _read_positives(root, ids)
    sources, train_sources, source_splits = _read_sources(root)
    dists = {s: _read_distractors(root, s, pos, source_splits[s]) for s in sources}
    mtg, grids, graded = _read_mtg(root), _read_grids(root), _read_grids(root, "graded.csv")
    fpr_train, fpr_gallery = _read_fpr(root)
    data = NearIDData(root=root, manifest=manifest, identities=ids, positives=pos,
                      distractors=dists, sources=sources, train_sources=train_sources, mtg=mtg,
                      grids=grids, graded=graded, fpr_train=fpr_train, fpr_gallery=fpr_gallery,
                      source_splits=source_splits)
    if check_images:
        validate_images(data, limit=None if check_images is True else int(check_images))
    return data


def _read_manifest(root: Path, require_complete: bool, splits: Sequence[str] | None = None) -> dict:
    manifest: dict = {}
    mpath = root / "manifest.json"
    if mpath.exists():
        try:
            manifest = json.loads(mpath.read_text())
        except json.JSONDecodeError as e:
            raise DataError(f"{_where('manifest.json')}: invalid JSON: {e}") from None
    held = list(manifest.get("splits", ())) if manifest.get("partial") else []
    partial_ok = bool(held) and splits is not None and set(splits) <= set(held)
    if require_complete and held and not manifest.get("complete") and not partial_ok:
        raise DataError(f"dataset at {root} holds only the split(s) {', '.join(held)} (built for scoring, "
                        f"manifest.json 'partial'): build the whole world with "
                        f"nearid_lib.data.build_world(get_profile({manifest.get('profile', '...')!r})), "
                        f"which resumes it")
    if require_complete and not manifest.get("complete") and not partial_ok:
        raise DataError(f"dataset at {root} is incomplete (manifest.json missing or not complete):"
                        f" a build was interrupted; rerun it to resume")
    if manifest and manifest.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
        raise DataError(f"{_where('manifest.json', None, 'schema_version')}: "
                        f"{manifest.get('schema_version')} != {SCHEMA_VERSION}")
    return manifest


def _read_identities(root: Path) -> pd.DataFrame:
    ids = _read_csv(root, "identities.csv", COLUMNS["identities.csv"])
    _check_split(ids, "identities.csv")
    return _as_numeric(ids, ["n_views"], "identities.csv", int)


def _read_positives(root: Path, ids: pd.DataFrame) -> pd.DataFrame:
    """positives.csv: the identities' ids in their order, unique, at least two views per identity,
    an image and its mask together."""
    pos = _read_csv(root, "positives.csv", COLUMNS["positives.csv"])
    _check_split(pos, "positives.csv")
    if list(pos["id"]) != list(ids["id"]):
        raise DataError(f"{_where('positives.csv', None, 'id')}: ids/order differ from identities.csv")
    dup = pos["id"].duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise DataError(f"{_where('positives.csv', i, 'id')}: duplicate id {pos['id'].iloc[i]!r}")
    for i, r in pos.iterrows():
        for k in (1, 2):
            if not r[f"img{k}"]:
                raise DataError(f"{_where('positives.csv', i, f'img{k}')}: identity {r['id']!r} "
                                f"has fewer than two views (NearID needs >= 2 positives)")
        for k in (1, 2, 3):
            if bool(r[f"img{k}"]) != bool(r[f"mask{k}"]):
                raise DataError(f"{_where('positives.csv', i, f'mask{k}')}: identity {r['id']!r}:"
                                f" img{k} and mask{k} must both be present or both empty")
    return pos


def _read_sources(root: Path) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """Source names, training sources, and the splits each source covers (``source_splits``;
    absent: every split - a source never used in training may exist only where it is scored)."""
    spath = root / "sources.json"
    if not spath.exists():
        raise DataError(f"{_where('sources.json')}: file missing under {root}")
    sj = json.loads(spath.read_text())
    sources = list(sj.get("sources", []))
    train_sources = list(sj.get("train_sources", []))
    if set(train_sources) - set(sources):
        raise DataError(f"{_where('sources.json', None, 'train_sources')}: "
                        f"{sorted(set(train_sources) - set(sources))} not in sources")
    given = {s: list(v) for s, v in (sj.get("source_splits") or {}).items()}
    bad = sorted(set(given) - set(sources))
    if bad:
        raise DataError(f"{_where('sources.json', None, 'source_splits')}: {bad} not in sources")
    for s, v in given.items():
        if set(v) - _SPLITS:
            raise DataError(f"{_where('sources.json', None, 'source_splits')}: {s}: unknown split(s) "
                            f"{sorted(set(v) - _SPLITS)}; valid: {sorted(_SPLITS)}")
    return sources, train_sources, {s: given.get(s, sorted(_SPLITS)) for s in sources}


def _read_distractors(root: Path, source: str, pos: pd.DataFrame, splits: Sequence[str]) -> pd.DataFrame:
    """``distractors/<source>.csv``, row-aligned with the positives, a distractor for every view
    of the identities in ``splits`` (empty cells elsewhere)."""
    rel = f"distractors/{source}.csv"
    d = _read_csv(root, rel, COLUMNS["distractor"])
    if len(d) != len(pos):
        raise DataError(f"{_where(rel)}: {len(d)} rows but positives.csv has {len(pos)}; "
                        f"distractor tables must be row-aligned with the positives"
                        + (f" (first differing row {_first_diff(d, pos)})" if len(d) else ""))
    ne = d["id"].to_numpy() != pos["id"].to_numpy()
    if ne.any():
        i = int(np.flatnonzero(ne)[0])
        raise DataError(f"{_where(rel, i, 'id')}: {d['id'].iloc[i]!r} but positives.csv row {i} "
                        f"is {pos['id'].iloc[i]!r} (tables are not row-aligned)")
    for k in (1, 2, 3):
        covered = pos["split"].isin(list(splits)).to_numpy()
        miss = covered & (pos[f"img{k}"] != "").to_numpy() & (d[f"nimg{k}"] == "").to_numpy()
        if miss.any():
            i = int(np.flatnonzero(miss)[0])
            raise DataError(f"{_where(rel, i, f'nimg{k}')}: view {k} of {pos['id'].iloc[i]!r} "
                            f"exists but has no distractor")
    return d


def _read_optional(root: Path, rel: str, cols: list[str], numeric=()) -> pd.DataFrame | None:
    if not (root / rel).exists():
        return None
    df = _read_csv(root, rel, cols)
    if "split" in df.columns:
        _check_split(df, rel)
    return _as_numeric(df, list(numeric), rel)


def _read_mtg(root: Path) -> pd.DataFrame | None:
    return _read_optional(root, "mtg.csv", COLUMNS["mtg.csv"], ("oracle_1", "oracle_2"))


def _read_grids(root: Path, rel: str = "grids.csv") -> pd.DataFrame | None:
    grids = _read_optional(root, rel, COLUMNS["grids.csv"], ("identity_change", "factor_change"))
    if grids is not None:
        grids = _as_numeric(grids, ["identity_level", "factor_level"], rel, int)
    return grids


def _read_fpr(root: Path) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """The FPR reference and gallery tables (disjoint); ``mask_path`` is optional for released
    galleries (empty = no mask available)."""
    fpr_train = _read_optional(root, "fpr/train_data.csv", COLUMNS["fpr"][:4])
    fpr_gallery = _read_optional(root, "fpr/gallery_data.csv", COLUMNS["fpr"][:4])
    for df in (fpr_train, fpr_gallery):
        if df is not None and "mask_path" not in df.columns:
            df["mask_path"] = ""
    if fpr_train is not None and fpr_gallery is not None:
        both = set(fpr_train.file_path) & set(fpr_gallery.file_path)
        if both:
            raise DataError(f"{_where('fpr/gallery_data.csv', None, 'file_path')}: "
                            f"{len(both)} image(s) also in train_data.csv, e.g. {sorted(both)[0]}")
    return fpr_train, fpr_gallery


def _first_diff(d: pd.DataFrame, pos: pd.DataFrame) -> int:
    n = min(len(d), len(pos))
    ne = np.flatnonzero(d["id"].to_numpy()[:n] != pos["id"].to_numpy()[:n])
    return int(ne[0]) if len(ne) else n


def validate_images(data: NearIDData, limit: int | None = None) -> None:
    """Open images and masks (first ``limit`` rows per table, all if None) and check decoding,
    mask/image sizes and non-empty masks; raises :class:`DataError` naming dataset/row/field."""
    pos = data.positives if limit is None else data.positives.head(limit)
    for i, r in pos.iterrows():
        for k in (1, 2, 3):
            if not r[f"img{k}"]:
                continue
            im = data.image(r[f"img{k}"], _where("positives.csv", i, f"img{k}"))
            data.mask(r[f"mask{k}"], _where("positives.csv", i, f"mask{k}"), size=im.size)
            for s, d in data.distractors.items():
                if r["split"] not in data.source_splits.get(s, _SPLITS):
                    continue
                nim = data.image(d.at[i, f"nimg{k}"], _where(f"distractors/{s}.csv", i, f"nimg{k}"))
                if nim.size != im.size:
                    raise DataError(f"{_where(f'distractors/{s}.csv', i, f'nimg{k}')}: size "
                                    f"{nim.size} differs from img{k} size {im.size}")
    if data.mtg is not None:
        mtg = data.mtg if limit is None else data.mtg.head(limit)
        for i, r in mtg.iterrows():
            for k in (1, 2):
                w = lambda f: _where("mtg.csv", i, f)  # noqa: E731
                im = data.image(r[f"image_{k}_original"], w(f"image_{k}_original"))
                data.image(r[f"image_{k}_inpainted"], w(f"image_{k}_inpainted"))
                data.mask(r[f"image_{k}_object_mask"], w(f"image_{k}_object_mask"), size=im.size)
                read_mask(data.root / r[f"image_{k}_part_mask"], w(f"image_{k}_part_mask"),
                          size=im.size, allow_empty=True)
