"""Every location the project reads or writes follows the environment; smoke never writes into figures/,
a paper run writes its own subfolder, and no figures folder holds two profiles' runs."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nearid_lib import paths

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)


def test_paths_follow_env(monkeypatch, tmp_path):
    monkeypatch.setenv("NEARID_DATA", str(tmp_path / "d"))
    monkeypatch.setenv("NEARID_CACHE", str(tmp_path / "c"))
    monkeypatch.setenv("NEARID_OUT", str(tmp_path / "o"))
    monkeypatch.delenv("NEARID_FIGURES", raising=False)
    assert paths.data_dir("mini") == tmp_path / "d" / "mini"
    assert paths.cache_dir("smoke") == tmp_path / "c" / "smoke"
    assert paths.results_dir("mini", "04_x") == tmp_path / "o" / "mini" / "results" / "04_x"
    # smoke never writes into the committed figures folder
    assert paths.figures_dir("smoke") == tmp_path / "o" / "smoke" / "figures"
    assert paths.figures_dir("mini") == paths.repo_root() / "figures"
    monkeypatch.setenv("NEARID_FIGURES", str(tmp_path / "f"))
    assert paths.figures_dir("smoke") == tmp_path / "f"


def test_repo_root_defaults(monkeypatch):
    monkeypatch.delenv("NEARID_ROOT", raising=False)
    assert (paths.repo_root() / "pyproject.toml").exists()


def test_each_profile_has_its_own_figures_folder(monkeypatch, tmp_path):
    """Without NEARID_FIGURES: mini owns the committed figures/, paper a subfolder of it, smoke the
    build folder; NEARID_FIGURES, when set, is every profile's folder."""
    monkeypatch.setenv("NEARID_ROOT", str(tmp_path / "repo"))
    monkeypatch.setenv("NEARID_OUT", str(tmp_path / "o"))
    monkeypatch.delenv("NEARID_FIGURES", raising=False)
    figures = tmp_path / "repo" / "figures"
    assert paths.figures_dir("mini") == figures
    assert paths.figures_dir() == figures
    assert paths.figures_dir("paper") == figures / "paper"
    assert paths.figures_dir("smoke") == tmp_path / "o" / "smoke" / "figures"
    monkeypatch.setenv("NEARID_FIGURES", str(tmp_path / "f"))
    for profile in ("mini", "paper", "smoke", None):
        assert paths.figures_dir(profile) == tmp_path / "f"


def _sidecar(folder, name, profile, kind="meta"):
    tables = folder / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    (tables / f"{name}.{kind}.json").write_text(json.dumps({"table": f"{name}.csv", "profile": profile}))


def test_a_figures_folder_holds_one_profile(tmp_path):
    figs = tmp_path / "figures"
    paths.check_figures_profile(figs, "paper")                      # no folder yet
    figs.mkdir()
    paths.check_figures_profile(figs, "paper")                      # empty folder
    _sidecar(figs, "04_table1_main", "mini")
    paths.check_figures_profile(figs, "mini")                       # the same profile goes on
    with pytest.raises(FileExistsError) as err:
        paths.check_figures_profile(figs, "paper")
    msg = str(err.value)
    assert str(figs) in msg and "profile mini" in msg and "PROFILE=paper" in msg
    assert "NEARID_FIGURES" in msg and "clear" in msg
    # a skipped table's marker records its run's profile too
    other = tmp_path / "other"
    _sidecar(other, "09_x", "smoke", kind="skipped")
    with pytest.raises(FileExistsError, match="profile smoke"):
        paths.check_figures_profile(other, "mini")


def test_only_the_folders_own_sidecars_count(tmp_path):
    """The committed figures/ (mini) holds figures/paper/ (a paper run): neither sees the other's."""
    figs = tmp_path / "figures"
    _sidecar(figs, "04_table1_main", "mini")
    _sidecar(figs / "paper", "04_table1_main", "paper")
    paths.check_figures_profile(figs, "mini")
    paths.check_figures_profile(figs / "paper", "paper")
    assert paths.figures_profiles(figs) == {"mini": ["04_table1_main.meta.json"]}
    with pytest.raises(FileExistsError):
        paths.check_figures_profile(figs / "paper", "mini")


def test_start_run_refuses_a_folder_of_another_profile(monkeypatch, tmp_path):
    """The notebooks' setup checks before it writes anything (no run.json either)."""
    from nearid_lib import run as R

    monkeypatch.setenv("NEARID_OUT", str(tmp_path / "o"))
    monkeypatch.setenv("NEARID_FIGURES", str(tmp_path / "figs"))
    _sidecar(tmp_path / "figs", "04_table1_main", "mini")
    with pytest.raises(FileExistsError, match="PROFILE=smoke"):
        R.start_run("smoke", 0, "04_x")
    assert not (tmp_path / "o").exists()


def test_nearid_report_refuses_a_folder_of_another_profile(monkeypatch, tmp_path, capsys):
    from nearid_lib.cli import main

    monkeypatch.setenv("NEARID_FIGURES", str(tmp_path / "figs"))
    _sidecar(tmp_path / "figs", "04_table1_main", "mini")
    assert main(["report", "--profile", "smoke"]) == 2
    assert "PROFILE=smoke" in capsys.readouterr().err
    assert not (tmp_path / "figs" / "README.md").exists()


# what a make that runs pytest (make test) passes down: its flags and command-line variables
_MAKE_ENV = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "NEARID_OUT", "NEARID_FIGURES", "NB_OUT")


def _make_n(args, **env):
    # -n prints the recipes without running them; -o: the venv's stamp counts as old, nothing reinstalls
    base = {k: v for k, v in os.environ.items() if k not in _MAKE_ENV}
    res = subprocess.run(["make", "-n", "--no-print-directory", f"VENV={VENV}", "-o", str(VENV / ".nearid-installed"),
                          *args], cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _executed(out: str) -> set[str]:
    """The executed notebooks the printed recipes write (run_notebook.sh's third argument)."""
    return {line.split()[4] for line in out.splitlines() if line.startswith("bash scripts/run_notebook.sh")}


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
@pytest.mark.parametrize("profile", ["mini", "paper", "smoke"])
def test_make_puts_executed_notebooks_under_nearid_out(tmp_path, profile):
    # -B: every notebook counts as out of date, whatever a run beside the tests (make test's smoke run)
    # or before them left in build/
    executed = _executed(_make_n(["-B", "notebooks", f"PROFILE={profile}"], NEARID_OUT=str(tmp_path / "x")))
    assert executed and all(e.startswith(f"{tmp_path}/x/{profile}/notebooks/") for e in executed), executed
    # without NEARID_OUT: build/, as nearid_lib.paths.out_dir
    executed = _executed(_make_n(["-B", "notebooks", f"PROFILE={profile}"]))
    assert executed and all(e.startswith(f"build/{profile}/notebooks/") for e in executed), executed


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_checks_the_figures_of_smoke_under_nearid_out(tmp_path):
    """make notebook-figures finds smoke's executed notebooks where NEARID_OUT put them."""
    (tmp_path / "x" / "smoke" / "notebooks").mkdir(parents=True)
    out = _make_n(["notebook-figures", f"DRYRUN_DIR={tmp_path}/none"], NEARID_OUT=str(tmp_path / "x"))
    assert f"NEARID_EXECUTED=\"{tmp_path}/x/smoke/notebooks:{tmp_path}/x/smoke/figures\"" in out
