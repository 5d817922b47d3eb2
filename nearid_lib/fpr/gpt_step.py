"""FPR's DB++ column asked before notebook 11 (``make fpr-gpt``: ``python -m nearid_lib.steps run
fpr-gpt``): DreamBench++'s GPT concept-preservation score of every reference and generated image of
the nine galleries (:func:`~nearid_lib.fpr.dbpp_column.dbpp_columns`), each answer appended to the
answers file as it comes, so the notebook's same call finds them all and sends no request.

Network only (no GPU): one process asks (rank 0 of a launch; the other ranks return at once). It runs
after ``fpr-generate``, so the generated images it rates exist; with the gate closed (no key, no
reachable server, no DreamBench++ download) it prints the reason and the column stays empty, as
notebook 11 reports it. A rerun asks only the pairs with no answer or a failed request.
"""
from __future__ import annotations

import json
from typing import Sequence

from ..runtime.launch import end_launch, launched_state
from ..steps.ledger import record_items
from ..steps.runner import step_arguments
from .dbpp_column import dbpp_columns
from .experiments import prepare_data

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nearid_lib.fpr.gpt_step --profile paper [--set KEY=VALUE ...]``."""
    _, cfg = step_arguments(argv, __doc__)
    state = launched_state()
    if state is None or state.process_index == 0:
        split, generated, _ = prepare_data(cfg)
        col = dbpp_columns(cfg, split, generated if len(generated) else None)
        if col.reason is None:
            pairs = sum(int(f.n_pairs.sum()) for f in (col.oracle, col.generated) if f is not None and len(f))
            record_items(cfg.name, "fpr-gpt", pairs, "requests", sent_this_run=col.requests,
                         failed=col.info.get("failed_pairs", 0))
        print(json.dumps({"reason": col.reason, "requests_this_run": col.requests, **col.info}, indent=1,
                         default=str))
    end_launch()
    return 0


if __name__ == "__main__":  # pragma: no cover
    from ..runtime.launch import exit_entry

    exit_entry(main)
