"""Compare the tables and figures of two runs (e.g. a fresh clone's `make reproduce` against the
committed `figures/`): exact equality of every CSV cell and every PNG byte, except columns that
measure time (throughput, seconds), which are listed but never fail the check.

    python scripts/compare_runs.py figures /path/to/other/figures
    python scripts/compare_runs.py figures /path/to/other/figures --atol 1e-6

``--atol``: numeric columns that differ by at most that much are listed with their largest
difference and do not fail the check (a change that reorders floating-point work, e.g. batches of
another composition). Figures drawn from such numbers may differ in bytes: they are then listed as
differing, not failed, with the tables' tolerance as the reason.
"""
from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import pandas as pd

TIMING = re.compile(r"(^|_)(s|seconds|sec)(_|$)|per_s$|_per_s_|^s_per|items_per|images_per|throughput|a100_hours")


def _max_diff(x: pd.Series, y: pd.Series) -> float | None:
    """Largest absolute difference of two numeric columns (NaN in the same places), else None."""
    if not (pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y)):
        return None
    if not x.isna().equals(y.isna()):
        return None
    d = (x.astype(float) - y.astype(float)).abs().max()
    return float(d) if pd.notna(d) else 0.0


def compare(a: Path, b: Path, atol: float | None = None) -> int:
    """Print one line per difference; return the number of non-timing differences (numeric
    differences within ``atol`` do not count)."""
    bad = 0
    tolerated = 0
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
        if other and atol is not None:
            diffs = {c: _max_diff(x[c], y[c]) for c in other}
            if all(d is not None and d <= atol for d in diffs.values()):
                print(f"{fa.name}: within atol {atol:g}: " + ", ".join(f"{c} (max {d:.2g})" for c, d in diffs.items()))
                tolerated += 1
                other = []
        if other:
            print(f"{fa.name}: DIFFERENT in {other}")
            bad += 1
        elif timing:
            print(f"{fa.name}: timing columns differ (expected): {timing}")
    digest = lambda p: hashlib.sha1(p.read_bytes()).hexdigest()  # noqa: E731
    for pa in sorted(a.glob("*.png")):
        pb = b / pa.name
        if not pb.exists():
            print(f"{pa.name}: figure missing")
            bad += 1
        elif digest(pa) != digest(pb):
            if tolerated:
                print(f"{pa.name}: figure bytes differ (tables differ within atol)")
            else:
                print(f"{pa.name}: figure differs")
                bad += 1
    n_t, n_f = len(list((a / "tables").glob("*.csv"))), len(list(a.glob("*.png")))
    print(f"{n_t} tables, {n_f} figures compared; {bad} non-timing difference(s)")
    return bad


if __name__ == "__main__":
    args = sys.argv[1:]
    tol = None
    if "--atol" in args:
        i = args.index("--atol")
        tol = float(args[i + 1])
        del args[i:i + 2]
    sys.exit(1 if compare(Path(args[0]), Path(args[1]), tol) else 0)
