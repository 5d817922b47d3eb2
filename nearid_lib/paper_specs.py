"""The papers' tables as transcribed in ``paper_values/`` (``<key>.csv`` + ``<key>.meta.json``, see
its README): :class:`TableSpec` says where a table's values are, which CSV of ours stands beside
them (``ours``, ``also``) and in which profiles it is produced. The report
(:mod:`nearid_lib.report`), the dry run's check, the claims and the score card read them."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .paths import repo_root

__all__ = ["TableSpec", "load_specs", "paper_values_dir"]


def paper_values_dir() -> Path:
    return repo_root() / "paper_values"


@dataclass(frozen=True)
class TableSpec:
    """One paper table: where the paper's values are and which CSV of ours sits beside them."""

    key: str
    paper: str
    table: str
    title: str
    key_columns: tuple[str, ...]
    metrics: dict
    ours: str | None
    notes: str = ""
    paper_csv: Path | None = None
    not_reproduced: str = ""      # why a profile does not produce it (paper_values meta)
    partial: str = ""             # which of the paper's rows a profile cannot produce, and why
    also: tuple[tuple[str, str], ...] = ()   # further tables of ours beside the same paper values: (path, what)
    # per profile, the cells a world knob was tuned to hit, and the target (paper_values meta "calibrated")
    calibrated: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_meta(cls, meta_path: Path) -> "TableSpec":
        meta = json.loads(Path(meta_path).read_text())
        missing = [f for f in ("key", "paper", "table", "title", "key_columns", "metrics") if f not in meta]
        if missing:
            raise ValueError(f"{meta_path}: missing field(s) {missing}")
        csv = Path(meta_path).with_name(Path(meta_path).name.replace(".meta.json", ".csv"))
        return cls(key=meta["key"], paper=meta["paper"], table=meta["table"], title=meta["title"],
                   key_columns=tuple(meta["key_columns"]), metrics=dict(meta["metrics"]),
                   ours=meta.get("ours"), notes=meta.get("notes", ""), paper_csv=csv,
                   not_reproduced=meta.get("not_reproduced", ""), partial=meta.get("partial", ""),
                   also=tuple((k, v) for k, v in (meta.get("also") or {}).items()),
                   calibrated=tuple((k, v) for k, v in (meta.get("calibrated") or {}).items()))


def load_specs(folder: Path | None = None) -> list[TableSpec]:
    """All table specs in ``paper_values/``, ordered by paper then table number."""
    folder = Path(folder or paper_values_dir())
    specs = [TableSpec.from_meta(p) for p in sorted(folder.glob("*.meta.json"))]

    papers = {"NearID": 0, "ID-Sim": 1, "FPR": 2}

    def order(s: TableSpec):
        num = "".join(ch for ch in s.table if ch.isdigit())
        return (papers.get(s.paper, 9), s.paper, int(num) if num else 999, s.key)

    return sorted(specs, key=order)
