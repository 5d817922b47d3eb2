"""Repository files: environment.yml mirrors pyproject, CI runs exactly the README's `make test`."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml


ROOT = Path(__file__).resolve().parents[1]


def _norm(req: str) -> str:
    return re.sub(r"\s+", "", req).lower().replace("_", "-")


def test_environment_yml_mirrors_pyproject():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = set(map(_norm, pyproject["dependencies"]))
    for extra in pyproject["optional-dependencies"].values():
        wanted |= set(map(_norm, extra))
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    have = {_norm(x) for x in pip if not x.startswith("-")}      # pip options: -e ., -c constraints
    assert wanted - have == set(), f"missing from environment.yml: {sorted(wanted - have)}"
    assert have - wanted == set(), f"not in pyproject.toml: {sorted(have - wanted)}"


def test_ci_runs_exactly_make_test():
    lines = [l.strip() for l in (ROOT / ".ci" / "run").read_text().splitlines()
             if l.strip() and not l.strip().startswith("#")]
    assert lines[-1] == "make test"
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make reproduce" in readme
