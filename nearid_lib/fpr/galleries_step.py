"""FPR's nine galleries built once, before the steps that read them (``make fpr-galleries``:
``python -m nearid_lib.steps run fpr-galleries``): the generation step and background removal then
read the built folders, so no rank of theirs waits in a collective while rank 0 alone builds them.

One process builds (rank 0 of a launch; the other ranks return at once): drawing the galleries from
the hand downloads (CUB-200-2011, Stanford Cars, WildlifeReID-10k) by ``retrieval.gallery_rule``,
writing each dataset's ``train_data.csv`` / ``gallery_data.csv`` under ``$NEARID_DATA/paper/fpr``.
A dataset whose download is absent is skipped with its reason (:func:`~nearid_lib.fpr.downloads.build_paper_galleries`).
"""
from __future__ import annotations

import json
from typing import Sequence

from ..runtime.launch import end_launch, launched_state
from ..steps.runner import step_arguments
from .downloads import build_paper_galleries

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nearid_lib.fpr.galleries_step --profile paper [--set KEY=VALUE ...]``."""
    _, cfg = step_arguments(argv, __doc__)
    state = launched_state()
    if state is None or state.process_index == 0:
        res = build_paper_galleries(cfg)
        print(json.dumps({"root": str(res.root), "built": sorted(res.folders), "skipped": res.skipped},
                         indent=1, default=str))
    end_launch()
    return 0


if __name__ == "__main__":  # pragma: no cover
    from ..runtime.launch import exit_entry

    exit_entry(main)
