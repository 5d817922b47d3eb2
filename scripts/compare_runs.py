"""Compare the tables and figures of two runs (e.g. a fresh clone's `make reproduce` against the
committed `figures/`): exact equality of every CSV cell and every PNG's pixels (not its text chunks,
which name the commit that made it), except columns that measure time (throughput, seconds), which
are listed but never fail the check.

    python scripts/compare_runs.py figures /path/to/other/figures
    python scripts/compare_runs.py figures /path/to/other/figures --atol 1e-6

    python scripts/compare_runs.py figures /path/to/other/figures --verdicts

``--verdicts``: only the claims tables, claim by claim: each claim whose verdict differs between
the two runs, with both estimates and intervals, and the count of claims whose estimate moved
without changing the verdict. It answers whether two runs that differ only in float rounding
(docs/mini.md, "Verdicts under float rounding") decide the same. A flip of a verdict that is
**leaning** in either run (an interval end within the float-rounding margin of its criterion,
:func:`nearid_lib.claims.report_section.leaning`; the report marks it) is what such a rerun is expected to
do at times, and is listed apart from the flips outside the leaning ones; the exit status is 1 only
for the latter (a claim present in one run only counts among them).

``--atol``: numeric columns that differ by at most that much are listed with their largest
difference and do not fail the check (a change that reorders floating-point work, e.g. batches of
another composition). Figures drawn from such numbers may differ in pixels: they are then listed as
differing, not failed, with the tables' tolerance as the reason.
"""
from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import pandas as pd
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # this repository's library
from nearid_lib.claims.report_section import leaning  # noqa: E402


def _pixels_digest(path: Path) -> str:
    """SHA-1 of a PNG's decoded pixels, its mode and size: two renderings of one figure made at two
    commits carry different text chunks and are the same figure."""
    with Image.open(path) as im:
        return hashlib.sha1(f"{im.mode}{im.size}".encode() + im.tobytes()).hexdigest()


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
    # a figure is its pixels: its text chunks (the commit and the date that made it) may differ
    digest = lambda p: _pixels_digest(p)  # noqa: E731
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


def compare_verdicts(a: Path, b: Path) -> int:
    """Print each claim whose verdict differs between the claims tables of ``a`` and ``b`` (and the
    claims present in only one), the flips of verdicts leaning in either run apart; return how many
    differ outside the leaning ones."""
    flips: list[str] = []
    leaning_flips: list[str] = []
    moved = same = 0
    for fa in sorted((a / "tables").glob("claims_*.csv")):
        fb = b / "tables" / fa.name
        if not fb.exists():
            flips.append(f"{fa.name}: missing in {b}")
            continue
        # point-valued claims have no key: their claim text names them
        x, y = (d.assign(key=d["key"].fillna(d["claim"])).set_index("key")
                for d in (pd.read_csv(f) for f in (fa, fb)))
        for key in x.index.union(y.index):
            if key not in x.index or key not in y.index:
                flips.append(f"{fa.name} {key}: only in {a if key in x.index else b}")
                continue
            ra, rb = x.loc[key], y.loc[key]
            nums = [c for c in ("estimate", "ci_low", "ci_high") if c in x.columns and c in y.columns]
            fmt = lambda r: (f"{r['verdict']} (" + ", ".join(f"{c} {float(r[c]):.4g}" for c in nums)  # noqa: E731
                             + f"; ours: {r.get('ours', '')})")
            if ra["verdict"] != rb["verdict"]:
                lean = [lab for lab in (leaning(ra), leaning(rb)) if lab]
                line = f"{fa.name} {key}: {fmt(ra)} -> {fmt(rb)}"
                (leaning_flips if lean else flips).append(line + (f" [{lean[0]}]" if lean else ""))
            elif (not (ra[nums].astype(float).fillna(0) == rb[nums].astype(float).fillna(0)).all()
                  or ra.get("ours") != rb.get("ours")):
                moved += 1
            else:
                same += 1
    if leaning_flips:
        print("flips of leaning verdicts (an interval end within the float-rounding margin of its criterion):")
        print("\n".join(f"  {line}" for line in leaning_flips))
    if flips:
        print("flips outside the leaning verdicts:")
        print("\n".join(f"  {line}" for line in flips))
    print(f"verdicts: {len(flips) + len(leaning_flips)} differ ({len(leaning_flips)} leaning, {len(flips)} outside "
          f"the leaning ones), {moved} same verdict with moved numbers, {same} identical")
    return len(flips)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "-h" in args or "--help" in args or len([a for a in args if not a.startswith("--")]) < 2:
        print(__doc__)
        sys.exit(0 if "-h" in args or "--help" in args else 2)
    tol = None
    if "--atol" in args:
        i = args.index("--atol")
        tol = float(args[i + 1])
        del args[i:i + 2]
    if "--verdicts" in args:
        args.remove("--verdicts")
        sys.exit(1 if compare_verdicts(Path(args[0]), Path(args[1])) else 0)
    sys.exit(1 if compare(Path(args[0]), Path(args[1]), tol) else 0)
