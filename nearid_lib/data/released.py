"""Loaders for the released datasets, all materialised into the NearID on-disk schema (see
``nearid_lib.data.schema``) so every later notebook is profile-blind.

- NearID positives (``Aleksandar/NearID``) and its row-aligned distractor datasets per source
  (``Aleksandar/NearID-{Flux,...}``). Column spellings accepted: images ``img1..3`` or
  ``images1..3`` (or ``image1..3``), masks ``mask1..3`` or ``masks1..3``, distractors
  ``nimg1..3`` (or ``images1..3`` / ``img1..3``). A missing third view is ``None``.
- MTG (``abdo-eldesokey/mtg-dataset``): ``image_{1,2}_original``, ``image_{1,2}_inpainted``,
  ``image_{1,2}_object_mask``, ``image_{1,2}_part_mask``; the oracle ``1 - |part|/|object|`` is
  computed from the masks.
- FPR CSV folders, copied in by :func:`materialise_released` (read with
  :func:`nearid_lib.data.benchmarks.load_fpr`; DreamBench++ is read in place by
  :func:`nearid_lib.data.benchmarks.load_dreambenchpp`).

Every loader takes local data (a ``datasets.Dataset``/``DatasetDict`` object, a folder written by
``save_to_disk``, or a CSV folder). Only :func:`load_released_from_hub` downloads (paper profile;
never called in tests). Image modes follow the rule in ``nearid_lib.data.schema``; bad rows raise
:class:`~nearid_lib.data.schema.DataError` naming dataset, row and field.
"""
from __future__ import annotations

import io
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pandas as pd
from PIL import Image, UnidentifiedImageError

from ..io_utils import atomic_write, write_csv, write_json
from ..paths import data_dir
from .benchmarks import load_fpr
from .schema import SCHEMA_VERSION, DataError, read_rgb

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["materialise_released", "load_released_from_hub",
           "pil_from_value", "IMG_SPELLINGS", "MASK_SPELLINGS", "NIMG_SPELLINGS"]

IMG_SPELLINGS = ("img{k}", "images{k}", "image{k}")
MASK_SPELLINGS = ("mask{k}", "masks{k}")
NIMG_SPELLINGS = ("nimg{k}", "images{k}", "img{k}", "image{k}")
_SPLIT_NAMES = {"train": "train", "validation": "val", "valid": "val", "val": "val", "test": "test"}


# --------------------------------------------------------------------------- values -> PIL
def pil_from_value(value: Any, where: str) -> Image.Image | None:
    """A dataset cell (PIL image, ``{"bytes", "path"}`` dict, bytes, path, array) -> PIL image
    (not yet mode-converted), ``None`` for a missing value. Corrupt data raises DataError."""
    if value is None:
        return None
    try:
        if isinstance(value, Image.Image):
            value.load()
            return value
        if isinstance(value, dict):
            if value.get("bytes"):
                value = value["bytes"]
            elif value.get("path"):
                value = value["path"]
            else:
                return None
        if isinstance(value, (bytes, bytearray)):
            im = Image.open(io.BytesIO(value))
            im.load()
            return im
        if isinstance(value, (str, os.PathLike)):
            if not str(value):
                return None
            im = Image.open(value)
            im.load()
            return im
        if isinstance(value, np.ndarray):
            return Image.fromarray(value)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise DataError(f"{where}: cannot decode image (corrupt or truncated?): {e}") from None
    raise DataError(f"{where}: unsupported image value of type {type(value).__name__}")


def _to_rgb(im: Image.Image, where: str) -> Image.Image:
    """The schema's documented mode rule (the one of ``read_rgb``, :mod:`nearid_lib.imageio`),
    applied to an open image: 16-bit and float modes scaled to 8 bit, alpha onto black."""
    return im if im.mode == "RGB" else read_rgb(im, where)


def _to_mask(im: Image.Image, where: str, size: tuple[int, int]) -> np.ndarray:
    if im.size != size:
        raise DataError(f"{where}: mask size {im.size} differs from its image size {size}")
    arr = (np.asarray(im).astype(np.float64) / 257.0 if im.mode in ("I;16", "I;16B", "I;16L", "I")
           else np.asarray(im.convert("L")))
    m = arr >= 128
    if not m.any():
        raise DataError(f"{where}: mask is empty (no pixel >= 128)")
    return m


def _save(root: Path, rel: str, im: Image.Image) -> str:
    atomic_write(root / rel, lambda p: im.save(p, format="PNG", compress_level=1))
    return rel


def _save_mask(root: Path, rel: str, m: np.ndarray) -> str:
    return _save(root, rel, Image.fromarray(m.astype(np.uint8) * 255, "L"))


# --------------------------------------------------------------------------- datasets
def _open_dataset(obj: Any, name: str):
    """``Dataset``/``DatasetDict`` object or a ``save_to_disk`` folder -> list of (split, Dataset)."""
    import datasets

    if isinstance(obj, (str, os.PathLike)):
        if not Path(obj).exists():
            raise DataError(f"dataset {name}: path {obj} does not exist")
        obj = datasets.load_from_disk(str(obj))
    if isinstance(obj, datasets.DatasetDict):
        out = []
        for k, ds in obj.items():
            if k not in _SPLIT_NAMES:
                raise DataError(f"dataset {name}: unknown split {k!r}; valid: {sorted(_SPLIT_NAMES)}")
            out.append((_SPLIT_NAMES[k], _no_decode(ds)))
        return out
    if isinstance(obj, datasets.Dataset):
        return [(None, _no_decode(obj))]
    raise DataError(f"dataset {name}: expected a datasets.Dataset/DatasetDict or a folder, "
                    f"got {type(obj).__name__}")


def _no_decode(ds):
    """Image columns as raw ``{"bytes", "path"}``: we decode ourselves, so that a corrupt cell
    raises a DataError naming its row and field instead of an anonymous PIL error."""
    import datasets

    for c, f in ds.features.items():
        if isinstance(f, datasets.Image) and f.decode:
            ds = ds.cast_column(c, datasets.Image(decode=False))
    return ds


def _pick(cols: list[str], spellings: tuple[str, ...], k: int, name: str, field: str,
          required: bool = True) -> str | None:
    for sp in spellings:
        c = sp.format(k=k)
        if c in cols:
            return c
    if required:
        raise DataError(f"dataset {name}: no column for {field} (tried "
                        f"{[s.format(k=k) for s in spellings]}); has {cols}")
    return None


def _first_col(cols, names):
    return next((c for c in names if c in cols), None)


def _materialise_nearid(root: Path, positives: Any, distractors: Mapping[str, Any],
                        pos_name: str) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, pd.DataFrame]]:
    """Write every split of the positives and their row-aligned distractor datasets as PNGs; the
    identities, positives and per-source distractor tables of the NearID schema."""
    splits = _open_dataset(positives, pos_name)
    dsplits = {s: _open_dataset(d, s) for s, d in distractors.items()}
    id_rows, pos_rows = [], []
    dist_rows: dict[str, list] = {s: [] for s in distractors}
    for si, (split_key, ds) in enumerate(splits):
        pc = _PositiveColumns(list(ds.column_names), pos_name)
        dsets = {s: _aligned_split(s, lst, si, split_key, len(ds), len(splits), pos_name, pc)
                 for s, lst in dsplits.items()}
        for i in range(len(ds)):
            ident, prow, sizes = _positive_row(root, ds[i], i, split_key, pc, pos_name)
            id_rows.append(ident)
            pos_rows.append(prow)
            for s, (d, dc, did_col) in dsets.items():
                dist_rows[s].append(_distractor_row(root, s, d[i], i, prow, sizes, dc, did_col, pc, pos_name))
    dup = pd.Series([r["id"] for r in pos_rows]).duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise DataError(f"dataset {pos_name}, row {i}, field 'id': duplicate id {pos_rows[i]['id']!r}")
    return (pd.DataFrame(id_rows), pd.DataFrame(pos_rows),
            {s: pd.DataFrame(r, columns=["id", "split", "nimg1", "nimg2", "nimg3"])
             for s, r in dist_rows.items()})


class _PositiveColumns:
    """Which column of a released positives dataset holds each field (accepted spellings)."""

    def __init__(self, cols: list[str], pos_name: str):
        self.img = [_pick(cols, IMG_SPELLINGS, k, pos_name, f"image {k}", required=k <= 2) for k in (1, 2, 3)]
        self.mask = [_pick(cols, MASK_SPELLINGS, k, pos_name, f"mask {k}", required=self.img[k - 1] is not None)
                     for k in (1, 2, 3)]
        self.id = _first_col(cols, ("id", "identity", "uid", "objaverse_id"))
        self.split = _first_col(cols, ("split",))
        self.cls = _first_col(cols, ("class_name", "category", "class"))
        self.desc = _first_col(cols, ("description", "caption", "prompt", "text"))


def _aligned_split(s: str, lst: list, si: int, split_key, n: int, n_splits: int, pos_name: str,
                   pc: _PositiveColumns) -> tuple[Any, list, str | None]:
    """Split ``si`` of distractor dataset ``s``, checked to be row-aligned with the positives:
    ``(dataset, distractor image column per view, id column)``."""
    if len(lst) != n_splits:
        raise DataError(f"dataset {s}: has {len(lst)} split(s) but {pos_name} has {n_splits}")
    dkey, d = lst[si]
    if dkey != split_key:
        raise DataError(f"dataset {s}: split {dkey!r} where {pos_name} has {split_key!r}")
    if len(d) != n:
        raise DataError(f"dataset {s}" + (f" split {split_key}" if split_key else "") +
                        f": {len(d)} rows but {pos_name} has {n}; distractor tables must be "
                        f"row-aligned with the positives (row {min(len(d), n)} is unmatched)")
    dcols = list(d.column_names)
    return (d, [_pick(dcols, NIMG_SPELLINGS, k, s, f"distractor image {k}", required=pc.img[k - 1] is not None)
                for k in (1, 2, 3)],
            _first_col(dcols, ("id", "identity", "uid", "objaverse_id")))


def _positive_row(root: Path, row: Mapping, i: int, split_key, pc: _PositiveColumns, pos_name: str):
    """Write the views and masks of one identity: ``(identities row, positives row, view sizes)``."""
    split = (row[pc.split] if pc.split else split_key) or "train"
    split = _SPLIT_NAMES.get(str(split), str(split))
    rid = str(row[pc.id]) if pc.id else f"{split}_{i:06d}"
    where = lambda f: f"dataset {pos_name}, row {i}, field {f!r}"  # noqa: E731
    prow = {"id": rid, "split": split}
    sizes = {}
    for k in (1, 2, 3):
        prow[f"img{k}"] = prow[f"mask{k}"] = ""
        c = pc.img[k - 1]
        im = pil_from_value(row[c], where(c)) if c else None
        if im is None:
            if k <= 2:
                raise DataError(f"{where(c or f'img{k}')}: identity {rid!r} has fewer than "
                                f"two views (NearID needs >= 2 positives)")
            continue
        im = _to_rgb(im, where(c))
        mv = pil_from_value(row[pc.mask[k - 1]], where(pc.mask[k - 1]))
        if mv is None:
            raise DataError(f"{where(pc.mask[k - 1])}: missing mask for view {k}")
        m = _to_mask(mv, where(pc.mask[k - 1]), im.size)
        prow[f"img{k}"] = _save(root, f"pos/{rid}_{k}.png", im)
        prow[f"mask{k}"] = _save_mask(root, f"mask/{rid}_{k}.png", m)
        sizes[k] = im.size
    ident = {"id": rid, "split": split, "class_name": str(row[pc.cls]) if pc.cls else "",
             "description": str(row[pc.desc]) if pc.desc else "", "n_views": len(sizes)}
    return ident, prow, sizes


def _distractor_row(root: Path, s: str, drow: Mapping, i: int, prow: dict, sizes: dict, dc: list,
                    did_col: str | None, pc: _PositiveColumns, pos_name: str) -> dict:
    """Write the distractors of source ``s`` for one identity (resized to its views): its row."""
    rid = prow["id"]
    dwhere = lambda f: f"dataset {s}, row {i}, field {f!r}"  # noqa: E731
    if did_col and pc.id and str(drow[did_col]) != rid:
        raise DataError(f"{dwhere(did_col)}: id {drow[did_col]!r} but {pos_name} row {i} "
                        f"is {rid!r} (tables are not row-aligned)")
    out = {"id": rid, "split": prow["split"]}
    for k in (1, 2, 3):
        out[f"nimg{k}"] = ""
        if k not in sizes:
            continue
        im = pil_from_value(drow[dc[k - 1]], dwhere(dc[k - 1]))
        if im is None:
            raise DataError(f"{dwhere(dc[k - 1])}: view {k} exists but has no distractor")
        im = _to_rgb(im, dwhere(dc[k - 1]))
        if im.size != sizes[k]:
            # Generators at other resolutions: Lanczos to the positive's size.
            im = im.resize(sizes[k], Image.LANCZOS)
        out[f"nimg{k}"] = _save(root, f"dist/{s}/{rid}_{k}.png", im)
    return out


def _materialise_mtg(root: Path, mtg: Any, name: str = "mtg") -> pd.DataFrame:
    rows = []
    for split_key, ds in _open_dataset(mtg, name):
        cols = list(ds.column_names)
        need = [f"image_{k}_{f}" for k in (1, 2) for f in ("original", "inpainted", "object_mask",
                                                         "part_mask")]
        missing = [c for c in need if c not in cols]
        if missing:
            raise DataError(f"dataset {name}: missing column(s) {missing}; has {cols}")
        id_col = _first_col(cols, ("pair_id", "id"))
        cls_col = _first_col(cols, ("class_name", "category", "class"))
        for i in range(len(ds)):
            r = ds[i]
            split = _SPLIT_NAMES.get(str(r["split"]), str(r["split"])) if "split" in cols else (split_key or "test")
            pid = str(r[id_col]) if id_col else f"{split}_{i:06d}"
            out = {"pair_id": pid, "split": split, "class_name": str(r[cls_col]) if cls_col else ""}
            for k in (1, 2):
                w = lambda f: f"dataset {name}, row {i}, field {f!r}"  # noqa: E731
                orig = _to_rgb(pil_from_value(r[f"image_{k}_original"], w(f"image_{k}_original"))
                               or _missing(w(f"image_{k}_original")), w(f"image_{k}_original"))
                inp = _to_rgb(pil_from_value(r[f"image_{k}_inpainted"], w(f"image_{k}_inpainted"))
                              or _missing(w(f"image_{k}_inpainted")), w(f"image_{k}_inpainted"))
                if inp.size != orig.size:
                    raise DataError(f"{w(f'image_{k}_inpainted')}: size {inp.size} differs from "
                                    f"image_{k}_original {orig.size}")
                om = _to_mask(pil_from_value(r[f"image_{k}_object_mask"], w(f"image_{k}_object_mask"))
                              or _missing(w(f"image_{k}_object_mask")), w(f"image_{k}_object_mask"), orig.size)
                pv = pil_from_value(r[f"image_{k}_part_mask"], w(f"image_{k}_part_mask")) or \
                    _missing(w(f"image_{k}_part_mask"))
                if pv.size != orig.size:
                    raise DataError(f"{w(f'image_{k}_part_mask')}: mask size {pv.size} differs from "
                                    f"its image size {orig.size}")
                pm = np.asarray(pv.convert("L")) >= 128
                base = f"mtg/{pid}_{k}"
                out[f"image_{k}_original"] = _save(root, base + "_original.png", orig)
                out[f"image_{k}_inpainted"] = _save(root, base + "_inpainted.png", inp)
                out[f"image_{k}_object_mask"] = _save_mask(root, base + "_object_mask.png", om)
                out[f"image_{k}_part_mask"] = _save_mask(root, base + "_part_mask.png", pm)
                # Part pixels outside the object do not count (MTG oracle definition).
                out[f"oracle_{k}"] = float(1.0 - (pm & om).sum() / om.sum())
            rows.append(out)
    return pd.DataFrame(rows)


def _missing(where: str):
    raise DataError(f"{where}: missing image")


def materialise_released(out_root: str | os.PathLike, positives: Any = None,
                         distractors: Mapping[str, Any] | None = None, mtg: Any = None,
                         train_sources: list[str] | None = None, fpr: str | os.PathLike | None = None,
                         positives_name: str = "NearID", profile: str = "paper",
                         seed: int = 0) -> Path:
    """Write released data into the NearID schema at ``out_root`` (manifest last).

    ``positives``/``distractors[source]``/``mtg``: ``datasets.Dataset``/``DatasetDict`` objects
    or ``save_to_disk`` folders; ``fpr``: a folder of FPR CSVs (see :func:`load_fpr`).
    ``train_sources`` defaults to all sources."""
    root = Path(out_root)
    root.mkdir(parents=True, exist_ok=True)
    man = root / "manifest.json"
    if man.exists():
        man.unlink()                                    # incomplete until we finish
    distractors = dict(distractors or {})
    counts: dict[str, Any] = {}
    if positives is not None:
        ids, pos, dists = _materialise_nearid(root, positives, distractors, positives_name)
        write_csv(ids, root / "identities.csv")
        write_csv(pos, root / "positives.csv")
        for s, d in dists.items():
            write_csv(d, root / "distractors" / f"{s}.csv")
        counts["identities"] = {s: int((ids.split == s).sum()) for s in ("train", "val", "test")}
        counts["positive_images"] = int(ids.n_views.sum())
    elif distractors:
        raise DataError("distractor datasets given without their positives dataset")
    ts = list(train_sources) if train_sources is not None else list(distractors)
    unknown = set(ts) - set(distractors)
    if unknown:
        raise DataError(f"train_sources {sorted(unknown)} are not among the distractor datasets")
    write_json({"sources": list(distractors), "train_sources": ts}, root / "sources.json")
    if mtg is not None:
        m = _materialise_mtg(root, mtg)
        write_csv(m, root / "mtg.csv")
        counts["mtg_pairs"] = len(m)
    if fpr is not None:
        tabs = load_fpr(fpr)
        for key, df in tabs.items():
            df = df.copy()
            for c in ("file_path", "ref_path", "mask_path"):
                if c in df.columns:
                    df[c] = [os.path.relpath(p, root) if p else "" for p in df[c]]
            write_csv(df, root / "fpr" / f"{key}_data.csv")
        counts["fpr_identities"] = int(tabs["train"]["name"].nunique())
    write_json({"complete": True, "schema_version": SCHEMA_VERSION, "profile": profile,
                "seed": int(seed), "counts": counts, "generator": "released"}, man)
    return root


def load_released_from_hub(cfg: Profile, out_root: str | os.PathLike | None = None) -> Path:
    """Paper profile: download ``cfg.world.nearid_repo`` + one distractor dataset per source +
    MTG from the Hugging Face hub and materialise them (needs network; not used in tests)."""
    import datasets

    out_root = Path(out_root) if out_root is not None else data_dir(cfg.name) / "nearid"
    repo = cfg.world.nearid_repo
    pos = datasets.load_dataset(repo)
    dists = {s: datasets.load_dataset(f"{repo}-{s}") for s in cfg.world.nearid_sources}
    mtg = datasets.load_dataset(cfg.world.mtg_repo)
    return materialise_released(out_root, pos, dists, mtg, train_sources=list(cfg.world.nearid_sources),
                                positives_name=repo, profile=cfg.name, seed=cfg.seed)


def copy_tree(src: str | os.PathLike, dst: str | os.PathLike) -> None:  # pragma: no cover
    """Copy a materialised dataset (convenience for users moving data between machines)."""
    shutil.copytree(src, dst, dirs_exist_ok=True)
