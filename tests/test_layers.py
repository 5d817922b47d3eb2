"""The layers of ``nearid_lib`` (``[tool.importlinter]`` of pyproject.toml, checked by ``lint-imports``
in ``make test``):
every module stands in a layer, and no library import hides inside a function to dodge a cycle."""
from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import nearid_lib

PKG = Path(nearid_lib.__file__).parent
ROOT = PKG.parent
# the only module whose library imports sit inside functions, and why (its docstring says so too):
# the `nearid` command answers --help and argument errors without importing torch
LAZY = {"nearid_lib/cli.py"}


def _layers() -> set[str]:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in cfg["contracts"] if c["id"] == "layers")["layers"]
    return {m.strip() for line in layers for m in re.split(r"[|:]", line) if m.strip()}


def test_every_module_of_the_package_stands_in_a_layer():
    children = {p.stem for p in PKG.glob("*.py") if p.stem != "__init__"} | \
               {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}
    layers = _layers()
    assert children - layers == set(), "modules in no layer of [tool.importlinter]"
    assert layers - children == set(), "layers naming modules that do not exist"


def _internal_imports_in_functions(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    found = []

    def walk(node, infunc):
        for ch in ast.iter_child_nodes(node):
            inner = infunc or isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef))
            if infunc and isinstance(ch, ast.ImportFrom) and (ch.level or (ch.module or "").startswith("nearid_lib")):
                found.append((ch.lineno, ast.unparse(ch)))
            elif infunc and isinstance(ch, ast.Import) and any(a.name.startswith("nearid_lib") for a in ch.names):
                found.append((ch.lineno, ast.unparse(ch)))
            walk(ch, inner)

    walk(tree, False)
    return found


def test_no_library_import_inside_a_function_outside_the_command_line():
    offenders = {}
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        if rel in LAZY or rel == "nearid_lib/__init__.py":      # __init__: lazy attributes by name
            continue
        got = _internal_imports_in_functions(p)
        if got:
            offenders[rel] = got
    assert offenders == {}


def test_the_checker_finds_an_import_in_a_function(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\n\ndef f():\n    from .x import y\n    import nearid_lib.data\n    return y\n")
    assert [n for n, _ in _internal_imports_in_functions(f)] == [4, 5]
