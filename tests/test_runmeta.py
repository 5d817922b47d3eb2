"""Run metadata written beside every notebook's outputs."""
from __future__ import annotations

import json

from nearid_lib import config as C
from nearid_lib.runtime import runmeta


def test_run_metadata(tmp_path):
    p = runmeta.write_run_metadata(tmp_path, {"PROFILE": "smoke"}, C.get_profile("smoke"))
    meta = json.loads(p.read_text())
    assert meta["params"]["PROFILE"] == "smoke"
    assert meta["profile"]["name"] == "smoke"
    assert set(meta["git"]) == {"sha", "dirty"}
    import importlib.metadata
    assert meta["packages"]["torch"] == importlib.metadata.version("torch")     # the torch this run imported


def test_dirty_ignores_the_runs_own_figures(tmp_path):
    import subprocess
    from nearid_lib.runtime.runmeta import git_state
    run = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "t.csv").write_text("a\n1\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    run("add", ".")
    run("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    assert git_state(tmp_path)["dirty"] is False
    (tmp_path / "figures" / "t.csv").write_text("a\n2\n")        # a run rewrote a table
    assert git_state(tmp_path)["dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")                 # an uncommitted code edit
    assert git_state(tmp_path)["dirty"] is True
