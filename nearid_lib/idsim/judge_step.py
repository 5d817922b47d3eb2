"""ID-Sim Table 2a's open MLLM judge on every GPU, before notebook 09 and outside its kernel.

``python -m nearid_lib.steps run idsim-judge --profile paper`` (``make idsim-judge``, under
``torchrun`` one process per GPU) judges the pairs notebook 09's MLLM row asks about -- the first
``idsim.mllm_max_pairs`` of Subjects2k and of DreamBench++'s rated pairs -- with the judge notebook 09
builds (:func:`~nearid_lib.idsim.released.mllm_row_judge`: same prompt, answer budget and answers
folder). Its replicas are laid over the GPUs by the one placement rule (one GPU when the model fits
one, else ``device_map`` over a group, the group's first rank judging); answers are appended per
rank, a killed step resumes, and notebook 09 then reads every answer without loading the model. An
out-of-memory is this step's failure, named with its placement and its answers kept.
"""
from __future__ import annotations

import json
from typing import Sequence

import torch

from .. import hub
from ..judge.shards import judge_answers_dir
from ..runtime import set_torch_threads
from ..runtime.launch import end_launch, launched_state
from ..steps.ledger import record_items
from ..steps.placement import device_kwargs, placement_plan
from ..steps.runner import step_arguments
from .public_eval import judge_metrics
from .released import load_benchmarks, mllm_row_judge

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nearid_lib.idsim.judge_step --profile paper [--set KEY=VALUE ...]``."""
    _, cfg = step_arguments(argv, __doc__)
    set_torch_threads(cfg.runtime.threads, cfg.runtime.tune_malloc)
    state = launched_state()
    rank = state.process_index if state is not None else 0
    main_rank = state is None or state.is_main_process
    model = cfg.idsim.mllm_judge
    if not model:
        if main_rank:
            print("idsim judge step: idsim.mllm_judge is None: no open MLLM judge row")
        end_launch()
        return 0
    plan = placement_plan(model, hub.hub_dir()) if model != "tiny" else None
    on_gpu = plan is not None and bool(plan.replicas)
    workers = tuple(r[0] for r in plan.replicas) if on_gpu else None
    if main_rank:
        print(f"{model}: {plan.describe() if plan is not None else 'placement: one device'}")
    s2k, db, pairs, missing = load_benchmarks(cfg)
    for what, why in missing.items():
        if main_rank:
            print(f"idsim judge step: {what} skipped: {why}")
    judge = mllm_row_judge(cfg, device_kwargs(plan, rank) if on_gpu else None)
    answers = judge_answers_dir(cfg.name, judge)
    try:
        res, per = judge_metrics(judge, s2k, pairs, cfg.idsim.mllm_max_pairs,
                                 batch_size=max(1, min(cfg.idsim.eval_batch_size, 4)), answers_dir=answers,
                                 workers=workers)
    except torch.OutOfMemoryError as err:
        print(f"idsim judge step: {model} ran out of GPU memory on rank {rank} "
              f"({plan.describe() if plan is not None else 'one device'}): {' '.join(str(err).split())[:300]}. "
              f"Its answers so far are kept in {answers}; rerun after lowering idsim.eval_batch_size or on "
              f"larger GPUs (nearid plan --gpus COUNTxMODEL shows the placement)", flush=True)
        return 3
    if main_rank:
        record_items(cfg.name, "idsim-mllm", {model: int(len(per))}, "pairs",
                     processes=state.num_processes if state is not None else 1)
        print(json.dumps({"model": model, "answers_dir": str(answers) if answers else None, **res}, indent=1,
                         default=str))
    end_launch()
    return 0


if __name__ == "__main__":  # pragma: no cover
    from ..runtime.launch import exit_entry

    exit_entry(main)
