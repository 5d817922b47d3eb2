"""Give every progress bar of an executed notebook the text of its final state.

A progress bar in a notebook is a widget (``tqdm.auto`` under a kernel). Its output keeps the
widget's id and, for every viewer that cannot draw widgets (GitHub, nbconvert, a text editor, a
JupyterLab that lacks the widget's state), a ``text/plain`` copy taken when the bar was first shown:
"0%| | 0/22", or "27%| | 6/22" for a resumed job, however far the bar went after. papermill saves
the widgets' final state in the notebook's metadata (``widgets``); this script rewrites each bar's
``text/plain`` from that state ("world/identities: 100%|##########| 22/22 [...]"), so no saved
output shows a stale bar. Outputs that are not tqdm bars, and bars whose state was not saved, are
left as they are.

Usage: ``python scripts/finalise_notebook.py EXECUTED.ipynb`` (``scripts/run_notebook.sh`` runs it on
every executed notebook before moving it into place); prints how many bars it rewrote.
"""
from __future__ import annotations

import html
import sys
from pathlib import Path

import nbformat

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
BAR_WIDTH = 10          # characters of the bar itself, as tqdm draws it in a terminal of unknown width


def _model(state: dict, ref: str) -> dict | None:
    return state.get(ref.removeprefix("IPY_MODEL_"))


def bar_text(state: dict, model_id: str) -> str | None:
    """The final text of the tqdm bar whose container widget is ``model_id`` (an HBox of the text
    before the bar, the progress bar, the text after it), or None when it is not one."""
    box = state.get(model_id)
    if not box or box.get("model_name") != "HBoxModel":
        return None
    kids = [_model(state, c) for c in box.get("state", {}).get("children", [])]
    if len(kids) != 3 or any(k is None for k in kids) or \
            kids[1].get("model_name") not in ("FloatProgressModel", "IntProgressModel"):
        return None
    left, prog, right = (k.get("state", {}) for k in kids)
    lo, hi, value = float(prog.get("min", 0)), float(prog.get("max", 0)), float(prog.get("value", 0))
    frac = min(max((value - lo) / (hi - lo), 0.0), 1.0) if hi > lo else 0.0
    full = int(frac * BAR_WIDTH)
    bar = "#" * full + " " * (BAR_WIDTH - full)
    # tqdm pads its widget texts with figure spaces (U+2007) and escapes them as HTML
    text = f"{html.unescape(str(left.get('value', '')))}|{bar}|{html.unescape(str(right.get('value', '')))}"
    return text.replace("\u2007", " ")


def finalise(nb) -> int:
    """Rewrite, in place, the ``text/plain`` of every progress bar whose final state ``nb`` holds;
    returns how many were rewritten."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    if not state:
        return 0
    n = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            ref = out.get("data", {}).get(WIDGET_VIEW)
            text = bar_text(state, ref.get("model_id", "")) if isinstance(ref, dict) else None
            if text is not None:
                out["data"]["text/plain"] = text
                n += 1
    return n


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/finalise_notebook.py EXECUTED.ipynb", file=sys.stderr)
        return 2
    path = Path(argv[0])
    nb = nbformat.read(path, as_version=4)
    n = finalise(nb)
    if n:
        nbformat.write(nb, path)
    print(f"[notebook] {path.name}: {n} progress bar(s) given their final text")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
