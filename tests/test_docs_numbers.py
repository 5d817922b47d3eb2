"""Numbers the docs quote from the committed results are checked against the tables they come from.

A quoted number is written as a link to its table with the cell in the link's title:

    ID-Sim reaches [0.327](../figures/tables/09_idsim_persam.csv "method=PerSAM + Ours: map") mAP

(``col=value`` pairs separated by ``; `` select one row, the name after ``: `` is the column). The
link text is the number as printed: it must equal the cell rounded to the digits it shows (a
trailing ``%`` reads a fraction as a percent when the cell is at most 1). A regeneration that moves
the number fails here, naming the doc, the line and both values, so no doc quotes an older run.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
QUOTE = re.compile(r"\[(-?[0-9][0-9,]*(?:\.[0-9]+)?%?)\]\(((?:\.\./)?figures/tables/[\w.-]+\.csv) \"([^\"]+)\"\)")


def quotes() -> list[tuple[Path, int, str, str, str]]:
    """Every quoted number of the docs: (doc, line, text, table path relative to the repository, selector)."""
    out = []
    for doc in DOCS:
        for i, line in enumerate(doc.read_text().splitlines(), 1):
            for text, target, title in QUOTE.findall(line):
                out.append((doc, i, text, target.removeprefix("../"), title))
    return out


def cell(table: Path, title: str) -> float:
    """The cell ``title`` names (``col=value; col=value: column``) in ``table``: exactly one row."""
    where, _, column = title.rpartition(": ")
    df = pd.read_csv(table)
    sel = pd.Series(True, index=df.index)
    for part in filter(None, (p.strip() for p in where.split("; "))):
        col, _, val = part.partition("=")
        sel &= df[col.strip()].astype(str) == val.strip()
    if int(sel.sum()) != 1:
        raise KeyError(f"{table.name}: {int(sel.sum())} rows match {where!r}")
    return float(df.loc[sel, column.strip()].iloc[0])


def printed(value: float, text: str) -> str:
    """``value`` printed with the digits of ``text`` (a percent sign scales a fraction by 100)."""
    digits = len(text.rstrip("%").partition(".")[2])
    percent = text.endswith("%")
    if percent and abs(value) <= 1.0:
        value *= 100
    body = f"{value:,.{digits}f}" if "," in text else f"{value:.{digits}f}"
    return body + ("%" if percent else "")


def test_the_quote_format_is_read():
    table = ROOT / "figures" / "tables" / "09_idsim_persam.csv"
    if not table.exists():
        pytest.skip("no committed figures/tables")
    v = cell(table, "method=PerSAM + Ours: map")
    assert printed(v, "0.000") == f"{v:.3f}" and printed(0.123, "12.3%") == "12.3%"
    with pytest.raises(KeyError):
        cell(table, "method=no such row: map")


@pytest.mark.parametrize("doc, line, text, target, title", quotes(),
                         ids=[f"{q[0].name}:{q[1]}" for q in quotes()])
def test_a_quoted_number_is_its_table_cell(doc, line, text, target, title):
    got = printed(cell(ROOT / target, title), text)
    assert got == text, f"{doc.relative_to(ROOT)}:{line} quotes {text} for {target} [{title}]; the table has {got}"
