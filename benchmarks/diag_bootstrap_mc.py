"""How much do a claim's interval ends move with the bootstrap draw alone? (issue 38, item 4)

A claim's 95% interval is a percentile of ``n_boot`` replicates; with three training seeds each
replicate carries a Student t_2 draw (:func:`nearid_lib.claims._seed_noise`), whose 2.5% / 97.5%
quantiles sit in thin tails, so their Monte Carlo error is large for the replicate count. This script
recomputes chosen NearID claims from the finished runs of a ``mini`` build (as
``diag_seed_pairing.py`` does: nothing is trained) with ``--draws`` different generators at each
replicate count of ``--n-boot``, and reports per claim and count the sd of the interval ends over
the draws and how many draws give each verdict. The evidence is the same in every draw: only the
bootstrap's randomness moves. Writes ``benchmarks/results/bootstrap_mc_<label>.{csv,md}``.

    NEARID_ROOT=/path/to/a/build .venv/bin/python benchmarks/diag_bootstrap_mc.py --label regen \\
        --claims nearid.3b,nearid.6c,nearid.6d,nearid.8a,nearid.8b --n-boot 1000,10000 --draws 20
"""
from __future__ import annotations

import argparse
import time
from collections import Counter

import numpy as np
import pandas as pd

from diag_seed_pairing import nearid_specs, sweep_evidence, write_result
from nearid_lib.claims import evaluate_claim
from nearid_lib.seeding import make_rng


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", required=True, help="comma-separated NearID claim keys (nearid.3b,...)")
    ap.add_argument("--label", required=True, help="names the output files (e.g. regen)")
    ap.add_argument("--n-boot", default="1000,10000", help="comma-separated replicate counts")
    ap.add_argument("--draws", type=int, default=20, help="generators per claim and count")
    args = ap.parse_args()
    specs = nearid_specs(args.claims, "diag_bootstrap_mc")
    evidence = sweep_evidence()
    out = []
    for key in specs:
        for n_boot in (int(n) for n in args.n_boot.split(",")):
            t0 = time.perf_counter()
            rows = [evaluate_claim(specs[key], evidence, make_rng(d, "bootstrap-mc", key), n_boot=n_boot)
                    for d in range(args.draws)]
            lo = np.array([r.get("ci_low", np.nan) for r in rows], float)
            hi = np.array([r.get("ci_high", np.nan) for r in rows], float)
            verdicts = Counter(r["verdict"] for r in rows)
            out.append({"claim": key, "n_boot": n_boot, "draws": args.draws, "estimate": rows[0].get("estimate"),
                        "ci_low_mean": lo.mean(), "ci_low_sd": lo.std(ddof=1), "ci_high_mean": hi.mean(),
                        "ci_high_sd": hi.std(ddof=1),
                        "verdicts": "; ".join(f"{v} {n}" for v, n in verdicts.most_common()),
                        "seconds_per_claim": (time.perf_counter() - t0) / args.draws})
            r = out[-1]
            print(f"{key:12s} {n_boot:6d}  low {r['ci_low_mean']:+.4f} sd {r['ci_low_sd']:.4f}  "
                  f"high {r['ci_high_mean']:+.4f} sd {r['ci_high_sd']:.4f}  {r['verdicts']}", flush=True)
    write_result(pd.DataFrame(out), f"bootstrap_mc_{args.label}", f"Interval ends over bootstrap draws ({args.label})")


if __name__ == "__main__":
    main()
