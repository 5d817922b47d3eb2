"""The python examples of README.md and docs/library.md (the score example opens the session), run as
written (one session, in order) in a fresh clone: the data, caches and outputs go to temporary folders,
the profile is the examples' own (``smoke``)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import matplotlib
import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_python_blocks() -> list[str]:
    """Every fenced ```python block of README.md, then of docs/library.md (it continues the session)."""
    return [b for f in ("README.md", "docs/library.md")
            for b in re.findall(r"^```python\n(.*?)^```", (ROOT / f).read_text(), flags=re.S | re.M)]


def test_readme_has_the_score_example_first():
    blocks = readme_python_blocks()
    assert blocks and "score_encoder(" in blocks[0]
    lines = [ln for ln in blocks[0].splitlines() if ln.strip()]
    assert len(lines) <= 12, f"the score_encoder example should stay about 10 lines, has {len(lines)}"


def test_readme_python_examples_run(smoke_world, fresh_clone, tmp_path, monkeypatch):
    matplotlib.use("Agg")
    # a fresh clone's layout in temporary folders; the session's smoke world stands in for the one
    # score_encoder would build (same profile, same seed: build_world returns it untouched)
    data = tmp_path / "data"
    (data / "smoke").mkdir(parents=True)
    os.symlink(smoke_world.root, data / "smoke" / "nearid")
    ns: dict = {"__name__": "__readme__"}
    for i, block in enumerate(readme_python_blocks()):
        try:
            exec(compile(block, f"README.md python block {i}", "exec"), ns)
        except Exception as err:  # noqa: BLE001 - say which block failed
            pytest.fail(f"README python block {i} failed: {type(err).__name__}: {err}\n{block}")
    report = ns["report"]
    assert report.files["card"] == tmp_path / "build" / "smoke" / "score" / "my_encoder" / "report.md"
    assert report.files["card"].exists()
    assert ns["emb"].shape[0] == 3 and ns["res"].summary["map"].between(0, 1).all()
