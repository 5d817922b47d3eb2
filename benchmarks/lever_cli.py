"""The command line both calibration scripts share (``calibrate_world.py``, ``calibrate_galleries.py``):
which levers to run (``--levers a,b``), ``--list`` them, ``--out`` (the results' stem), torch's threads
from ``NEARID_THREADS`` (default 2), and the rows already written, so that a rerun skips a lever whose
rows are in the CSV (the scripts resume)."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Callable, Mapping

import pandas as pd

from nearid_lib.runtime import set_torch_threads

__all__ = ["lever_args"]


def lever_args(doc: str, levers: Mapping[str, tuple[str, dict]], default: str, name: str,
               add: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace | None:
    """Parse the script's arguments (``add`` puts its own ones in); None after ``--list`` printed the
    levers. Otherwise the namespace carries ``csv`` (the results table) and ``rows`` (its records, [] when new)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--levers", default=default, help=f"comma-separated, of {', '.join(levers)}")
    ap.add_argument("--list", action="store_true", help="print the levers and exit")
    if add is not None:
        add(ap)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / name))
    args = ap.parse_args()
    if args.list:
        width = max(map(len, levers))
        for k, (what, ov) in levers.items():
            print(f"{k:>{width}s}  {what}  {ov}")
        return None
    set_torch_threads(int(os.environ.get("NEARID_THREADS", "2")))
    args.csv = Path(args.out).with_suffix(".csv")
    args.rows = pd.read_csv(args.csv).to_dict("records") if args.csv.exists() else []
    return args
