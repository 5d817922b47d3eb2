"""House rules for notebooks: jupytext percent sources, one scalar `parameters` cell first,
no `def`/`class` (logic lives in nearid_lib), PROFILE and SEED parameters present."""
from __future__ import annotations

import ast
from pathlib import Path

import jupytext
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.py"))


def test_there_are_notebooks():
    names = [p.stem for p in NOTEBOOKS]
    assert names[0] == "00_environment" and names[-1] == "99_report"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_follows_house_rules(path):
    nb = jupytext.read(path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, f"{path.name}: no code cell"
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, f"{path.name}: expected exactly one 'parameters' cell, found {len(params)}"
    assert code[0] is params[0], f"{path.name}: the parameters cell must be the first code cell"
    tree = ast.parse(params[0].source)
    names = set()
    for node in tree.body:
        assert isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant), (
            f"{path.name}: parameters cell must hold scalar assignments only, found: {ast.unparse(node)}")
        names |= {t.id for t in node.targets}
    assert {"PROFILE", "SEED"} <= names, f"{path.name}: parameters must include PROFILE and SEED"
    for cell in code:
        for node in ast.walk(ast.parse(cell.source)):
            assert not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)), (
                f"{path.name}: notebooks are thin - move `{node.name}` into nearid_lib")
