"""The trained NearID heads a claim's quantities name, with the SSR the paper reports for each and ours.

A NearID quantity starts with its model (``nearid.full.main.ssr``: the main head; ``loss.circle``,
``alpha.0.0``, ``beta.0.1``, ``data.mtg_only``: the ablation rows; ``frozen``: the frozen encoder,
no trained head). :func:`head_of` reads that model, :func:`paper_ssr` finds the head's row in the
paper's table (``paper_values/``) and :func:`our_ssr` the same row (joined on the paper's ``row``
label, as the report joins them) in the table a notebook wrote (NearID SSR on the main sources,
the mean over training seeds). The regime rule of :mod:`.exclusions` compares the two.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

__all__ = ["Head", "HEAD_TABLES", "LOSS_ROW_IDS", "head_of", "paper_ssr", "our_ssr", "SSR_COLUMN"]

SSR_COLUMN = "nearid_ssr"

# a loss's row id in Table 3 where it differs from the loss's name (the registry's ``row_id``,
# nearid_lib.nearid.losses; tests/test_claims_exclusions.py checks they agree)
LOSS_ROW_IDS = {"circle": "circle_rank", "siglip": "siglip_rank"}

# family -> (paper table, its column naming the row, our table under tables/), per Table 1, 3, 8, 9, 6
HEAD_TABLES = {
    "nearid": ("nearid_table1_main", "row_id", "04_table1_main.csv"),
    "loss": ("nearid_table3_loss_ablation", "row_id", "05_table3_loss_ablation.csv"),
    "alpha": ("nearid_table8_alpha", "alpha", "06_table8_alpha.csv"),
    "beta": ("nearid_table9_beta", "beta", "06_table9_beta.csv"),
    "data": ("nearid_table6_data_ablation", "row_id", "07_table6_data_ablation.csv"),
}
_MODEL = re.compile(r"^(?:(nearid)|(loss|data)\.(\w+)|(alpha|beta)\.(\d+\.\d+))\.")


@dataclass(frozen=True)
class Head:
    """A trained head: ``name`` as the quantities spell it (``loss.circle``), the paper table and its
    row (``where``: the key column's value) and our table."""
    name: str
    paper_table: str
    key_column: str
    key: str
    ours: str


def head_of(quantity: str) -> Head | None:
    """The trained NearID head ``quantity`` is measured on, or None (the frozen encoder, another
    paper's model, a name this naming does not cover)."""
    m = _MODEL.match(quantity)
    if not m:
        return None
    if m.group(1):
        family, name, key = "nearid", "nearid", "nearid"
    elif m.group(2):
        family, name = m.group(2), f"{m.group(2)}.{m.group(3)}"
        key = LOSS_ROW_IDS.get(m.group(3), m.group(3)) if family == "loss" else m.group(3)
    else:
        family, name, key = m.group(4), f"{m.group(4)}.{m.group(5)}", m.group(5)
    table, col, ours = HEAD_TABLES[family]
    return Head(name, table, col, key, ours)


def _row(table: pd.DataFrame, col: str, key: str) -> pd.DataFrame:
    if col not in table:
        return table.iloc[0:0]
    if col in ("alpha", "beta"):
        vals = pd.to_numeric(table[col], errors="coerce")
        return table[vals.sub(float(key)).abs() < 1e-9]
    return table[table[col].astype(str) == key]


def _paper_row(head: Head, paper_folder: Path) -> pd.DataFrame:
    path = Path(paper_folder) / f"{head.paper_table}.csv"
    return _row(pd.read_csv(path), head.key_column, head.key) if path.is_file() else pd.DataFrame()


def paper_ssr(head: Head, paper_folder: Path) -> float | None:
    """The SSR (percent) the paper reports for ``head``, or None when its row is not transcribed."""
    row = _paper_row(head, paper_folder)
    if len(row) != 1 or SSR_COLUMN not in row:
        return None
    v = pd.to_numeric(row[SSR_COLUMN], errors="coerce").iloc[0]
    return None if pd.isna(v) else float(v)


def our_ssr(head: Head, tables: Path, paper_folder: Path) -> float | None:
    """Our SSR (percent, the mean over training seeds) of ``head`` in the run's ``tables`` folder:
    the row of our table whose ``row`` label is the paper row's (or whose key column matches), None
    when the table or the row is missing."""
    path = Path(tables) / head.ours
    if not path.is_file():
        return None
    ours = pd.read_csv(path)
    row = _row(ours, head.key_column, head.key)
    if row.empty:
        paper = _paper_row(head, paper_folder)
        if len(paper) == 1 and "row" in paper and "row" in ours:
            row = ours[ours["row"].astype(str) == str(paper["row"].iloc[0])]
    if len(row) != 1 or SSR_COLUMN not in row:
        return None
    v = pd.to_numeric(row[SSR_COLUMN], errors="coerce").iloc[0]
    return None if pd.isna(v) else float(v)
