"""Compare the tables and figures of two runs (e.g. a fresh clone's `make reproduce` against the
committed `figures/`): exact equality of every CSV cell and every PNG byte, except columns that
measure time (throughput, seconds), which are listed but never fail the check.

    python scripts/compare_runs.py figures /path/to/other/figures
"""
from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import pandas as pd

TIMING = re.compile(r"(^|_)(s|seconds|sec)(_|$)|per_s$|_per_s_|^s_per|items_per|images_per|throughput|a100_hours")


def compare(a: Path, b: Path) -> int:
    """Print one line per difference; return the number of non-timing differences."""
    bad = 0
    for fa in sorted((a / "tables").glob("*.csv")):
        fb = b / "tables" / fa.name
        if not fb.exists():
            print(f"{fa.name}: missing in {b}")
            bad += 1
            continue
        x, y = pd.read_csv(fa), pd.read_csv(fb)
        if list(x.columns) != list(y.columns) or len(x) != len(y):
            print(f"{fa.name}: shape/columns differ")
            bad += 1
            continue
        cols = [c for c in x.columns if not x[c].equals(y[c])]
        timing = [c for c in cols if TIMING.search(c)]
        other = [c for c in cols if c not in timing]
        if other:
            print(f"{fa.name}: DIFFERENT in {other}")
            bad += 1
        elif timing:
            print(f"{fa.name}: timing columns differ (expected): {timing}")
    digest = lambda p: hashlib.sha1(p.read_bytes()).hexdigest()  # noqa: E731
    for pa in sorted(a.glob("*.png")):
        pb = b / pa.name
        if not pb.exists() or digest(pa) != digest(pb):
            print(f"{pa.name}: figure differs or is missing")
            bad += 1
    n_t, n_f = len(list((a / "tables").glob("*.csv"))), len(list(a.glob("*.png")))
    print(f"{n_t} tables, {n_f} figures compared; {bad} non-timing difference(s)")
    return bad


if __name__ == "__main__":
    sys.exit(1 if compare(Path(sys.argv[1]), Path(sys.argv[2])) else 0)
