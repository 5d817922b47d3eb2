"""Every head training of notebooks 03-07 over every GPU, before notebook 03 and outside the kernels
(``make train-heads PROFILE=paper``: ``python -m nearid_lib.steps run train-heads``).

Notebook 03 alone trains the main row's seeds: 3 runs, so 3 of 8 GPUs busy while the others idle.
This step hands the sweep's worker pool (``runtime.workers``: one process per GPU) every run the
notebooks will ask for at once -- the main row, the FG-only ceiling, the loss, alpha, beta and data
ablations at every seed (:func:`~nearid_lib.nearid.gpu_work.run_configs`, the notebooks' own rows) --
runs that read the same batches together (:func:`~nearid_lib.nearid.sweep.train_grouped`), the rest
one per worker (:func:`~nearid_lib.nearid.sweep.train_missing`). Each run is keyed by its
configuration, data and code, so notebooks 03-07 then load every finished run instead of training it,
with the same numbers. A killed step resumes every run from its last checkpoint. One process drives
the workers: under a launch the other ranks return at once.
"""
from __future__ import annotations

import os
from typing import Sequence

from ..data import load_nearid, nearid_root
from ..models import load_backbone
from ..steps.ledger import record_items
from ..steps.runner import step_arguments
from .gpu_work import training_passes
from .sweep import train_and_score, train_grouped, train_missing

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nearid_lib.nearid.train_step --profile paper [--set KEY=VALUE ...]``."""
    _, cfg = step_arguments(argv, __doc__)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0                          # the sweep's workers take the GPUs; one process drives them
    data = load_nearid(nearid_root(cfg.name))
    passes = training_passes(cfg, data)
    configs = [c for p in passes for c in p["configs"]]
    backbone = load_backbone(cfg)[0]
    workers = cfg.runtime.workers
    train_grouped(configs, data, backbone, workers, progress=True)
    if workers > 1 and not cfg.backbone.tiny:
        train_missing(configs, data, workers)
    for c in configs:                     # what no worker took (one process, or a run alone): here
        train_and_score(c, data, backbone, progress=True)
    for name, nbs in (("train", ("03_train_nearid",)), ("sweep", ("04_eval_nearid_bench", "05_loss_ablation",
                                                               "06_alpha_beta_sweep", "07_data_ablation"))):
        record_items(cfg.name, name, sum(p["runs"] for p in passes if p["notebook"] in nbs), "head trainings",
                     workers=workers)
    print(f"train-heads: {len(configs)} runs of notebooks 03-07 finished ({workers} worker(s))")
    return 0


if __name__ == "__main__":  # pragma: no cover
    from ..runtime.launch import exit_entry

    exit_entry(main)
