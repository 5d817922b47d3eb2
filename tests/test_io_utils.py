"""Atomic writes and the resumable manifest."""
from __future__ import annotations

import pytest

from nearid_lib import io_utils


def test_atomic_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "x.txt"
    io_utils.atomic_write_text(target, "old")

    def boom(p):
        p.write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        io_utils.atomic_write(target, boom)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def test_manifest_resumes_and_ignores_torn_line(tmp_path):
    m = io_utils.Manifest(tmp_path / "m.jsonl")
    m.add("a", n=1)
    m.add("b")
    with open(tmp_path / "m.jsonl", "a") as fh:
        fh.write('{"id": "c", "tor')  # killed mid-write
    m2 = io_utils.Manifest(tmp_path / "m.jsonl")
    assert "a" in m2 and "b" in m2 and "c" not in m2 and len(m2) == 2
    assert m2.pending(["a", "c", "d"]) == ["c", "d"]
