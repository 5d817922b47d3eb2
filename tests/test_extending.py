"""docs/extending.md's python examples run as written (one session, in order): an encoder, a loss, a
table and a claim added the way the page says."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from nearid_lib.nearid.losses import REGISTRY as LOSSES

ROOT = Path(__file__).resolve().parents[1]


def blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", (ROOT / "docs" / "extending.md").read_text(), flags=re.S | re.M)


def test_every_section_has_an_example():
    text = (ROOT / "docs" / "extending.md").read_text()
    assert len(blocks()) >= 5
    for what in ("load_encoder(", "register_loss(", "write_table(", "evaluate_claim("):
        assert what in text


def test_extending_examples_run(tmp_path, monkeypatch):
    monkeypatch.setenv("NEARID_OUT", str(tmp_path / "build"))
    monkeypatch.setenv("NEARID_FIGURES", str(tmp_path / "figures"))
    ns: dict = {"__name__": "__extending__"}
    try:
        for i, block in enumerate(blocks()):
            try:
                exec(compile(block, f"docs/extending.md python block {i}", "exec"), ns)
            except Exception as err:  # noqa: BLE001 - say which block failed
                pytest.fail(f"docs/extending.md python block {i} failed: {type(err).__name__}: {err}\n{block}")
        assert (tmp_path / "figures" / "tables" / "my_table.csv").exists() or ns["path"].exists()
    finally:
        LOSSES.pop("cosine_margin", None)
