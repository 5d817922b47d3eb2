"""Claims: one row per claim a notebook checks (the claim, the paper's number, ours, whether it holds).

``holds`` is always computed from numbers by the caller (a comparison), never typed in. The rows of
each notebook go to ``tables/claims_<name>.csv``, which the report (:mod:`nearid_lib.report`)
collects into ``figures/README.md``. The paper-specific claim builders live with their paper:
:func:`nearid_lib.nearid.claims.nearid_claims`, :func:`nearid_lib.fpr.claims.retrieval_claims`.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .io_utils import write_csv

__all__ = ["claim", "write_claims"]


def claim(claim: str, paper: str, ours: str, holds: bool, detail: str = "", profile: str = "") -> dict:
    """One row of a claims table: the claim, the paper's number, ours, and whether it holds.

    ``holds`` must be computed from the numbers by the caller (a comparison), never typed in."""
    return {"claim": claim, "paper": paper, "ours": ours, "holds": bool(holds), "detail": detail,
            "profile": profile}


def write_claims(rows: list[dict], figures: Path, name: str) -> Path:
    """Write ``tables/claims_<name>.csv`` under ``figures`` (atomically); the report collects it.
    Notebooks write theirs with :meth:`nearid_lib.run.Run.write_claims` (same file, plus provenance)."""
    return write_csv(pd.DataFrame(rows), Path(figures) / "tables" / f"claims_{name}.csv")
