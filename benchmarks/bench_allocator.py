"""CPU forward throughput with glibc's malloc defaults vs :func:`nearid_lib.runtime.allocator.tune_allocator`,
side by side in one run: alternating child processes (each with a fresh malloc state), the same
images, the same models (a Lite0-sized ``list[PIL] -> [N, 1280]`` callable as a user writes it, and
the library's frozen EfficientNet-Lite0 encoder of ``mini``), batch 32 at 224 px.

Writes ``benchmarks/results/bench_allocator.{json,md}``.

    .venv/bin/python benchmarks/bench_allocator.py [--repeats 3] [--images 128]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD = """
import sys, time, json
import numpy as np, torch
from PIL import Image
sys.path.insert(0, {here!r})
from nearid_lib.runtime.allocator import tune_allocator
status = tune_allocator(sys.argv[1] == "1")
from bench_score_encoder import lite0_callable
from nearid_lib.models import load_encoder
torch.set_num_threads({threads})
rng = np.random.default_rng(0)
ims = [Image.fromarray(rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)) for _ in range({n})]
fn = lite0_callable()
enc = load_encoder("efficientnet-lite0")[0]
out = {{"status": status}}
for name, run in (("callable", lambda b: fn(b)), ("library", lambda b: enc.embed(b, batch_size=32))):
    run(ims[:32])                                   # warm-up
    t = time.perf_counter()
    for i in range(0, len(ims), 32):
        run(ims[i:i + 32])
    out[name] = len(ims) / (time.perf_counter() - t)
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--images", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    code = CHILD.format(here=str(HERE), n=args.images, threads=args.threads)
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    runs: dict[str, list[dict]] = {"default": [], "tuned": []}
    for _ in range(args.repeats):
        for key, flag in (("default", "0"), ("tuned", "1")):
            out = subprocess.run([sys.executable, "-c", code, flag], capture_output=True, text=True, env=env,
                                 check=True).stdout.strip().splitlines()[-1]
            runs[key].append(json.loads(out))
    res = {"images": args.images, "batch_size": 32, "image_size": 224, "threads": args.threads,
           "repeats": args.repeats, "status_tuned": runs["tuned"][0]["status"], "cpu_count": os.cpu_count(),
           "load_average": os.getloadavg(), "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    for model in ("callable", "library"):
        d = statistics.median(r[model] for r in runs["default"])
        t = statistics.median(r[model] for r in runs["tuned"])
        res[model] = {"default_images_per_s": round(d, 1), "tuned_images_per_s": round(t, 1),
                      "speedup": round(t / d, 2), "runs_default": [round(r[model], 1) for r in runs["default"]],
                      "runs_tuned": [round(r[model], 1) for r in runs["tuned"]]}
    out = HERE / "results" / "bench_allocator"
    out.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n")
    md = ["# glibc malloc defaults vs nearid_lib.runtime.allocator.tune_allocator (CPU forwards)", "",
          f"{args.images} images, batch 32, 224 px, {args.threads} torch threads, {args.repeats} alternating child "
          f"processes per setting (median); tuned: {res['status_tuned']}", "",
          "| model | default (img/s) | tuned (img/s) | speedup |", "|---|---|---|---|"]
    for model, label in (("callable", "Lite0-sized callable (timm, as a user writes it)"),
                         ("library", "library EfficientNet-Lite0 encoder (mini's frozen backbone)")):
        r = res[model]
        md.append(f"| {label} | {r['default_images_per_s']} | {r['tuned_images_per_s']} | {r['speedup']}x |")
    md += ["", f"{res['cpu_count']} CPUs, load average at the end {', '.join(f'{x:.1f}' for x in res['load_average'])} "
           f"({res['when']})", ""]
    out.with_suffix(".md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
