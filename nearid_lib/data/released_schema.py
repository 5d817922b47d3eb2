"""The published schemas of the released datasets and how their rows are read: the columns and
``datasets.Features`` of ``Aleksandar/NearID``, its nine distractor repos and the MTG dataset
(from the authors' dataset cards), image values (bytes / path / PIL / array) to PIL with errors
naming repo, row and field, and the dataset-object helpers (a ``DatasetDict`` or a
``save_to_disk`` folder, one split, no decoding). Used by :mod:`nearid_lib.data.released`."""
from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..io_utils import atomic_write
from .schema import DataError, read_rgb

__all__ = ["RELEASED_SOURCES", "TABLE5_TRAIN_SOURCES", "POSITIVE_COLUMNS", "DISTRACTOR_COLUMNS", "MTG_COLUMNS",
           "PositivesLayout", "TODAY", "EARLIER", "POSITIVE_LAYOUTS", "positives_layout",
           "positive_features", "distractor_features", "mtg_features", "pil_from_value"]

RELEASED_SOURCES = ("Flux", "Flux_1024", "FluxC", "FluxC_1024", "PowerPaint", "Qwen", "Qwen_1328",
                    "SDXL", "SDXL_1024")
TABLE5_TRAIN_SOURCES = ("Flux", "Flux_1024", "Qwen", "Qwen_1328")


@dataclass(frozen=True)
class PositivesLayout:
    """One published layout of ``Aleksandar/NearID``: the card's columns (name -> dtype, in the
    card's order) as read from the authors' repository at ``commit``, the image (and mask) column
    prefix, and the columns the pipeline reads (``required``: what recognises the layout)."""

    name: str
    commit: str
    card: tuple[tuple[str, str], ...]
    image_prefix: str
    mask_prefix: str | None
    required: tuple[str, ...]

    @property
    def columns(self) -> list[str]:
        return [c for c, _ in self.card]

    def image_columns(self) -> list[str]:
        """Every image-valued column (views and masks)."""
        return [c for c, t in self.card if t == "image"]


def _views(prefix: str) -> tuple[str, ...]:
    return tuple(f"{prefix}{k}" for k in (1, 2, 3))


_META_REQUIRED = ("id", "category", "category_description", "n_images", "objaverse_id")
# The card the authors publish today: the positives' feature list of make_positives_card() in
# scripts/upload_nearid_datasets.py of Gorluxor/NearID at commit 1a2cc71 (whose comment says the live
# card is authoritative and must match the parquet columns exactly); examples/load_splits.py at the
# same commit reads images1..3 and masks1..3 by these names.
TODAY = PositivesLayout(
    "images+masks", "1a2cc718b28d8da763bd35cbe75b0ce5f0e2c73a",
    (("id", "int64"), ("category", "string"), ("category_description", "string"),
     ("images1", "image"), ("images2", "image"), ("images3", "image"),
     ("masks1", "image"), ("masks2", "image"), ("masks3", "image"),
     ("n_images", "int64"), ("objaverse_id", "string"),
     ("dino_01", "float64"), ("dino_02", "float64"), ("dino_12", "float64"),
     ("aesthetics1", "float64"), ("aesthetics2", "float64"), ("aesthetics3", "float64"),
     ("size1", "sequence:int64"), ("size2", "sequence:int64"), ("size3", "sequence:int64"),
     ("prompts1", "string"), ("prompts2", "string"), ("prompts3", "string"),
     ("filenames1", "string"), ("filenames2", "string"), ("filenames3", "string"),
     ("quality", "string"), ("id_safe", "bool"), ("split", "string")),
    "images", "masks", (*_META_REQUIRED, *_views("images"), *_views("masks")))
# The earlier card (scripts/dataset_cards/NearID_README.md at commit 560b774): img1..3, no masks,
# no split column (the split then comes from the authors' split files or our rule).
EARLIER = PositivesLayout(
    "img", "560b774cad4a96cfaf735a9606646f5334bb43b8",
    (("id", "int64"), ("category", "string"), ("category_description", "string"),
     ("img1", "image"), ("img2", "image"), ("img3", "image"), ("n_images", "int64"),
     ("objaverse_id", "string"), ("prompts1", "string"), ("prompts2", "string"), ("prompts3", "string"),
     ("quality", "string")),
    "img", None, (*_META_REQUIRED, *_views("img")))
POSITIVE_LAYOUTS = (TODAY, EARLIER)
POSITIVE_COLUMNS = TODAY.columns
DISTRACTOR_COLUMNS = ["id", "category", "category_description", "nimg1", "nimg2", "nimg3", "n_images",
                      "objaverse_id", "prompts1", "prompts2", "prompts3", "quality"]
MTG_COLUMNS = [f"image_{k}_{f}" for k in (1, 2) for f in ("original", "inpainted", "object_mask", "part_mask")]
SPLIT_NAMES = {"train": "train", "validation": "val", "valid": "val", "val": "val", "test": "test"}


def positives_layout(columns: Sequence[str], name: str = "Aleksandar/NearID") -> PositivesLayout:
    """The published layout of the positives whose columns are ``columns`` (:data:`POSITIVE_LAYOUTS`:
    today's ``images*``/``masks*`` card, the earlier ``img*`` card), recognised by the columns the
    pipeline reads; columns beyond those are kept, whatever they are. A repository in neither layout
    (or in both) is a :class:`DataError` naming the columns it has and those each layout expects."""
    cols = set(columns)
    hits = [lay for lay in POSITIVE_LAYOUTS if set(lay.required) <= cols]
    if len(hits) == 1:
        return hits[0]
    expect = "; ".join(f"{lay.name} (card at {lay.commit[:7]}): {list(lay.required)}" for lay in POSITIVE_LAYOUTS)
    why = "matches both published layouts" if hits else "matches no published layout"
    missing = "; ".join(f"{lay.name} lacks {[c for c in lay.required if c not in cols]}" for lay in POSITIVE_LAYOUTS)
    raise DataError(f"dataset {name}: {why} (has {list(columns)}; {missing}). Expected the columns of "
                    f"{expect}")


def _feature(dtype: str):
    import datasets

    if dtype == "image":
        return datasets.Image()
    if dtype.startswith("sequence:"):
        return datasets.Sequence(datasets.Value(dtype.split(":", 1)[1]))
    return datasets.Value(dtype)


def positive_features(layout: PositivesLayout = TODAY):
    """The ``datasets.Features`` of ``Aleksandar/NearID`` as the card of ``layout`` declares them
    (default: today's card, with ``split``)."""
    import datasets

    return datasets.Features({c: _feature(t) for c, t in layout.card})


def distractor_features():
    """The ``datasets.Features`` of every ``Aleksandar/NearID-<source>`` repo (dataset card)."""
    import datasets

    v = datasets.Value
    types = {"id": v("int64"), "n_images": v("int64")}
    return datasets.Features({c: (datasets.Image() if c.startswith("nimg") else types.get(c, v("string")))
                              for c in DISTRACTOR_COLUMNS})


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


def schema_rgb(im: Image.Image, where: str) -> Image.Image:
    """The schema's documented mode rule (the one of ``read_rgb``, :mod:`nearid_lib.imageio`),
    applied to an open image: 16-bit and float modes scaled to 8 bit, alpha onto black."""
    return im if im.mode == "RGB" else read_rgb(im, where)


def write_png(root: Path, rel: str, im: Image.Image) -> str:
    atomic_write(root / rel, lambda p: im.save(p, format="PNG", compress_level=1))
    return rel


def save_mask(root: Path, rel: str, m: np.ndarray) -> str:
    return write_png(root, rel, Image.fromarray(m.astype(np.uint8) * 255, "L"))


# --------------------------------------------------------------------------- datasets
def open_dataset(obj: Any, name: str):
    """``Dataset``/``DatasetDict`` object or a ``save_to_disk`` folder -> list of (split, Dataset)."""
    import datasets

    if isinstance(obj, (str, os.PathLike)):
        if not Path(obj).exists():
            raise DataError(f"dataset {name}: path {obj} does not exist")
        obj = datasets.load_from_disk(str(obj))
    if isinstance(obj, datasets.DatasetDict):
        out = []
        for k, ds in obj.items():
            if k not in SPLIT_NAMES:
                raise DataError(f"dataset {name}: unknown split {k!r}; valid: {sorted(SPLIT_NAMES)}")
            out.append((SPLIT_NAMES[k], no_decode(ds)))
        return out
    if isinstance(obj, datasets.Dataset):
        return [(None, no_decode(obj))]
    raise DataError(f"dataset {name}: expected a datasets.Dataset/DatasetDict or a folder, "
                    f"got {type(obj).__name__}")


def no_decode(ds):
    """Image columns as raw ``{"bytes", "path"}``: we decode ourselves, so that a corrupt cell
    raises a DataError naming its row and field instead of an anonymous PIL error."""
    import datasets

    for c, f in ds.features.items():
        if isinstance(f, datasets.Image) and f.decode:
            ds = ds.cast_column(c, datasets.Image(decode=False))
    return ds


def first_col(cols, names):
    return next((c for c in names if c in cols), None)


def one_split(obj: Any, name: str):
    """The single ``train`` split the NearID repos publish (a Dataset, a DatasetDict or a folder)."""
    splits = open_dataset(obj, name)
    if len(splits) != 1:
        raise DataError(f"dataset {name}: expected the one published split 'train', found "
                        f"{[k for k, _ in splits]}")
    return splits[0][1]


def check_columns(ds, name: str, required: Sequence[str]) -> None:
    cols = list(ds.column_names)
    missing = [c for c in required if c not in cols]
    if missing:
        raise DataError(f"dataset {name}: missing column(s) {missing} of the published schema; has {cols}")
