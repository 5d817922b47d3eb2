"""The DB++ column of FPR Tables 1 and 5-13 (released data): DreamBench++'s GPT concept-preservation
score (:mod:`.gpt_score`) per gallery, as the authors' ``get_baseline_results.py`` (Table 1: the
references judged against one gallery image per subject) and ``get_results.py`` (Tables 5-13: each
method's generated images, per dataset) aggregate it; or, behind the declared gate ``fpr_gpt``
(:mod:`nearid_lib.gates`), the reason it is absent (no key or server, no prompts, the server not
reachable from this node). Pairs whose request failed are left out of this run's scores and counted
(``n_failed``, the sidecar's ``failed_pairs``); the next run asks them again."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..data.eval_datasets import DBPP_DIRNAME
from ..paths import cache_dir, downloads_dir
from .gpt_score import COST, GptJudge, gpt_config_reason, pairs_for, plan_pairs, read_prompts, subject_scores

if TYPE_CHECKING:
    from ..config import Profile
    from ..data.fpr_layout import FPRSplit

__all__ = ["DbppColumn", "dbpp_root", "dbpp_columns", "with_oracle_dbpp", "with_generated_dbpp"]


@dataclass
class DbppColumn:
    """``oracle``: per species group (``group``, ``dbpp``, ``n_subjects``, ``n_unanswered``, ``n_failed``,
    ``n_pairs``); ``generated``: per (``dataset``, ``species``, ``method``) the same; ``reason``: why
    there is no column (the gate); ``requests``: the requests this run sent (cached answers cost none)."""

    oracle: pd.DataFrame | None = None
    generated: pd.DataFrame | None = None
    reason: str | None = None
    requests: int = 0
    info: dict = field(default_factory=dict)

    def sidecar(self) -> dict:
        """What a table's provenance records about its ``dbpp`` column."""
        if self.reason:
            return {"not_produced": {"dbpp": self.reason}}
        return {"dbpp": {**self.info, "requests_this_run": self.requests,
                         "usd_per_1000_requests_estimate": round(COST["usd_per_1000_requests"], 2)}}


def dbpp_root(cfg: Profile) -> Path:
    """The DreamBench++ download (``eval.dbpp_root`` or ``$NEARID_DOWNLOADS/dreambenchpp``)."""
    return Path(cfg.eval.dbpp_root).expanduser() if cfg.eval.dbpp_root else downloads_dir() / DBPP_DIRNAME


def _row(key: dict, rows: pd.DataFrame) -> dict:
    s, n, miss = subject_scores(rows)
    failed = int(rows["failed"].notna().sum()) if "failed" in rows else 0
    return {**key, "dbpp": s, "n_subjects": n, "n_unanswered": miss, "n_failed": failed, "n_pairs": int(len(rows))}


def dbpp_columns(cfg: Profile, split: FPRSplit, generated: pd.DataFrame | None, judge: GptJudge | None = None
                 ) -> DbppColumn:
    """The DB++ scores of a released split's galleries: Table 1 per species group (each reference
    against one gallery image of its subject) and, for ``generated``, per dataset, species and
    method (:func:`~.gpt_score.pairs_for`). ``judge``: a ready :class:`GptJudge` (tests);
    otherwise one is built when the gate is open, else only the reason comes back."""
    rc = cfg.retrieval
    if judge is None:
        why = gpt_config_reason(rc.gpt_base_url, dbpp_root(cfg))
        if why:
            return DbppColumn(reason=why)
        user, gpt = read_prompts(dbpp_root(cfg))
        judge = GptJudge(user, gpt, cache_dir(cfg.name) / "dbpp_gpt", rc.gpt_model, rc.gpt_base_url)
    out = DbppColumn(info={"model": judge.model, "answers": str(judge.path),
                           "base_url": str(getattr(judge.client, "base_url", rc.gpt_base_url))})
    orc = []
    for grp, q in split.train.groupby("species", sort=True):
        orc.append(_row({"group": grp}, judge.score(plan_pairs(q, split.gallery[split.gallery.species == grp]))))
    out.oracle = pd.DataFrame(orc)
    if generated is not None and len(generated):
        rows = []
        for (sp, method), g in generated.groupby(["species", "method"], sort=True):
            ds = g["dataset"].iloc[0] if "dataset" in g.columns else ""
            rows.append(_row({"dataset": ds, "species": sp, "method": method},
                             judge.score(pairs_for(method, g, split.train[split.train.species == sp]))))
        out.generated = pd.DataFrame(rows)
    out.requests = judge.requests
    # counted over this run's rows: the answers file may hold failed pairs of other datasets
    failed = int(sum(int(f.n_failed.sum()) for f in (out.oracle, out.generated) if f is not None and len(f)))
    out.info["failed_pairs"] = failed
    if failed:
        out.info["failed_note"] = (f"{failed} pair(s) whose request failed are left out of these scores; a rerun "
                                   f"asks them again (answers file {judge.path})")
    return out


def with_oracle_dbpp(oracle: pd.DataFrame, col: DbppColumn) -> pd.DataFrame:
    """Table 1's long table with ``dbpp`` per species group (the ``all`` rows: the mean over the
    groups); NaN everywhere when the column is gated (its reason is in :meth:`DbppColumn.sidecar`)."""
    by = {} if col.oracle is None else dict(zip(col.oracle.group, col.oracle.dbpp))
    all_ = float(np.nanmean(list(by.values()))) if by and np.isfinite(list(by.values())).any() else np.nan
    return oracle.assign(dbpp=[all_ if g == "all" else by.get(g, np.nan) for g in oracle.group])


def with_generated_dbpp(table: pd.DataFrame, col: DbppColumn) -> pd.DataFrame:
    """Tables 5-13 (:func:`~.tables.generated_table`) with ``dbpp`` per (dataset, method): the mean
    over the dataset's species (one per paper dataset); NaN when gated."""
    if col.generated is None or not len(col.generated):
        return table.assign(dbpp=np.nan)
    per = col.generated.groupby(["dataset", "method"]).dbpp.mean()
    return table.assign(dbpp=[per.get((d, m), np.nan) for d, m in zip(table.dataset, table.method)])
