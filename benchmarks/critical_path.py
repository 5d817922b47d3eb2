"""The critical path of `make reproduce`: the longest chain of notebooks that cannot run beside each
other, and the wall time `make -jN` can reach on N cores, from measured notebook times.

The notebooks' order comes from the Makefile's upstream edges (`$(NB_OUT)/NN.ipynb: $(call nb,MM)`;
99_report waits for every other notebook). A notebook's time is read from an executed run
(papermill's `duration` in `build/<profile>/notebooks/*.ipynb`) or given with `--stages`
(`00=17,01=699,...`, e.g. the stage times docs/paper-profile.md records for a run).

    python benchmarks/critical_path.py build/mini/notebooks
    python benchmarks/critical_path.py --stages "00=17,01=699,02=470,03=809" --label "mini at 7618174"

It prints, and writes to `benchmarks/results/critical_path.md`:

* every notebook's time and the earliest it can finish with unlimited cores;
* the critical path (its sum is the least wall time any number of cores gives);
* `make -jN`'s wall time for N = 1, 2, 4, 8, 16, simulated as make schedules: a notebook starts as
  soon as its upstream notebooks are done and one of the N job slots is free, in the Makefile's
  order (00 and 09 first, then by number).

What it assumes: a notebook's time as measured in the run read, so the times of a run whose
notebooks shared 2 cores already include the sharing (on more cores each would be shorter, and the
projection is an upper bound); a notebook's own worker processes (`NEARID_WORKERS`) are inside its time.
"""
from __future__ import annotations

import argparse
import heapq
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "critical_path.md"
CORES = (1, 2, 4, 8, 16)
FIRST = ("00_environment", "09_train_idsim")          # the Makefile's `notebooks:` target lists them first


def notebook_names() -> list[str]:
    """Every notebook of `notebooks/`, by number."""
    return sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.py"))


def upstream_edges(makefile: Path, names: list[str]) -> dict[str, set[str]]:
    """``{notebook: the notebooks it waits for}`` from the Makefile's upstream edges."""
    edges = {n: set() for n in names}
    for line in makefile.read_text().splitlines():
        m = re.match(r"^\$\(NB_OUT\)/(\w+)\.ipynb:(.*)$", line)
        if m and m.group(1) in edges:
            edges[m.group(1)] |= {u for u in re.findall(r"\$\(call nb,(\w+)\)", m.group(2)) if u in edges}
    for n in names:
        if n.startswith("99_"):
            edges[n] = {o for o in names if o != n}
    return edges


def measured(folder: Path, names: list[str]) -> dict[str, float]:
    """Each executed notebook's papermill duration (seconds) in ``folder``."""
    out = {}
    for n in names:
        f = folder / f"{n}.ipynb"
        if f.is_file():
            out[n] = float(json.loads(f.read_text())["metadata"]["papermill"]["duration"])
    return out


def given(text: str, names: list[str]) -> dict[str, float]:
    """``--stages "00=17,01=699"``: seconds by notebook number."""
    by_number = {n[:2]: n for n in names}
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        num, _, sec = part.partition("=")
        if num.strip() not in by_number:
            raise SystemExit(f"--stages: no notebook numbered {num.strip()!r} (have {', '.join(by_number)})")
        out[by_number[num.strip()]] = float(sec)
    return out


def earliest_finish(times: dict[str, float], edges: dict[str, set[str]]) -> tuple[dict[str, float], list[str]]:
    """Earliest finish of every notebook with unlimited cores, and the critical path (a longest chain)."""
    finish, before = {}, {}
    for n in sorted(times):                          # numbers increase along every edge
        ups = [u for u in edges[n] if u in times]
        start_from = max(ups, key=lambda u: finish[u], default=None)
        finish[n] = (finish[start_from] if start_from else 0.0) + times[n]
        before[n] = start_from
    path, n = [], max(finish, key=finish.get)
    while n is not None:
        path.append(n)
        n = before[n]
    return finish, path[::-1]


def make_schedule(times: dict[str, float], edges: dict[str, set[str]], jobs: int) -> float:
    """The wall time of `make -j<jobs>` over ``times``: list scheduling in the Makefile's order."""
    order = [n for n in FIRST if n in times] + [n for n in sorted(times) if n not in FIRST]
    done: dict[str, float] = {}
    running: list[tuple[float, str]] = []
    now, waiting = 0.0, list(order)
    while waiting or running:
        ready = [n for n in waiting if all(u in done for u in edges[n] if u in times)]
        while ready and len(running) < jobs:
            n = ready.pop(0)
            waiting.remove(n)
            heapq.heappush(running, (now + times[n], n))
        now, n = heapq.heappop(running)
        done[n] = now
    return now


def report(times: dict[str, float], edges: dict[str, set[str]], label: str) -> str:
    """The Markdown report: notebook times, the critical path and make -jN's wall time."""
    finish, path = earliest_finish(times, edges)
    total = sum(times.values())
    lines = [f"# Critical path of `make reproduce` ({label})", "",
             "Notebook times as measured in that run (a run that shared its cores: each time includes the "
             "sharing, so the projections for more cores are upper bounds). Written by "
             "`benchmarks/critical_path.py`.", "",
             "| notebook | seconds | waits for | earliest finish, unlimited cores (s) |", "|---|---:|---|---:|"]
    for n in sorted(times):
        ups = ", ".join(sorted(u[:2] for u in edges[n] if u in times)) or "-"
        if n.startswith("99_"):
            ups = "all"
        lines.append(f"| `{n}` | {times[n]:.0f} | {ups} | {finish[n]:.0f} |")
    cp = finish[path[-1]]
    lines += ["", f"**Critical path**: {' -> '.join(p[:2] for p in path)}: **{cp:.0f} s ({cp / 60:.1f} min)**, "
                  f"the least wall time any number of cores gives. The notebooks' times sum to {total:.0f} s "
                  f"({total / 60:.1f} min).", "",
              "| cores (`make -jN`) | projected wall time |", "|---:|---:|"]
    for j in CORES:
        w = make_schedule(times, edges, j)
        lines.append(f"| {j} | {w:.0f} s ({w / 60:.1f} min) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", type=Path, help="executed notebooks (build/<profile>/notebooks)")
    ap.add_argument("--stages", default="", help='seconds by notebook number, "00=17,01=699,..."')
    ap.add_argument("--label", default="", help="what run the times come from")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    names = notebook_names()
    times = given(args.stages, names) if args.stages else measured(args.folder or ROOT / "build/mini/notebooks", names)
    if not times:
        print("critical_path: no notebook times (give an executed run's folder or --stages)", file=sys.stderr)
        return 2
    text = report(times, upstream_edges(ROOT / "Makefile", names), args.label or str(args.folder))
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
