"""Training benchmarks (issue 4, Performance items 2 and 3); writes benchmarks/results/bench_training.{json,md}.

(2) one training step of the NearID head with cached backbone tokens vs the uncached mode that runs the
    frozen mini backbone (EfficientNet-Lite0, 224 px) on every slot image, same rows, same batch;
(3) the wall time of the mini training run (cfg.train of the ``mini`` profile, caches already built):
    taken from notebook 03's ``tables/03_timings.csv`` when it exists, else measured here with ``--train``.

Usage: ``python benchmarks/bench_training.py [--world mini|smoke] [--batch 16] [--steps 3] [--train]``.
Timings are wall-clock on this machine (state the load: the numbers are not from an idle machine).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from nearid_lib.config import get_profile
from nearid_lib.data import is_complete, load_nearid, nearid_root
from nearid_lib.io_utils import write_json, atomic_write_text
from nearid_lib.paths import figures_dir, repo_root
from nearid_lib.models import load_backbone
from nearid_lib.train import train_head


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", default=None, help="dataset profile (default: mini if built, else smoke)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--train", action="store_true", help="measure the mini training run here (3)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    world = args.world or ("mini" if is_complete(nearid_root("mini")) else "smoke")
    data = load_nearid(nearid_root(world))
    res: dict = {"machine": {"python": sys.version.split()[0], "torch": torch.__version__,
                             "platform": platform.platform(), "threads": args.threads,
                             "cpu_count": os.cpu_count(), "loadavg": os.getloadavg()},
                 "world": world}
    # (2) the mini backbone (real EfficientNet-Lite0 weights, 224 px) and the mini head, on `world`'s images
    times = {}
    for mode in ("cached", "uncached"):
        over = {"train.batch_size": args.batch, "train.use_cache": mode == "cached", "train.augment": True,
                "train.warmup_steps": 1, "train.eval_every": 0}
        cfg = get_profile("mini", overrides=over)
        backbone = load_backbone(cfg)[0]
        cache_root = None if world == "mini" else repo_root() / "cache" / "bench" / world
        # warm-up run of 1 step builds/loads caches and allocates; then the timed run
        t_w = train_head(get_profile("mini", overrides={**over, "train.max_steps": 1}), data, backbone,
                         progress=False, eval_split=None, cache_root=cache_root).seconds
        r = train_head(get_profile("mini", overrides={**over, "train.max_steps": args.steps}), data, backbone,
                       progress=False, eval_split=None, cache_root=cache_root)
        times[mode] = float(np.median([h["seconds"] for h in r.history]))   # per-step wall time
        res[f"{mode}_warmup_s"] = t_w
    res["step"] = {"batch_rows": args.batch, "cached_s_per_step": times["cached"],
                   "uncached_s_per_step": times["uncached"], "ratio_uncached_over_cached": times["uncached"] / times["cached"],
                   "note": "per step includes reading tokens (cached) or decoding, masking, augmenting and encoding "
                           "every slot image with the frozen backbone (uncached); the head step is identical"}
    # (3) mini training wall time
    t03 = figures_dir("mini") / "tables" / "03_timings.csv"
    if t03.exists():
        import pandas as pd

        res["mini_training"] = {"source": str(t03.relative_to(repo_root())), **pd.read_csv(t03).iloc[0].to_dict()}
    elif args.train and world == "mini":
        cfg = get_profile("mini")
        r = train_head(cfg, data, load_backbone(cfg)[0], progress=True, eval_split=None)
        res["mini_training"] = {"source": "measured here", "train_s": r.seconds, "steps": r.steps}
    else:
        res["mini_training"] = {"source": "not measured (run notebook 03 in mini, or --train with the mini world)"}
    out = Path(__file__).resolve().parent / "results"
    write_json(res, out / "bench_training.json")
    s = res["step"]
    mt = res["mini_training"]
    md = ["# Training benchmarks", "",
          f"Machine: {res['machine']['platform']}, torch {res['machine']['torch']}, {args.threads} threads, "
          f"load average {tuple(round(x, 1) for x in res['machine']['loadavg'])} (shared machine).", "",
          f"(2) cached vs uncached training step, mini backbone EfficientNet-Lite0 @224 + mini MAP head, "
          f"{args.batch} rows/step ({world} world images):", "",
          "| mode | s / step |", "|---|---|",
          f"| cached tokens | {s['cached_s_per_step']:.2f} |", f"| uncached (backbone every step) | {s['uncached_s_per_step']:.2f} |",
          f"| ratio | {s['ratio_uncached_over_cached']:.1f}x |", "",
          "(3) mini training of the NearID head: " + (
              f"{mt['train_s']:.0f} s for {int(mt['steps'])} steps; cache build {mt.get('cache_s', float('nan')):.0f} s; "
              f"eval {mt.get('eval_s', float('nan')):.0f} s ({mt['source']})" if "train_s" in mt else mt["source"]), ""]
    atomic_write_text(out / "bench_training.md", "\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
