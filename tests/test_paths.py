"""Every location the project reads or writes follows the environment; smoke never writes into figures/."""
from __future__ import annotations

from nearid_lib import paths


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
