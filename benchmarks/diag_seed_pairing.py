"""Seed terms drawn per side or paired by seed: how far apart are the intervals? (issue 38, item 4)

A NearID sweep's rows share their seeds (seed k: the same initialisation and, for the same data
settings, the same batches), so a comparison of two rows is paired by seed
(:func:`nearid_lib.claims.seeds_paired`). This script recomputes chosen NearID claims from the
finished runs of a ``mini`` build (the per-unit files of ``build/mini/head_runs``; nothing is
trained: a missing run is an error), each claim alone with its own generator, once with each side's
seed term drawn on its own and once paired, so two builds (e.g. a regeneration and its
``NEARID_FOLD_BATCHNORM=0`` twin) can be compared claim by claim without the stream order of a
notebook. Writes ``benchmarks/results/seed_pairing_<label>.{csv,md}``.

    NEARID_ROOT=/path/to/a/build .venv/bin/python \\
        benchmarks/diag_seed_pairing.py --label regen --claims nearid.3b,nearid.6c,nearid.6d,nearid.8b
"""
from __future__ import annotations

import argparse
import contextlib
import io
from dataclasses import replace
from pathlib import Path

import pandas as pd

from nearid_lib import get_profile
from nearid_lib.claims import evaluate_claim
from nearid_lib.config import seeds_of, with_overrides
from nearid_lib.data import load_profile_data
from nearid_lib.io_utils import atomic_write_text, write_csv
from nearid_lib.nearid.ablations import table_rows
from nearid_lib.nearid.checkpoints import run_dir
from nearid_lib.nearid.claims import NEARID_CLAIMS
from nearid_lib.nearid.sweep import run_rows
from nearid_lib.report import render_markdown_table
from nearid_lib.seeding import make_rng

RESULTS = Path(__file__).resolve().parent / "results"


def _rows(cfg, data):
    """Every sweep row of notebooks 05-07 once (Table 1's NearID row is Table 3's L_NearID row)."""
    out, seen = [], set()
    for r in table_rows(cfg, data):
        if r.key not in seen:
            seen.add(r.key)
            out.append(r)
    return out


def sweep_evidence() -> dict:
    """The evidence of every NearID sweep row of the ``mini`` build under ``NEARID_ROOT``, from its
    finished runs (a missing run is an error; nothing is trained)."""
    cfg = get_profile("mini")
    data = load_profile_data(cfg, build=False)
    rows = _rows(cfg, data)
    missing = [r.key for r in rows for s in seeds_of(cfg)
               if not (run_dir(replace(with_overrides(cfg, r.overrides), seed=int(s)), data) / "scores.json").exists()]
    if missing:
        raise SystemExit(f"diag_seed_pairing: runs not finished in this build (run notebooks 05-07 first): {missing}")
    with contextlib.redirect_stdout(io.StringIO()):
        sweep = run_rows(cfg, data, None, rows, workers=1, progress=False)
    return sweep.evidence()


def nearid_specs(keys: str, script: str) -> dict:
    """The NearID claim declarations named by comma-separated ``keys`` (an unknown key ends ``script``)."""
    specs = {s.key: s for s in NEARID_CLAIMS}
    unknown = [k for k in keys.split(",") if k not in specs]
    if unknown:
        raise SystemExit(f"{script}: unknown claim(s) {unknown}")
    return {k: specs[k] for k in keys.split(",")}


def write_result(table: pd.DataFrame, name: str, title: str) -> None:
    """``benchmarks/results/<name>.csv`` and ``.md`` (a markdown table under ``title``)."""
    RESULTS.mkdir(exist_ok=True)
    write_csv(table, RESULTS / f"{name}.csv")
    atomic_write_text(RESULTS / f"{name}.md", f"# {title}\n\n" + render_markdown_table(table) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", required=True, help="comma-separated claim keys (nearid.3b,...)")
    ap.add_argument("--label", required=True, help="names the output files (e.g. regen, twin)")
    ap.add_argument("--n-boot", type=int, default=4000)
    args = ap.parse_args()
    specs = nearid_specs(args.claims, "diag_seed_pairing")
    evidence = sweep_evidence()
    out = []
    for key in specs:
        for paired in (False, True):
            row = evaluate_claim(specs[key], evidence, make_rng(0, "seed-pairing", key), n_boot=args.n_boot,
                                 pair_seeds=paired)
            out.append({"claim": key, "seed_term": "paired" if paired else "per side", "verdict": row["verdict"],
                        "estimate": row.get("estimate"), "ci_low": row.get("ci_low"), "ci_high": row.get("ci_high"),
                        "seeds": row.get("seeds"), "n_boot": args.n_boot})
            print(f"{key:12s} {out[-1]['seed_term']:8s} {row['verdict']:14s} "
                  f"[{row.get('ci_low', float('nan')):.4f}, {row.get('ci_high', float('nan')):.4f}]", flush=True)
    write_result(pd.DataFrame(out), f"seed_pairing_{args.label}", f"Seed terms per side vs paired ({args.label})")


if __name__ == "__main__":
    main()
