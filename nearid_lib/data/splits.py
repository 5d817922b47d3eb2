"""Train / val / test splits of the released NearID identities, in the order the authors' guide
(``REPRODUCTION.md`` of ``Gorluxor/NearID``) defines them:

1. the positives' own ``split`` column, when the downloaded ``Aleksandar/NearID`` carries one
   (:func:`split_column`);
2. else the official split files ``splits/{train,val,test}.json`` of the authors' GitHub release:
   0-based **row positions** into the unshuffled 19,386-row ``train`` split (18,786 / 100 / 500), not
   ``id`` values (:func:`read_split_files`; :func:`official_split_dir` finds them);
3. only when neither exists, a documented deterministic rule (:func:`assign_splits`) under which no
   ``objaverse_id`` and no description is shared across splits. Its test identities are not the
   authors', so no number computed on it is comparable with the paper's, and the released NearID
   weights may have been trained on them: :data:`RULE_NOTE`.

:func:`split_info` describes which one was used (source, sha256, counts); it is stored in the
dataset manifest and every table's provenance."""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd

from ..paths import downloads_dir
from .schema import DataError

__all__ = ["assign_splits", "read_split_files", "split_column", "official_split_dir", "RULE_NOTE",
           "SPLIT_VALUES", "split_digest", "resolve_official_splits"]

RULE_NOTE = ("split drawn by this project's deterministic rule, not the authors' official partition "
             "(splits/*.json of Gorluxor/NearID): numbers are not comparable with the paper's, and the "
             "released NearID weights may have been trained on these test identities")
# the values a ``split`` column may hold -> our split names
SPLIT_VALUES = {"train": "train", "validation": "val", "valid": "val", "val": "val", "test": "test"}


def split_digest(splits: pd.Series) -> str:
    """sha256 of a per-row split assignment (``"<row>:<split>\n"`` lines): the partition's identity."""
    h = hashlib.sha256()
    for i, v in enumerate(splits.tolist()):
        h.update(f"{i}:{v}\n".encode())
    return h.hexdigest()


def split_column(values, where: str) -> pd.Series:
    """The positives' own ``split`` column (train / val|validation / test) as our split names; a
    missing or unknown value is a DataError naming ``where`` and the row."""
    out = []
    for i, v in enumerate(list(values)):
        key = str(v).strip().lower() if v is not None else ""
        if key not in SPLIT_VALUES:
            raise DataError(f"{where}, row {i}, field 'split': {v!r} is not one of {sorted(SPLIT_VALUES)}")
        out.append(SPLIT_VALUES[key])
    return pd.Series(out, name="split")


def official_split_dir(split_dir: str | os.PathLike | None = None) -> Path | None:
    """Where the official split files are: ``split_dir`` when given (``world.split_dir``; it must
    exist), else ``$NEARID_DOWNLOADS/NearID/splits`` when that folder exists, else None."""
    if split_dir:
        d = Path(split_dir).expanduser()
        if not d.is_dir():
            raise DataError(f"split files: world.split_dir={d} does not exist")
        return d
    d = downloads_dir() / "NearID" / "splits"
    return d if d.is_dir() else None


def _norm_text(t: Any) -> str:
    return re.sub(r"\s+", " ", str(t or "")).strip().lower()


def assign_splits(meta: pd.DataFrame, n_val: int, n_test: int, seed: int = 0) -> pd.Series:
    """The deterministic split rule used when the authors' split files are absent.

    Identities that share an ``objaverse_id`` or a (normalised) ``category_description`` form one
    group (connected components), so no asset and no description is ever in two splits. Groups are
    ordered by ``sha256("nearid-split:<seed>:<smallest id of the group>")``, which depends neither on
    the row order nor on the machine; test takes whole groups in that order until it holds
    ``n_test`` identities (a group that would overshoot is passed over), then val takes ``n_val``;
    every other identity is train. Returns the split per row of ``meta`` (index aligned)."""
    ids = meta["id"].astype(str).tolist()
    parent = list(range(len(ids)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for col in ("objaverse_id", "category_description"):
        first: dict[str, int] = {}
        for i, v in enumerate(meta[col].tolist() if col in meta else []):
            key = _norm_text(v)
            if not key:
                continue
            if key in first:
                a, b = find(first[key]), find(i)
                if a != b:
                    parent[b] = a
            else:
                first[key] = i
    groups: dict[int, list[int]] = {}
    for i in range(len(ids)):
        groups.setdefault(find(i), []).append(i)

    def order(members: list[int]) -> str:
        smallest = min(ids[i] for i in members)
        return hashlib.sha256(f"nearid-split:{seed}:{smallest}".encode()).hexdigest()

    out = ["train"] * len(ids)
    want = {"test": int(n_test), "val": int(n_val)}
    got = {"test": 0, "val": 0}
    for members in sorted(groups.values(), key=order):
        # test first, then val; a group that would overshoot the split stays in train
        split = next((sp for sp in ("test", "val") if got[sp] + len(members) <= want[sp]), None)
        if split is None:
            continue
        for i in members:
            out[i] = split
        got[split] += len(members)
    short = {k: (got[k], want[k]) for k in want if got[k] < want[k]}
    if short:
        raise DataError(f"split rule: only {short} identities (got, wanted) could be placed in held-out "
                        f"splits without sharing an objaverse_id or description with training; "
                        f"{len(ids)} identities in {len(groups)} groups")
    return pd.Series(out, index=meta.index, name="split")


def read_split_files(split_dir: str | os.PathLike, n_rows: int) -> tuple[pd.Series, dict[str, str]]:
    """The authors' split files in ``split_dir``: ``val.json`` and ``test.json`` (required) and
    ``train.json`` (the official release has it), each a JSON list of 0-based row positions into the
    positives (or ``{"indices": [...]}``, the ``--findx`` format of their evaluation code). With
    ``train.json`` every row must be listed exactly once; without it rows in neither held-out file
    are train. Returns the split per row and the files' sha256."""
    d = Path(split_dir)
    out = pd.Series(["train"] * n_rows, name="split")
    digests: dict[str, str] = {}
    seen: dict[int, str] = {}
    names = ("train", "val", "test") if (d / "train.json").exists() else ("val", "test")
    for split in names:
        f = d / f"{split}.json"
        if not f.exists():
            raise DataError(f"split files: {f} missing (world.split_dir={d} must hold val.json and test.json)")
        raw = f.read_bytes()
        digests[f.name] = hashlib.sha256(raw).hexdigest()
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            raise DataError(f"split files: {f} is not JSON ({e})") from None
        obj = obj["indices"] if isinstance(obj, dict) and "indices" in obj else obj
        if not isinstance(obj, list):
            raise DataError(f"split files: {f} must be a list of row indices or {{'indices': [...]}}")
        for j, x in enumerate(obj):
            if isinstance(x, bool) or not isinstance(x, (int, str)) or not str(x).lstrip("-").isdigit():
                raise DataError(f"split files: {f}, entry {j}: {x!r} is not a row index")
            i = int(x)
            if not 0 <= i < n_rows:
                raise DataError(f"split files: {f}, entry {j}: row {i} outside the {n_rows} positives")
            if i in seen:
                raise DataError(f"split files: {f}, entry {j}: row {i} already listed in {seen[i]}")
            seen[i] = f.name
            out.iloc[i] = split
    if "train" in names and len(seen) != n_rows:
        first = next(i for i in range(n_rows) if i not in seen)
        raise DataError(f"split files: {d}: {n_rows - len(seen)} of the {n_rows} positives are in none of "
                        f"train/val/test.json (first: row {first}); the official files cover every row")
    return out, digests


def resolve_official_splits(pos, pos_name: str, split_dir) -> tuple[pd.Series | None, dict | None]:
    """The official partition of the positives ``pos`` (a ``datasets.Dataset``): its ``split``
    column, else the split files of ``split_dir``; ``(None, None)`` when neither exists (the caller
    falls back to :func:`assign_splits`). When both exist they must agree row by row. Returns the
    split per row and what was read (``source``, ``official``, the files' sha256)."""
    files = None
    if split_dir is not None:
        files = read_split_files(split_dir, len(pos))
    if "split" in pos.column_names:
        col = split_column(pos["split"], f"dataset {pos_name}")
        info = {"source": "split column", "official": True, "column": "split"}
        if files is not None:
            diff = (col != files[0]).to_numpy().nonzero()[0]
            if len(diff):
                i = int(diff[0])
                raise DataError(f"dataset {pos_name}, row {i}, field 'split': {col.iloc[i]!r}, but the split "
                                f"files in {split_dir} put row {i} in {files[0].iloc[i]!r} "
                                f"({len(diff)} rows differ)")
            info.update({"checked_against": str(split_dir), "files_sha256": files[1]})
        return col, info
    if files is not None:
        return files[0], {"source": "split files", "official": True, "dir": str(split_dir), "files_sha256": files[1]}
    return None, None
