"""ID-Sim's benchmark files in their released layouts (CSV of pairs, triplets, retrieval lists and
ratings), read with a clear error naming the file, row and field (:class:`BenchmarkError`)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

__all__ = ["BenchmarkError", "load_pairs_csv", "load_triplets_csv", "load_retrieval_csv", "load_ratings_csv"]


class BenchmarkError(ValueError):
    """Bad benchmark file: the message names the file, row and field."""


def _read(path: str | Path, required: Sequence[str]) -> pd.DataFrame:
    path = Path(path)
    if not path.exists():
        raise BenchmarkError(f"{path}: file not found")
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    miss = [c for c in required if c not in df.columns]
    if miss:
        raise BenchmarkError(f"{path}: missing column(s) {miss}; have {list(df.columns)}")
    for c in required:
        empty = np.flatnonzero(df[c].to_numpy() == "")
        if len(empty):
            raise BenchmarkError(f"{path}: row {int(empty[0])} field {c!r} is empty")
    return df


def _num(df: pd.DataFrame, col: str, path, lo=None, hi=None, allowed=None) -> pd.DataFrame:
    v = pd.to_numeric(df[col], errors="coerce")
    bad = v.isna() | ((v < lo) if lo is not None else False) | ((v > hi) if hi is not None else False)
    if allowed is not None:
        bad |= ~v.isin(allowed)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise BenchmarkError(f"{path}: row {i} field {col!r}: invalid value {df[col].iloc[i]!r}")
    df = df.copy()
    df[col] = v
    return df


def load_pairs_csv(path: str | Path) -> pd.DataFrame:
    """Verification pairs: ``img1, img2`` and ``label`` (0/1) or ``c`` (vote share in [0, 1])."""
    df = _read(path, ["img1", "img2"])
    if "label" in df.columns:
        df = _num(df, "label", path, allowed=[0, 1])
    elif "c" in df.columns:
        df = _num(df, "c", path, 0.0, 1.0)
        df["label"] = (df["c"] > 0.8).astype(int)
    else:
        raise BenchmarkError(f"{path}: needs a 'label' (0/1) or 'c' (continuous) column")
    return df


def load_triplets_csv(path: str | Path) -> pd.DataFrame:
    """CUTE-style triplets: ``anchor, positive, negative`` (+ ``mode`` easy|hard, default hard)."""
    df = _read(path, ["anchor", "positive", "negative"])
    if "mode" not in df.columns:
        df["mode"] = "hard"
    bad = ~df["mode"].isin(["easy", "hard"])
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise BenchmarkError(f"{path}: row {i} field 'mode': {df['mode'].iloc[i]!r} not easy|hard")
    return df


def load_retrieval_csv(path: str | Path) -> pd.DataFrame:
    """Retrieval split: ``path, label, role`` (query|gallery); every query label must occur in the
    gallery."""
    df = _read(path, ["path", "label", "role"])
    bad = ~df["role"].isin(["query", "gallery"])
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise BenchmarkError(f"{path}: row {i} field 'role': {df['role'].iloc[i]!r} not query|gallery")
    gl = set(df.loc[df.role == "gallery", "label"])
    for i, r in df[df.role == "query"].iterrows():
        if r.label not in gl:
            raise BenchmarkError(f"{path}: row {i} field 'label': query label {r.label!r} has no gallery image")
    return df


def load_ratings_csv(path: str | Path) -> pd.DataFrame:
    """Graded ratings (DreamBench++): ``reference, image, rating`` -> columns img1, img2, rating."""
    df = _read(path, ["reference", "image", "rating"])
    df = _num(df, "rating", path)
    return df.rename(columns={"reference": "img1", "image": "img2"})
