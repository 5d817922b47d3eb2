"""The mini world's identity stage (notebook 01: every view's positives and its distractor sources)
with the removal fill shared by a view's fill generators vs computed by each generator, side by side
in one run: the first ``--identities`` mini identities, the two settings alternating ``--repeats``
times in one process (one core), the PNG bytes of both settings hashed to show they are the same.

Sharing is :data:`nearid_lib.generate.procedural._SMOOTH_CACHE` (a view's seed-free fill, one per
resolution, computed once per removal blur: 6 fills a view for its 10 mini sources instead of 10); ``_SMOOTH_CACHE_SIZE = 0`` turns it off, which
computes every fill with no hashing at all: a lower bound on what each generator's own backend
did before (each mini source has a backend of its own, so its one-view cache never hit during a
world build, and it hashed the float image on every call).

Writes ``benchmarks/results/bench_world_fill.{json,md}``.

    .venv/bin/python benchmarks/bench_world_fill.py [--identities 24] [--repeats 3]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from nearid_lib.config import get_profile
from nearid_lib.data import backgrounds
from nearid_lib.data import jobs
from nearid_lib.data.draws import identity_list
from nearid_lib.generate import procedural

HERE = Path(__file__).resolve().parent


def _run(cfg, idents, size: int) -> tuple[float, str]:
    """Seconds to build ``idents`` with a fill cache of ``size`` views, and the hash of the PNGs."""
    procedural._SMOOTH_CACHE.clear()
    procedural._SMOOTH_CACHE_SIZE = size
    out = Path(tempfile.mkdtemp(prefix="bench_world_fill."))
    try:
        t0 = time.perf_counter()
        for rec in idents:
            jobs.job_identity((cfg, out, rec))
        dt = time.perf_counter() - t0
        h = hashlib.sha1()
        for p in sorted(out.rglob("*.png")):
            h.update(p.relative_to(out).as_posix().encode())
            h.update(p.read_bytes())
        return dt, h.hexdigest()
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--identities", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cfg = get_profile("mini")
    backgrounds.photo_pool()
    idents = identity_list(cfg)[:args.identities]
    size_on = procedural._SMOOTH_CACHE_SIZE
    _run(cfg, idents[:2], size_on)                      # warm-up (imports, photo pool)
    times: dict[str, list[float]] = {"per generator": [], "shared": []}
    hashes: dict[str, set[str]] = {"per generator": set(), "shared": set()}
    for _ in range(args.repeats):
        for name, size in (("per generator", 0), ("shared", size_on)):
            dt, h = _run(cfg, idents, size)
            times[name].append(dt)
            hashes[name].add(h)
    procedural._SMOOTH_CACHE_SIZE = size_on
    med = {k: statistics.median(v) for k, v in times.items()}
    res = {"identities": len(idents), "sources": list(cfg.world.distractor_sources), "repeats": args.repeats,
           "seconds": times, "median_ms_per_identity": {k: 1000 * v / len(idents) for k, v in med.items()},
           "ratio_shared_over_per_generator": med["shared"] / med["per generator"],
           "same_bytes": hashes["per generator"] == hashes["shared"] and len(hashes["shared"]) == 1}
    print(json.dumps(res, indent=1))
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_world_fill.json").write_text(json.dumps(res, indent=1) + "\n")
    lines = ["# World identity stage: removal fill shared by a view's generators vs per generator", "",
             f"{len(idents)} mini identities, {len(cfg.world.distractor_sources)} distractor sources, one process, "
             f"{args.repeats} alternating repeats (median).", "",
             "| setting | ms per identity (median) | runs (s) |", "|---|---|---|"]
    for k in times:
        lines.append(f"| {k} | {res['median_ms_per_identity'][k]:.0f} | "
                     f"{', '.join(f'{t:.2f}' for t in times[k])} |")
    lines += ["", f"shared / per generator: **{res['ratio_shared_over_per_generator']:.3f}**; "
                  f"same PNG bytes: {res['same_bytes']}. 'per generator' hashes nothing: a lower bound on "
                  "the code before (a one-view cache per backend that hashed the float image and never hit).", ""]
    (out / "bench_world_fill.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
