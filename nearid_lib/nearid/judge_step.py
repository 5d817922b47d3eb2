"""The VLM judges of NearID-bench on every GPU, before notebook 04 and outside its kernel.

``torchrun --nproc_per_node N -m nearid_lib.nearid.judge_step --profile paper`` (``make judge
PROFILE=paper``) judges every pair notebook 04 will ask the judges about -- NearID (every source,
full and FG-only), MTG, DreamBench++'s rated generations (each once) or its procedural stand-in -- with every judge of
:func:`~nearid_lib.nearid.judges.judge_encoders` (``eval.vlm_judge`` and Table 7's
``eval.vlm_scales``; same model, prompt, answer reading, cost cap ``eval.vlm_max_ids`` and answers
folder as notebook 04). Each judge runs as replicas sized to the GPUs' memory
(:func:`~nearid_lib.steps.placement.plan_replicas`: one GPU each when the model fits one, else one replica
over several GPUs with ``device_map="auto"``, its first rank judging); whole batches of pairs are
dealt to the judging ranks (:func:`~nearid_lib.judge.score_pairs_sharded`), each appends its answers
to its own file, a killed step resumes, and notebook 04 then reads every answer instead of judging.
A judge behind its gate (no judge configured, weights not in the mirror, its template missing, a
model no GPU group holds) is skipped with the reason printed; the step still succeeds and the
tables say why its rows are empty. It prints each judge's plan, the pairs judged, the coverage and
the seconds per 1,000 pairs.
"""
from __future__ import annotations

import json
import time
from typing import Sequence

import torch

from .. import hub
from ..data import load_nearid, nearid_root
from ..runtime.launch import end_launch, launched_state
from ..runtime import set_torch_threads
from ..steps.gpus import visible_gpus
from ..steps.ledger import record_items, step
from ..steps.placement import placement_plan
from ..steps.runner import step_arguments
from .bench import bench_variants
from .dbpp import dbpp_for_profile
from .evaluate import evaluate_encoder
from .pairs import grid_pairs
from .judges import judge_encoders, judge_models

__all__ = ["judge_bench", "main", "LEDGER_TAGS"]

# the resource ledger's judge steps and the benchmark tag of their pairs (PairBenchEncoder.coverage)
LEDGER_TAGS = {"judge-nearid": "nearid", "judge-mtg": "mtg", "judge-dbpp": "dbpp_human"}


def judge_bench(cfg, data, benc) -> dict:
    """Run ``benc`` (a judge bench encoder) over every pair of NearID-bench that notebook 04 scores
    (:func:`~nearid_lib.nearid.evaluate.evaluate_encoder` on ``eval.split``, every variant); returns
    the pairs judged, coverage per benchmark and seconds."""
    skip = getattr(benc, "skip_dbpp", False)          # Table 7's other scales have no DB++ column
    grid = grid_pairs(data, cfg.eval.split) if cfg.eval.dbpp_standin and not skip else None
    # DreamBench++'s rated generations too, each judged once: notebook 04 then reads every answer
    dbpp = None if skip else dbpp_for_profile(cfg)[0]
    t = time.perf_counter()
    evaluate_encoder(benc, data, cfg.eval.split, bench_variants(cfg), grid=grid, dbpp=dbpp)
    sec = time.perf_counter() - t
    n = sum(c["n"] for c in benc.coverage.values())
    covered = sum(c["n_covered"] for c in benc.coverage.values())
    return {"pairs": n, "covered": covered, "coverage": covered / n if n else float("nan"), "seconds": sec,
            "seconds_per_1000_pairs": 1000 * sec / n if n else float("nan"),
            "per_benchmark": {k: {"n": v["n"], "n_covered": v["n_covered"]} for k, v in benc.coverage.items()},
            "answers_dir": str(benc.answers_dir) if benc.answers_dir else None,
            "judging_ranks": list(benc.workers) if benc.workers is not None else "all"}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nearid_lib.nearid.judge_step --profile paper [--set KEY=VALUE ...]``."""
    _, cfg = step_arguments(argv, __doc__)
    set_torch_threads(cfg.runtime.threads, cfg.runtime.tune_malloc)
    state = launched_state()
    rank = state.process_index if state is not None else 0
    main = state is None or state.is_main_process
    gpus = [g.memory_bytes for g in visible_gpus()]
    if main:
        for model in judge_models(cfg):
            plan = placement_plan(model, hub.hub_dir(), gpus) if model != "tiny" else None
            print(f"{model}: {plan.describe() if plan is not None else 'placement: one device'}")
    encoders, gated = judge_encoders(cfg, rank=rank, gpu_bytes=gpus)
    if main:
        for model, why in gated.items():
            print(f"judge step: {model} skipped: {why}")
    data = load_nearid(nearid_root(cfg.name)) if encoders else None
    done: dict[str, dict[str, int]] = {name: {} for name in LEDGER_TAGS}
    for benc in encoders:
        try:
            out = judge_bench(cfg, data, benc)
        except torch.OutOfMemoryError as err:
            # the step's failure, named with its placement; what was judged stays in the answers folder
            plan = placement_plan(benc.model, hub.hub_dir(), gpus) if benc.model != "tiny" else None
            print(f"judge step: {benc.model} ran out of GPU memory on rank {rank} "
                  f"({plan.describe() if plan is not None else 'one device'}): {' '.join(str(err).split())[:300]}. "
                  f"Its answers so far are kept in {benc.answers_dir}; rerun `make judge` after lowering "
                  f"eval.vlm_batch_size (NEARID_SET=eval.vlm_batch_size=1) or on larger GPUs "
                  f"(nearid plan --gpus COUNTxMODEL shows the placement)", flush=True)
            return 3
        # one judge scale on the GPUs at a time: this one's weights leave before the next one's arrive
        getattr(benc.scorer, "release", lambda: None)()
        if main:
            print(json.dumps({"model": benc.model, **out}, indent=1, default=str))
        for name, tag in LEDGER_TAGS.items():
            n = sum(v["n"] for k, v in benc.coverage.items() if k.split(":")[0] == tag)
            if n:
                done[name][str(benc.model)] = n
    if main:
        # the pairs each judge was asked, per ledger step: the dry run checks them against the ledger
        for name, per_model in done.items():
            if per_model:
                record_items(cfg.name, name, per_model, step(name).item, processes=state.num_processes if state else 1)
    end_launch()
    return 0


if __name__ == "__main__":  # pragma: no cover
    from ..runtime.launch import exit_entry

    exit_entry(main)
