"""The VLM judge of NearID-bench on every GPU, before notebook 04 and outside its kernel.

``torchrun --nproc_per_node N -m nearid_lib.nearid.judge_step --profile paper`` (``make judge
PROFILE=paper``) judges every pair notebook 04 will ask the judge about -- NearID (every source,
full and FG-only), MTG and the DreamBench++ stand-in where the profile has one -- with the judge of
:func:`~nearid_lib.nearid.scorers.judge_encoder` (same model, prompt, cost cap ``eval.vlm_max_ids``
and answers folder): whole batches of pairs are dealt to the processes
(:func:`~nearid_lib.judge.score_pairs_sharded`), each appends its answers to its own file, a killed
step resumes, and notebook 04 then reads every answer instead of judging (hours for a 30B judge on
one GPU inside a kernel otherwise). It prints the pairs judged, the coverage and the seconds per
1,000 pairs. Without ``eval.vlm_judge`` it does nothing.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Sequence

from ..config import get_profile
from ..data import load_nearid, nearid_root
from ..launch import end_launch, launched_state
from ..runtime import set_torch_threads
from .bench import bench_variants
from .evaluate import evaluate_encoder
from .pairs import grid_pairs
from .scorers import judge_encoder

__all__ = ["judge_bench", "main"]


def judge_bench(cfg, data, benc) -> dict:
    """Run ``benc`` (a judge bench encoder) over every pair of NearID-bench that notebook 04 scores
    (:func:`~nearid_lib.nearid.evaluate.evaluate_encoder` on ``eval.split``, every variant); returns
    the pairs judged, coverage per benchmark and seconds."""
    grid = grid_pairs(data, cfg.eval.split) if cfg.eval.dbpp_standin else None
    t = time.perf_counter()
    evaluate_encoder(benc, data, cfg.eval.split, bench_variants(cfg), grid=grid, dbpp=None)
    sec = time.perf_counter() - t
    n = sum(c["n"] for c in benc.coverage.values())
    covered = sum(c["n_covered"] for c in benc.coverage.values())
    return {"pairs": n, "covered": covered, "coverage": covered / n if n else float("nan"), "seconds": sec,
            "seconds_per_1000_pairs": 1000 * sec / n if n else float("nan"),
            "per_benchmark": {k: {"n": v["n"], "n_covered": v["n_covered"]} for k, v in benc.coverage.items()},
            "answers_dir": str(benc.answers_dir) if benc.answers_dir else None}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nearid_lib.nearid.judge_step --profile paper [--set KEY=VALUE ...]``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="paper")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    over = dict(kv.split("=", 1) for kv in args.set)
    cfg = get_profile(args.profile, overrides=over)
    set_torch_threads(cfg.runtime.threads, cfg.runtime.tune_malloc)
    state = launched_state()
    device = str(state.device) if state is not None else None
    benc = judge_encoder(cfg, device=device)
    if benc is None:
        print("judge step: the profile has no eval.vlm_judge; nothing to judge")
        end_launch()
        return 0
    out = judge_bench(cfg, load_nearid(nearid_root(cfg.name)), benc)
    if state is None or state.is_main_process:
        print(json.dumps(out, indent=1, default=str))
    end_launch()
    return 0


if __name__ == "__main__":  # pragma: no cover
    from ..launch import exit_entry

    exit_entry(main)
