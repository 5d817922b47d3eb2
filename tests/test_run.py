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
from nearid_lib import runtime
from nearid_lib.report import render_report


def test_thread_count_is_the_profiles_else_every_core():
    cores = len(os.sched_getaffinity(0))
    assert runtime.thread_count(None) == cores
    assert runtime.thread_count(3) == 3


def test_deterministic_switch_sets_and_restores_torch(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    assert not torch.are_deterministic_algorithms_enabled()
    with runtime.deterministic():
        assert torch.are_deterministic_algorithms_enabled()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == runtime.CUBLAS_WORKSPACE
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        assert not torch.backends.cuda.matmul.allow_tf32
        # an op without a deterministic kernel on this device now raises instead of varying silently
        # (index_add_ on CPU is deterministic: it must still run)
        torch.zeros(3).index_add_(0, torch.tensor([0, 0]), torch.ones(2))
    assert not torch.are_deterministic_algorithms_enabled()
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


def test_start_run_turns_deterministic_on_when_asked(monkeypatch, tmp_path):
    monkeypatch.setenv("NEARID_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("NEARID_FIGURES", str(tmp_path / "figs"))
    monkeypatch.setenv("NEARID_DETERMINISTIC", "1")
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        R.start_run("smoke", 0, "04_x", overrides={"eval.vlm_judge": None, "runtime.threads": 1})
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        runtime.deterministic(False)
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    assert not torch.are_deterministic_algorithms_enabled()


def test_start_run_sets_everything_up(monkeypatch, tmp_path):
    monkeypatch.setenv("NEARID_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("NEARID_FIGURES", str(tmp_path / "figs"))
    monkeypatch.setenv("NEARID_THREADS", "2")
    monkeypatch.setenv("NEARID_PORTABLE", "0")      # threads of one's choosing (portable numerics run one)
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
    # the PNG says where it comes from: its name, notebook, profile, seed and commit
    from PIL import Image

    with Image.open(png) as im:
        text = dict(im.text)
    assert text["Title"] == "08_line" and text["Description"] == "notebook 08_x, profile smoke, seed 0"
    sha = run.meta.get("git", {}).get("sha")
    assert text["Source"].startswith(f"nearid_lib at {sha or 'unknown commit'}")


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


def test_setup_notebook_is_start_run_then_data_then_backbone(fresh_clone, smoke_world):
    """setup_notebook makes what a notebook's opening lines made, in the same order (the same seeded
    random state: a tiny backbone's random init is the same), and only what is asked for."""
    from nearid_lib.data import load_profile_data
    from nearid_lib.models import load_backbone
    from nearid_lib.config import seeds_of

    (fresh_clone / "data" / "smoke").mkdir(parents=True)
    os.symlink(smoke_world.root, fresh_clone / "data" / "smoke" / "nearid")
    over = {"runtime.threads": 1}
    before = torch.get_num_threads()
    try:
        nb = R.setup_notebook("smoke", 3, "05_x", backbone=True, overrides=over, N_SHOW=2)
        run = R.start_run("smoke", 3, "05_x", overrides=over, N_SHOW=2)
        data = load_profile_data(run.cfg, build=False)
        backbone = load_backbone(run.cfg)[0]
        assert nb.cfg == run.cfg == nb.run.cfg and nb.run.meta["params"]["N_SHOW"] == 2
        assert nb.data.root == data.root and nb.data.positives.equals(data.positives)
        a, b = nb.backbone.state_dict(), backbone.state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        assert nb.seeds == seeds_of(run.cfg) == [3, 4]
        bare = R.setup_notebook("smoke", 0, "10_x", overrides=over)
        assert bare.data is not None and bare.backbone is None
        assert R.setup_notebook("smoke", 0, "09_x", data=False, overrides=over).data is None
        world = R.setup_notebook("smoke", 0, "09_x", data=lambda c: c.idsim.source == "world", overrides=over)
        assert world.data is not None
        paper_like = {**over, "idsim.source": "released"}
        assert R.setup_notebook("smoke", 0, "09_x", data=lambda c: c.idsim.source == "world",
                                overrides=paper_like).data is None
    finally:
        torch.set_num_threads(before)


def test_setup_notebook_builds_the_dataset_only_when_asked(fresh_clone, monkeypatch):
    """``build_data=True`` (notebook 03) makes a missing dataset first, as ``load_profile_data(cfg)``
    did there; every other notebook reads what notebook 01 made (``build=False``) -- unless the
    procedural world is missing or partial (a fresh clone, a `nearid score` build), which it makes."""
    calls = []
    monkeypatch.setattr(R, "load_profile_data", lambda cfg, build=True: calls.append((cfg.name, build)) or "data")
    over = {"runtime.threads": 1}
    before = torch.get_num_threads()
    try:
        assert R.setup_notebook("smoke", 0, "03_x", build_data=True, overrides=over).data == "data"
        assert R.setup_notebook("smoke", 0, "05_x", overrides=over).data == "data"
        assert R.setup_notebook("smoke", 0, "02_x", data=False, overrides=over).data is None
    finally:
        torch.set_num_threads(before)
    # the fresh clone has no smoke world: notebook 05 builds it too
    assert calls == [("smoke", True), ("smoke", True)]


def test_a_notebook_opened_after_nearid_score_builds_the_world_it_needs(tmp_path, monkeypatch):
    """`nearid score` builds only the test split; a notebook opened afterwards completes the world
    (build_world resumes) instead of failing in its first cell. A released dataset that notebook 01
    has not made is one line saying what to run."""
    from nearid_lib.config import get_profile
    from nearid_lib.data import build_world, is_complete, nearid_root
    from nearid_lib.run import setup_notebook

    for var, sub in (("NEARID_DATA", "data"), ("NEARID_OUT", "out"), ("NEARID_FIGURES", "figs"),
                     ("NEARID_CACHE", "cache")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    cfg = get_profile("smoke")
    build_world(cfg, splits=("test",), graded=False, progress=False)
    assert not is_complete(nearid_root("smoke"))
    nb = setup_notebook("smoke", 0, "05_loss_ablation")
    assert is_complete(nearid_root("smoke")) and set(nb.data.identities.split) == {"train", "val", "test"}
    with pytest.raises(FileNotFoundError, match="run notebook 01 first: make build/paper/notebooks/01_data_curation"):
        monkeypatch.setenv("NEARID_ALLOW_CPU", "1")
        setup_notebook("paper", 0, "05_loss_ablation")
