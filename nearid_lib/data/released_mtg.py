"""The MTG part-edit pairs of the release (``abdo-eldesokey/mtg-dataset``) in the NearID schema,
and NearID's MTG oracle (:func:`mtg_oracle`): ``1 - |Ωp| / |Ωo|`` over the release's part and object
masks binarised at > 0, as the paper defines it and the authors' code computes it."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .released_schema import SPLIT_NAMES, MTG_COLUMNS, first_col, open_dataset, write_png, save_mask, schema_rgb, pil_from_value
from .schema import DataError

__all__ = ["mtg_oracle"]


def mtg_oracle(object_mask: np.ndarray, part_mask: np.ndarray) -> float:
    """NearID's MTG oracle (Sec. 3.4, "Alignment with Human and Oracle Judgments"): ``1 - |Ωp| / |Ωo|``,
    the share of the object the part edit left untouched, from the boolean part and object masks
    (the release's masks binarised at > 0, as the authors' code does). Every part pixel counts,
    inside the object or not: the paper's formula as written, so a part larger than its object
    gives a negative oracle, kept as it is (never clipped; curation counts such pairs in the
    manifest). An empty object mask has no oracle: ``ValueError``."""
    o, p = np.asarray(object_mask, dtype=bool), np.asarray(part_mask, dtype=bool)
    if o.shape != p.shape:
        raise ValueError(f"mtg_oracle: part mask shape {p.shape} differs from the object mask's {o.shape}")
    n_o = int(o.sum())
    if n_o == 0:
        raise ValueError("mtg_oracle: the object mask is empty (|Ωo| = 0)")
    return float(1.0 - int(p.sum()) / n_o)


def _mask_gt0(im, where: str, size: tuple[int, int]) -> np.ndarray:
    """An MTG mask as the authors read it: its grey values > 0."""
    if im.size != size:
        raise DataError(f"{where}: mask size {im.size} differs from its image size {size}")
    arr = (np.asarray(im) if im.mode in ("I;16", "I;16B", "I;16L", "I", "F") else np.asarray(im.convert("L")))
    return arr > 0


def materialise_mtg(root: Path, mtg: Any, name: str = "mtg") -> tuple[pd.DataFrame, dict]:
    """The MTG pairs in the NearID schema (``mtg.csv`` rows) and the oracle's record for the
    manifest (its rule; the pairs whose part mask reaches outside the object or outgrows it)."""
    rows, outside, negative = [], [], []
    for split_key, ds in open_dataset(mtg, name):
        cols = list(ds.column_names)
        missing = [c for c in MTG_COLUMNS if c not in cols]
        if missing:
            raise DataError(f"dataset {name}: missing column(s) {missing}; has {cols}")
        id_col = first_col(cols, ("pair_id", "id"))
        cls_col = first_col(cols, ("class_name", "category", "class"))
        for i in range(len(ds)):
            r = ds[i]
            split = SPLIT_NAMES.get(str(r["split"]), str(r["split"])) if "split" in cols else (split_key or "test")
            pid = str(r[id_col]) if id_col else f"{split}_{i:06d}"
            out = {"pair_id": pid, "split": split, "class_name": str(r[cls_col]) if cls_col else ""}
            for k in (1, 2):
                w = lambda f: f"dataset {name}, row {i}, field {f!r}"  # noqa: E731
                orig = schema_rgb(pil_from_value(r[f"image_{k}_original"], w(f"image_{k}_original"))
                               or _missing(w(f"image_{k}_original")), w(f"image_{k}_original"))
                inp = schema_rgb(pil_from_value(r[f"image_{k}_inpainted"], w(f"image_{k}_inpainted"))
                              or _missing(w(f"image_{k}_inpainted")), w(f"image_{k}_inpainted"))
                if inp.size != orig.size:
                    raise DataError(f"{w(f'image_{k}_inpainted')}: size {inp.size} differs from "
                                    f"image_{k}_original {orig.size}")
                om = _mask_gt0(pil_from_value(r[f"image_{k}_object_mask"], w(f"image_{k}_object_mask"))
                               or _missing(w(f"image_{k}_object_mask")), w(f"image_{k}_object_mask"), orig.size)
                if not om.any():
                    raise DataError(f"{w(f'image_{k}_object_mask')}: the object mask is empty (no pixel > 0): "
                                    f"pair {pid} has no MTG oracle")
                pm = _mask_gt0(pil_from_value(r[f"image_{k}_part_mask"], w(f"image_{k}_part_mask"))
                               or _missing(w(f"image_{k}_part_mask")), w(f"image_{k}_part_mask"), orig.size)
                base = f"mtg/{pid}_{k}"
                out[f"image_{k}_original"] = write_png(root, base + "_original.png", orig)
                out[f"image_{k}_inpainted"] = write_png(root, base + "_inpainted.png", inp)
                out[f"image_{k}_object_mask"] = save_mask(root, base + "_object_mask.png", om)
                out[f"image_{k}_part_mask"] = save_mask(root, base + "_part_mask.png", pm)
                out[f"oracle_{k}"] = mtg_oracle(om, pm)
                if (pm & ~om).any():
                    outside.append(f"{pid}/{k}")
                if out[f"oracle_{k}"] < 0:
                    negative.append(f"{pid}/{k}")
            rows.append(out)
    record = {"rule": "1 - |part| / |object|, masks > 0 (NearID Sec. 3.4; the formula as written, never clipped)",
              "part_outside_object": {"n": len(outside), "first": outside[:10]},
              "negative_oracle": {"n": len(negative), "first": negative[:10]}}
    return pd.DataFrame(rows), record


def _missing(where: str):
    raise DataError(f"{where}: missing image")
