"""Which figures an executed notebook wrote, and whether the cell that wrote each one shows it.

A notebook writes its figures with ``run.figure(fig, "NN_name")`` (``<figures>/NN_name.png``,
written atomically: the file's mtime is the moment the figure was saved) and papermill records when
each cell started and ended (``cell.metadata.papermill.start_time / end_time``, UTC). A PNG whose
mtime falls inside a cell's window was written by that cell, which must then carry an ``image/png``
output for it: one per PNG written. Figures are found two ways, so neither a dynamic name nor a
name outside the notebook's number escapes: every ``<figures>/NN_*.png`` of the notebook's own
number, and every literal name of a ``run.figure(...)`` call in a cell's source.

A PNG written while the notebook ran but in no cell's window (between cells, or by a process beside
it: smoke runs two notebooks at a time, each writing only its own ``NN_`` names) is reported too.
"""
from __future__ import annotations

import ast
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

# Linux stamps files with a coarse clock that may trail the precise one papermill reads by a
# scheduler tick (1-10 ms); 50 ms of slack on each side of a window absorbs it, far below the time
# between two cells (papermill saves the notebook in between).
SLACK_S = 0.05


@dataclass
class CellWindow:
    """A code cell that ran: its index, start and end (POSIX seconds), image outputs and the
    literal figure names its source passes to ``run.figure``."""

    index: int
    start: float
    end: float
    images: int
    names: set[str] = field(default_factory=set)


def figure_names(source: str) -> set[str]:
    """The literal names of every ``<x>.figure(fig, "name")`` call in a cell's source."""
    try:
        tree = ast.parse(source)
    except SyntaxError:            # a cell with IPython magics: nothing to read
        return set()
    out = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "figure"
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)):
            out.add(node.args[1].value)
    return out


def _seconds(stamp: str) -> float:
    t = dt.datetime.fromisoformat(stamp)
    if t.tzinfo is None:           # papermill writes UTC with its offset; a naive stamp is UTC too
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.timestamp()


def cell_windows(nb) -> list[CellWindow]:
    """Every code cell papermill ran, in order."""
    out = []
    for i, cell in enumerate(nb.cells):
        pm = cell.get("metadata", {}).get("papermill", {})
        if cell.cell_type != "code" or not pm.get("start_time") or not pm.get("end_time"):
            continue
        images = sum("image/png" in o.get("data", {}) for o in cell.get("outputs", []))
        out.append(CellWindow(i, _seconds(pm["start_time"]), _seconds(pm["end_time"]), images,
                              figure_names(cell.source)))
    return out


@dataclass
class FigureCheck:
    """What :func:`check_notebook` found: ``written`` maps each PNG written during the run to the
    cell that wrote it (None: no cell's window), ``problems`` says what is wrong, one line each."""

    notebook: Path
    written: dict[str, int | None] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def check_notebook(executed: str | Path, figures: str | Path) -> FigureCheck:
    """Check one executed notebook against the figures folder it wrote into (module docstring)."""
    executed, figures = Path(executed), Path(figures)
    nb = nbformat.read(executed, as_version=4)
    res = FigureCheck(executed)
    cells = cell_windows(nb)
    if not cells:
        res.problems.append(f"{executed.name}: no cell carries papermill's start/end times")
        return res
    first, last = cells[0].start - SLACK_S, cells[-1].end + SLACK_S
    number = executed.stem.split("_", 1)[0]
    candidates = set(figures.glob(f"{number}_*.png"))
    candidates |= {figures / f"{n}.png" for c in cells for n in c.names}
    per_cell: dict[int, list[str]] = {}
    for png in sorted(p for p in candidates if p.is_file()):
        t = png.stat().st_mtime
        if not first <= t <= last:
            continue                # not written by this run (an older run, another profile's notebook)
        inside = [c for c in cells if c.start - SLACK_S <= t <= c.end + SLACK_S]
        # the cell whose window holds the stamp without the slack first, else the nearest one
        cell = min(inside, key=lambda c: (not c.start <= t <= c.end, abs(t - (c.start + c.end) / 2)),
                   default=None)
        res.written[png.name] = None if cell is None else cell.index
        if cell is None:
            res.problems.append(f"{executed.name}: {png.name} was written during the run but in no cell")
        else:
            per_cell.setdefault(cell.index, []).append(png.name)
    for c in cells:
        got = per_cell.get(c.index, [])
        if len(got) > c.images:
            res.problems.append(f"{executed.name}: cell {c.index} wrote {len(got)} figure(s) {sorted(got)} but "
                                f"shows {c.images} image(s): display(run.figure(...)) in that cell")
    return res
