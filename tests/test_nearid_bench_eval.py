"""Notebook 04's stages (nearid.bench_eval): each writes its table where the profile has what it needs
and records it skipped with the reason where not, so that the notebook's cells are the same in every
profile."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from nearid_lib import run as R
from nearid_lib.io_utils import skip_reason
from nearid_lib.nearid.bench_eval import (BenchEncoderSet, BenchScores, ReleasedDBpp, eval_timing,
                                          release_precision, released_dbpp_tables, write_pair_scores)
from nearid_lib.nearid.dbpp_released import RATINGS_WHY, RELEASED_TABLES
from nearid_lib.nearid.evaluate import EncoderResult
from nearid_lib.nearid.release import RELEASE_FLOAT
from nearid_lib.nearid.scorers import BenchEncoders


@pytest.fixture
def nb(tmp_path, monkeypatch):
    monkeypatch.setenv("NEARID_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("NEARID_FIGURES", str(tmp_path / "figs"))
    before = torch.get_num_threads()
    run = R.start_run("smoke", 0, "04_x", overrides={"eval.vlm_judge": None, "runtime.threads": 1})
    yield SimpleNamespace(run=run, cfg=run.cfg, seeds=[0], data=None)
    torch.set_num_threads(before)


def _scores(results):
    return BenchScores(SimpleNamespace(results=results, variants=("full",), cache_seconds=0.0), None)


def test_released_tables_are_skipped_with_how_to_get_them(nb):
    shown = released_dbpp_tables(nb, ReleasedDBpp(None))
    assert shown.empty and list(shown.columns)[:2] == ["row", "dbpp_mh"]
    for name in RELEASED_TABLES:
        assert skip_reason(nb.run.tables / f"{name}.csv") == RATINGS_WHY.strip()


def test_released_tables_are_written_and_vsm_gets_its_dbpp_cell(nb):
    t1 = pd.DataFrame({"row": ["VSM*", "CLIP"], "dbpp_mh": [0.25, 0.5], "dbpp_mh_std": [0.0, 0.0],
                       "dbpp_mh_all4": [0.2, 0.4], "n_object": [7, 7]})
    tables = {name: t1 for name in RELEASED_TABLES}
    released = ReleasedDBpp(tables)
    assert released.vsm_values()["VSM*"]["dbpp_mh"] == 0.25
    assert ReleasedDBpp(None).vsm_values() == {}
    assert ReleasedDBpp({**tables, "04_dbpp_released_table1": t1.iloc[1:]}).vsm_values() == {}
    shown = released_dbpp_tables(nb, released)
    assert shown["row"].tolist() == ["VSM*", "CLIP"]
    assert all((nb.run.tables / f"{name}.csv").exists() for name in RELEASED_TABLES)


def test_release_precision_is_skipped_with_the_gate_of_the_released_weights(nb):
    encoders = BenchEncoderSet(None, BenchEncoders([], gated={RELEASE_FLOAT: "weights absent"}))
    assert release_precision(nb, encoders, _scores([])).empty
    assert skip_reason(nb.run.tables / "04_release_precision.csv") == "weights absent"


def test_pair_scores_are_written_only_where_an_encoder_has_them(nb):
    plain = EncoderResult("clip-vit-b32", "CLIP")
    assert [p.name for p in write_pair_scores(nb, _scores([plain]))] == ["summary.json"]
    scored = EncoderResult("nearid", "head", mtg_scores={"full": {"s_1_2": np.ones(2), "s_1_1p": np.zeros(2),
                                                                  "s_2_2p": np.zeros(2)}, "fg": {}}, seed=0)
    paths = write_pair_scores(nb, _scores([plain, scored]))
    assert [p.name for p in paths] == ["mtg_pair_scores.csv", "summary.json"]
    pairs = pd.read_csv(paths[0])
    assert pairs["encoder"].tolist() == ["nearid", "nearid"] and set(pairs["variant"]) == {"full"}


def test_eval_timing_without_a_trained_head_writes_an_empty_table(nb):
    tt = eval_timing(nb, BenchEncoderSet(None, BenchEncoders([])), _scores([]))
    assert tt.empty and (nb.run.tables / "04_eval_timing.csv").exists()
