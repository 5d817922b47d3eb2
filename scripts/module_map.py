"""Print the library's module inventory from the modules' own docstrings (the one place it is kept),
grouped by layer ([tool.importlinter] of pyproject.toml): ``python scripts/module_map.py [--markdown]``."""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "nearid_lib"


def first_sentence(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    text = " ".join(doc.split("\n\n")[0].split())
    m = re.match(r"(.+?\.)(\s|$)", text)
    text = m.group(1) if m else text
    return text if len(text) <= 110 else text[:107].rstrip() + "..."


def layers() -> list[list[str]]:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    rows = next(c for c in cfg["contracts"] if c["id"] == "layers")["layers"]
    return [[m.strip() for m in re.split(r"[|:]", line) if m.strip()] for line in rows]


def main(markdown: bool = False) -> None:
    names = ["entry points", "entry points", "entry points", "entry points", "paper packages", "shared core"]
    for i, layer in enumerate(layers()):
        print(f"\n# layer {i + 1} ({names[min(i, len(names) - 1)]}): {', '.join(layer)}")
        for name in sorted(layer):
            target = PKG / name
            files = sorted(target.rglob("*.py")) if target.is_dir() else [PKG / f"{name}.py"]
            for f in files:
                rel = f.relative_to(PKG).as_posix()
                print(f"  {rel:<34} {first_sentence(f)}" if not markdown else f"- `{rel}`: {first_sentence(f)}")


if __name__ == "__main__":
    main("--markdown" in sys.argv)
