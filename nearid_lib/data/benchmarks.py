"""Readers of released benchmark folders in simple documented layouts, with absolute paths:

- FPR CSV folders (``train_data.csv``, ``gallery_data.csv``, optional ``generated_data.csv``;
  columns name, species, file_path, ref_path [, mask_path] [, method]): :func:`load_fpr`.
- DreamBench++ (subjects with reference images and captions, per-method rating tables):
  :func:`load_dreambenchpp`, the human ratings behind NearID Table 2 / Figure 4.

Bad rows raise :class:`~nearid_lib.data.schema.DataError` naming dataset, row and field.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .schema import DataError

__all__ = ["load_fpr", "DreamBenchPP", "load_dreambenchpp"]


_FPR_COLS = ["name", "species", "file_path", "ref_path"]



def load_fpr(folder: str | os.PathLike, check_files: bool = True) -> dict[str, pd.DataFrame]:
    """Read an FPR CSV folder -> {"train", "gallery"[, "generated"]} with absolute paths.

    Relative paths are resolved against ``folder``; ``generated_data.csv`` must have a
    ``method`` column; gallery images must not also be references."""
    folder = Path(folder)
    out = {}
    for key in ("train", "gallery", "generated"):
        p = folder / f"{key}_data.csv"
        if not p.exists():
            if key == "generated":
                continue
            raise DataError(f"dataset FPR {p.name}: file missing in {folder}")
        df = pd.read_csv(p, dtype=str, keep_default_na=False)
        need = _FPR_COLS + (["method"] if key == "generated" else [])
        missing = [c for c in need if c not in df.columns]
        if missing:
            raise DataError(f"dataset FPR {p.name}: missing column(s) {missing}; has {list(df.columns)}")
        for c in ("file_path", "ref_path", "mask_path"):
            if c not in df.columns:
                continue
            vals = []
            for i, v in enumerate(df[c]):
                if not v:
                    if c == "file_path":
                        raise DataError(f"dataset FPR {p.name}, row {i}, field {c!r}: empty path")
                    vals.append("")
                    continue
                q = Path(v) if Path(v).is_absolute() else folder / v
                if check_files and not q.exists():
                    raise DataError(f"dataset FPR {p.name}, row {i}, field {c!r}: file {q} not found")
                vals.append(str(q))
            df[c] = vals
        out[key] = df
    both = set(out["train"].file_path) & set(out["gallery"].file_path)
    if both:
        raise DataError(f"dataset FPR gallery_data.csv, field 'file_path': {len(both)} image(s) are "
                        f"also references, e.g. {sorted(both)[0]}")
    return out


@dataclass
class DreamBenchPP:
    """DreamBench++ subjects (reference images + captions) and long-format rating tables."""

    subjects: pd.DataFrame      # subject, image (abs path), caption, category
    ratings: pd.DataFrame       # method, rater (gpt|human), subject, image (abs path), score


def load_dreambenchpp(root: str | os.PathLike, check_files: bool = True) -> DreamBenchPP:
    """Read DreamBench++ from a simple local layout::

        root/captions.csv                     subject, image, caption[, category]
        root/ratings/<method>_<rater>.csv      subject, image, score   (rater: gpt | human)

    ``image`` paths are relative to ``root`` (reference images in ``captions.csv``, the method's
    generated images in the rating files). Scores must be numbers."""
    root = Path(root)
    cap = root / "captions.csv"
    if not cap.exists():
        raise DataError(f"dataset DreamBench++ captions.csv: file missing in {root}")
    subj = pd.read_csv(cap, dtype=str, keep_default_na=False)
    for c in ("subject", "image", "caption"):
        if c not in subj.columns:
            raise DataError(f"dataset DreamBench++ captions.csv: missing column {c!r}")
    if "category" not in subj.columns:
        subj["category"] = ""

    def _abs(df, name):
        vals = []
        for i, v in enumerate(df["image"]):
            q = root / v
            if check_files and not q.exists():
                raise DataError(f"dataset DreamBench++ {name}, row {i}, field 'image': {q} not found")
            vals.append(str(q))
        df["image"] = vals

    _abs(subj, "captions.csv")
    frames = []
    rdir = root / "ratings"
    for p in sorted(rdir.glob("*.csv")) if rdir.exists() else []:
        method, _, rater = p.stem.rpartition("_")
        if rater not in ("gpt", "human") or not method:
            raise DataError(f"dataset DreamBench++ ratings/{p.name}: name must be "
                            f"<method>_gpt.csv or <method>_human.csv")
        df = pd.read_csv(p, dtype=str, keep_default_na=False)
        for c in ("subject", "image", "score"):
            if c not in df.columns:
                raise DataError(f"dataset DreamBench++ ratings/{p.name}: missing column {c!r}")
        for i, v in enumerate(df["score"]):
            try:
                float(v)
            except ValueError:
                raise DataError(f"dataset DreamBench++ ratings/{p.name}, row {i}, field 'score': "
                                f"{v!r} is not a number") from None
        unknown = set(df.subject) - set(subj.subject)
        if unknown:
            raise DataError(f"dataset DreamBench++ ratings/{p.name}, field 'subject': unknown "
                            f"subject(s) {sorted(unknown)[:3]}")
        _abs(df, f"ratings/{p.name}")
        df["score"] = df["score"].astype(float)
        df.insert(0, "rater", rater)
        df.insert(0, "method", method)
        frames.append(df[["method", "rater", "subject", "image", "score"]])
    ratings = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["method", "rater", "subject", "image", "score"])
    return DreamBenchPP(subjects=subj, ratings=ratings)
