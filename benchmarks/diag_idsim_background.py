"""Why is ID-Sim not less background-sensitive than its frozen backbone in mini? (issue 15)

ID-Sim's claim 2 (Fig. 6: stable under background change) does not hold in ``mini``: ID-Sim's
background sensitivity is about the frozen EfficientNet-Lite0's, while the NearID head on the same
backbone cuts it to a quarter. This script retrains ID-Sim with one lever changed at a time and
measures the selective sensitivities on the world's edit grids (the Fig. 6 regression, test
split), each beside the frozen backbone of the same row:

* **LoRA placement**: adapters on the last 1 (mini default), 2 or 3 block stages;
* **training data**: the triplet mix S1:S2a:S2b (S2a = identity-preserving context edits, the
  background-invariance signal; S2b = identity-altering edits as hard negatives);
* **backbone**: EfficientNet-Lite2 instead of Lite0.

Needs a built ``mini`` world (notebook 01). Writes ``benchmarks/results/idsim_background.{csv,md}``.

    NEARID_ROOT=/path/to/a/clone/with/data .venv/bin/python benchmarks/diag_idsim_background.py
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pandas as pd

from nearid_lib import get_profile
from nearid_lib.data import load_profile_data
from nearid_lib.idsim.ablations import row_profile
from nearid_lib.idsim.eval_suite import embed_encoders
from nearid_lib.idsim.prefix import PrefixStore
from nearid_lib.idsim.sensitivity import grid_similarities, per_anchor_sensitivity
from nearid_lib.idsim.train import train_idsim
from nearid_lib.paths import cache_dir
from nearid_lib.runtime import set_torch_threads

LEVERS = {
    "baseline (LoRA on 1 stage, mix 1:1:1)": {},
    "LoRA on 2 stages": {"adapt_stages": 2},
    "LoRA on 3 stages": {"adapt_stages": 3},
    "mix 1:3:1 (3x context edits)": {"mix": (1.0, 3.0, 1.0)},
    "mix 1:0:1 (no context edits)": {"mix": (1.0, 0.0, 1.0)},
    "mix 1:1:3 (3x hard negatives)": {"mix": (1.0, 1.0, 3.0)},
    "backbone EfficientNet-Lite2": {"backbone": "efficientnet-lite2"},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="mini")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--levers", default="all", help="comma-separated lever names (default all)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "idsim_background"))
    args = ap.parse_args()
    set_torch_threads(int(os.environ.get("NEARID_THREADS", "1")))
    cfg = get_profile(args.profile)
    data = load_profile_data(cfg, build=False)
    grids = data.grids
    levers = LEVERS if args.levers == "all" else {k: LEVERS[k] for k in args.levers.split(",")}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = pd.read_csv(out.with_suffix(".csv")) if out.with_suffix(".csv").exists() else pd.DataFrame()
    rows = done.to_dict("records")
    for name, ov in levers.items():
        if len(done) and name in set(done.lever):
            print(f"[skip] {name}: in {out.with_suffix('.csv')}")
            continue
        t0 = time.time()
        c = row_profile(cfg, ov, args.seed)
        tag = "_".join(f"{k}{v}" for k, v in sorted(ov.items()) if k in ("adapt_stages", "backbone")) or "base"
        base = cache_dir(args.profile) / "idsim" / "diag"
        res = train_idsim(c, data, store_path=base / f"train_prefix_{tag}_s{args.seed}",
                          log=lambda m: None)
        model = res["model"]
        store = PrefixStore(model, data, n_variants=0, seed=args.seed,
                            path=base / f"grid_prefix_{tag}_s{args.seed}")
        emb = embed_encoders(model, store, grids.path.tolist())
        store.save()
        _, wide = per_anchor_sensitivity(grid_similarities(grids, emb))
        m = wide.groupby("encoder")[["identity", "background", "viewpoint", "lighting"]].mean()
        rows.append({"lever": name, "overrides": repr(ov), "seed": args.seed,
                     **{f"idsim_{f}": float(m.loc["idsim", f]) for f in m.columns},
                     **{f"frozen_{f}": float(m.loc["frozen", f]) for f in m.columns},
                     "n_anchors": int(wide.anchor_id.nunique()), "seconds": round(time.time() - t0, 1)})
        pd.DataFrame(rows).to_csv(out.with_suffix(".csv.tmp"), index=False)
        os.replace(out.with_suffix(".csv.tmp"), out.with_suffix(".csv"))
        r = rows[-1]
        print(f"{name}: ID-Sim identity {r['idsim_identity']:.3f} background {r['idsim_background']:.3f} | frozen "
              f"identity {r['frozen_identity']:.3f} background {r['frozen_background']:.3f} ({r['seconds']} s)",
              flush=True)
    df = pd.DataFrame(rows)
    df["bg_ratio"] = df.idsim_background / df.frozen_background
    df["id_ratio"] = df.idsim_identity / df.frozen_identity
    cols = ["lever", "idsim_identity", "idsim_background", "frozen_identity", "frozen_background", "id_ratio",
            "bg_ratio", "seconds"]
    md = ["# ID-Sim background sensitivity in mini: one lever at a time", "",
          f"profile {args.profile}, seed {args.seed}, {int(df.n_anchors.iloc[0])} grid anchors (test split); "
          "sensitivity = -slope of similarity on the factor's change (Fig. 6 regression), mean over anchors; "
          "ratios: ID-Sim / its frozen backbone (< 1: less sensitive).", "",
          "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df[cols].iterrows():
        md.append("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r) + " |")
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(main())
