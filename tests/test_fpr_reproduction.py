"""The stages of notebook 11 (:mod:`nearid_lib.fpr.reproduction`) in a run that has nothing to
score: every stage runs, writes nothing, returns an empty display, and the tables it cannot
produce are skipped once with their reason."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from nearid_lib import get_profile
from nearid_lib.data.fpr_layout import FPRSplit
from nearid_lib.fpr.experiments import GLOBAL_TABLES, EncoderSpec
from nearid_lib.fpr.reproduction import (
    FPRStudy,
    agreement_results,
    background_results,
    chance_results,
    claims_results,
    gallery_ablation_results,
    main_figures,
    main_results,
    oracle_results,
    per_dataset_results,
    retrieval_list_figures,
    run_protocol,
    sampling_results,
    score_dbpp,
    skipped_tables,
)


@dataclass
class _RecordingRun:
    """The part of :class:`nearid_lib.run.Run` the stages use, recording what they write."""

    cfg: object
    results: Path
    seed: int = 0
    written: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)

    @property
    def profile(self) -> str:
        return self.cfg.name

    def write_table(self, df, name, **extra):
        self.written.append(name)

    def write_claims(self, df, name, **extra):
        self.written.append(f"claims_{name}")

    def skip_table(self, name, reason, **extra):
        self.skipped[name] = reason

    def figure(self, fig, name, dpi=120):
        self.written.append(name)
        return fig


def test_a_run_without_encoders_skips_every_table_once_with_its_reason(tmp_path):
    run = _RecordingRun(get_profile("smoke"), tmp_path)
    empty = pd.DataFrame(columns=["name", "species", "file_path", "ref_path"])
    study = FPRStudy(run, cache=None, split=FPRSplit(empty, empty.copy(), tmp_path), generated=empty.assign(method=[]),
                     dataset="NearID-mini", specs=[EncoderSpec("nearid", available=False, note="no head")])
    shown = skipped_tables(study)
    assert set(shown.table) == set(GLOBAL_TABLES) == set(run.skipped)
    assert all("no retrieval encoder could be loaded (nearid: no head)" == r for r in run.skipped.values())
    assert not study.have_refs and not study.have_gen
    scored = run_protocol(study).set_index("part")
    assert scored.per_query_rows.tolist() == [0, 0]
    assert scored.at["oracle", "not_scored"] == run.skipped["11_fpr_oracle"]
    assert "none" in score_dbpp(study) and study.dbpp is None
    for stage in (oracle_results, main_results, per_dataset_results, agreement_results, sampling_results,
                  claims_results):
        assert stage(study) is None, stage.__name__
    for stage in (main_figures, gallery_ablation_results, background_results, retrieval_list_figures):
        assert stage(study) == [], stage.__name__
    assert chance_results(study).empty
    assert run.written == []
