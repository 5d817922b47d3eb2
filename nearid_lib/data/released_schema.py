"""The published schemas of the released datasets and how their rows are read: the columns and
``datasets.Features`` of ``Aleksandar/NearID``, its nine distractor repos and the MTG dataset
(from the authors' dataset cards), image values (bytes / path / PIL / array) to PIL with errors
naming repo, row and field, and the dataset-object helpers (a ``DatasetDict`` or a
``save_to_disk`` folder, one split, no decoding). Used by :mod:`nearid_lib.data.released`."""
from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..io_utils import atomic_write
from .schema import DataError, read_rgb

__all__ = ["RELEASED_SOURCES", "TABLE5_TRAIN_SOURCES", "POSITIVE_COLUMNS", "DISTRACTOR_COLUMNS", "MTG_COLUMNS",
           "positive_features", "distractor_features", "mtg_features", "pil_from_value"]

RELEASED_SOURCES = ("Flux", "Flux_1024", "FluxC", "FluxC_1024", "PowerPaint", "Qwen", "Qwen_1328",
                    "SDXL", "SDXL_1024")
TABLE5_TRAIN_SOURCES = ("Flux", "Flux_1024", "Qwen", "Qwen_1328")
_META = ["id", "category", "category_description", "n_images", "objaverse_id",
         "prompts1", "prompts2", "prompts3", "quality"]
POSITIVE_COLUMNS = ["id", "category", "category_description", "img1", "img2", "img3", "n_images",
                    "objaverse_id", "prompts1", "prompts2", "prompts3", "quality"]
DISTRACTOR_COLUMNS = ["id", "category", "category_description", "nimg1", "nimg2", "nimg3", "n_images",
                      "objaverse_id", "prompts1", "prompts2", "prompts3", "quality"]
MTG_COLUMNS = [f"image_{k}_{f}" for k in (1, 2) for f in ("original", "inpainted", "object_mask", "part_mask")]
_SPLIT_NAMES = {"train": "train", "validation": "val", "valid": "val", "val": "val", "test": "test"}


def _features(image_prefix: str):
    import datasets

    v = datasets.Value
    cols = POSITIVE_COLUMNS if image_prefix == "img" else DISTRACTOR_COLUMNS
    types = {"id": v("int64"), "n_images": v("int64")}
    return datasets.Features({c: (datasets.Image() if c.startswith(image_prefix) and c[-1].isdigit()
                                  else types.get(c, v("string"))) for c in cols})


def positive_features():
    """The ``datasets.Features`` of ``Aleksandar/NearID`` as its dataset card declares them."""
    return _features("img")


def distractor_features():
    """The ``datasets.Features`` of every ``Aleksandar/NearID-<source>`` repo (dataset card)."""
    return _features("nimg")


def mtg_features():
    """The image columns of ``abdo-eldesokey/mtg-dataset``."""
    import datasets

    return datasets.Features({c: datasets.Image() for c in MTG_COLUMNS})


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


def _first_col(cols, names):
    return next((c for c in names if c in cols), None)


def _one_split(obj: Any, name: str):
    """The single ``train`` split the NearID repos publish (a Dataset, a DatasetDict or a folder)."""
    splits = _open_dataset(obj, name)
    if len(splits) != 1:
        raise DataError(f"dataset {name}: expected the one published split 'train', found "
                        f"{[k for k, _ in splits]}")
    return splits[0][1]


def _check_columns(ds, name: str, required: Sequence[str]) -> None:
    cols = list(ds.column_names)
    missing = [c for c in required if c not in cols]
    if missing:
        raise DataError(f"dataset {name}: missing column(s) {missing} of the published schema; has {cols}")
