"""Rewrite every number the docs quote from the committed tables with the table's value, after a
regeneration of ``figures/`` (the quote format: ``tests/test_docs_numbers.py``).

    python scripts/refresh_doc_numbers.py          # rewrite, list each change
    python scripts/refresh_doc_numbers.py --check  # list the changes only; exit 1 if any

Each change is printed as ``doc:line  old -> new  [table: cell]``: a number that moved may change what
its sentence says (above / below, holds / does not hold), so read those sentences again.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_docs_numbers import DOCS, QUOTE, cell, printed  # noqa: E402


def refresh(check: bool = False) -> int:
    """Rewrite (or, with ``check``, only list) every quoted number that differs from its cell; the count."""
    changed = 0
    for doc in DOCS:
        lines = doc.read_text().splitlines(keepends=True)
        for i, line in enumerate(lines):
            def swap(m, where=f"{doc.relative_to(ROOT)}:{i + 1}"):
                nonlocal changed
                text, target, title = m.group(1), m.group(2), m.group(3)
                new = printed(cell(ROOT / target.removeprefix("../"), title), text)
                if new == text:
                    return m.group(0)
                changed += 1
                print(f"{where}  {text} -> {new}  [{Path(target).name}: {title}]")
                return m.group(0).replace(f"[{text}]", f"[{new}]", 1)
            lines[i] = QUOTE.sub(swap, line)
        if not check:
            doc.write_text("".join(lines))
    return changed


if __name__ == "__main__":
    n = refresh(check="--check" in sys.argv[1:])
    print(f"{n} quoted number(s) {'differ' if '--check' in sys.argv[1:] else 'rewritten'}")
    sys.exit(1 if n and "--check" in sys.argv[1:] else 0)
