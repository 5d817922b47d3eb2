"""One notebook setup (``start_run``): seeded profile, threads from the profile's ``runtime`` section,
run metadata, and the table / figure writers that stamp provenance in a sidecar."""
from __future__ import annotations

import json
import os

import matplotlib
import pandas as pd
import pytest
import torch

from nearid_lib import run as R
from nearid_lib.report import render_report


def test_thread_count_is_the_profiles_else_every_core():
    cores = len(os.sched_getaffinity(0))
    assert R.thread_count(None) == cores
    assert R.thread_count(3) == 3


def test_start_run_sets_everything_up(monkeypatch, tmp_path):
    monkeypatch.setenv("NEARID_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("NEARID_FIGURES", str(tmp_path / "figs"))
    monkeypatch.setenv("NEARID_THREADS", "2")
    before = torch.get_num_threads()
    try:
        over = {"eval.vlm_judge": None, "runtime.threads": 1}      # the override wins over NEARID_THREADS
        run = R.start_run("smoke", 3, "04_x", overrides=over, N_SHOW=2)
        assert torch.get_num_threads() == 1 and run.threads == 1 and run.cfg.runtime.threads == 1
        assert run.cfg.name == "smoke" and run.cfg.seed == 3 and run.cfg.eval.vlm_judge is None
        a = torch.rand(2)
        again = R.start_run("smoke", 3, "04_x")
        assert torch.equal(a, torch.rand(2))                  # seeded the same way twice
        assert again.cfg.runtime.threads == 2 and torch.get_num_threads() == 2    # the environment's
        meta = json.loads((tmp_path / "out" / "smoke" / "results" / "04_x" / "run.json").read_text())
        assert meta["params"]["SEED"] == 3 and meta["profile"]["seed"] == 3
        assert meta["profile"]["runtime"]["threads"] == 2
        assert run.meta["params"]["N_SHOW"] == 2 and run.meta["params"]["overrides"] == over
    finally:
        torch.set_num_threads(before)

    path = run.write_table(pd.DataFrame({"row": ["x"], "v": [1.5]}), "04_table")
    assert path == tmp_path / "figs" / "tables" / "04_table.csv"
    assert list(pd.read_csv(path).columns) == ["row", "v"]           # the table stays clean
    side = R.read_table_meta(path)
    assert side["profile"] == "smoke" and side["seed"] == 3 and side["notebook"] == "04_x"
    assert {"commit", "dirty", "date"} <= set(side)
    run.write_claims([{"claim": "c", "paper": "1", "ours": "2", "holds": True, "detail": "", "profile": "smoke"}],
                     "04_x")
    assert (tmp_path / "figs" / "tables" / "claims_04_x.meta.json").exists()
    # the report reads the profile of a table from its sidecar
    text = render_report(tmp_path / "figs", specs=[])
    assert "| c |" in text


def test_figure_is_saved_and_returned(tmp_path, monkeypatch):
    matplotlib.use("agg")
    import matplotlib.pyplot as plt

    monkeypatch.setenv("NEARID_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("NEARID_FIGURES", str(tmp_path / "figs"))
    run = R.start_run("smoke", 0, "08_x", overrides={"runtime.threads": torch.get_num_threads()})
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    assert run.figure(fig, "08_line") is fig
    png = tmp_path / "figs" / "08_line.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plt.fignum_exists(fig.number)                        # closed: shown once, inline


def test_paper_profile_stops_without_a_gpu_unless_allowed(monkeypatch):
    import torch

    from nearid_lib.config import get_profile
    from nearid_lib.run import require_gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("NEARID_ALLOW_CPU", raising=False)
    with pytest.raises(RuntimeError, match="NEARID_ALLOW_CPU=1") as err:
        require_gpu(get_profile("paper"))
    assert "TORCH=cu" in str(err.value)
    require_gpu(get_profile("mini"))            # other profiles run anywhere
    monkeypatch.setenv("NEARID_ALLOW_CPU", "1")
    require_gpu(get_profile("paper"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("NEARID_ALLOW_CPU")
    require_gpu(get_profile("paper"))
