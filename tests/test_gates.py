"""The declared gates of the paper path (``nearid_lib.gates``): one place, consistent with the
folders the readers look in, and every gate names tables the notebooks write."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from nearid_lib import gates


def test_gate_folders_are_the_readers_folders(tmp_path, monkeypatch):
    from nearid_lib.fpr.downloads import CUB_DIRNAME, GENERATED_DIRNAME, WILDLIFE_DIRNAME
    from nearid_lib.data.eval_datasets import DBPP_DIRNAME
    from nearid_lib.nearid.dbpp_released import RATINGS_SUBDIR

    monkeypatch.setenv("NEARID_DOWNLOADS", str(tmp_path))
    monkeypatch.setenv("NEARID_HUB_DIR", str(tmp_path / "hub"))
    (tmp_path / "hub").mkdir()
    assert all(g.closed() for k, g in gates.GATES.items())          # nothing downloaded: every gate closed
    for key, rel in (("dreambenchpp", DBPP_DIRNAME), ("nearid_release", RATINGS_SUBDIR),
                     ("fpr_cub", Path(CUB_DIRNAME) / "images.txt"), ("fpr_wildlife", Path(WILDLIFE_DIRNAME) / "metadata.csv"),
                     ("fpr_generated", GENERATED_DIRNAME)):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.mkdir() if not p.suffix else p.write_text("x")
        assert not gates.is_closed(key), key
    (tmp_path / "hub" / "chaenayo" / "Subjects2k").mkdir(parents=True)
    (tmp_path / "hub" / "chaenayo" / "Subjects2k" / "README.md").write_text("x")
    assert not gates.is_closed("subjects2k") and not gates.is_closed("idsim_public_benchmarks")
    assert gates.is_closed("idsim_training_set")                     # never published: always closed
    with pytest.raises(KeyError, match="unknown gate"):
        gates.gate("nope")


def test_every_gate_target_is_a_table_a_notebook_names():
    root = Path(__file__).resolve().parents[1]
    files = [*root.glob("notebooks/*.py"), *root.glob("nearid_lib/**/*.py"), *root.glob("paper_values/*.meta.json")]
    text = "\n".join(p.read_text() for p in files if p.name != "gates.py")
    for g in gates.GATES.values():
        for t in g.targets:
            table = t.split(":")[0]
            pattern = re.escape(table).replace(r"\*", r"[A-Za-z0-9_]*")
            assert re.search(pattern, text), f"gate {g.key}: no table matches {t}"
    assert gates.closed_gates("04_table1_main") == []                # Table 1 itself is never gated
    assert [g.key for g in gates.gates_for("04_table1_main", "dbpp_mh")] == ["dreambenchpp"]
