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


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_files_get_the_mode_of_a_plain_open(tmp_path, umask, mode):
    """mkstemp creates 0600; results must be readable by the group unless the umask says otherwise."""
    import os
    import stat

    old = os.umask(umask)
    try:
        assert io_utils.current_umask() == umask
        paths = [io_utils.atomic_write_text(tmp_path / "t.txt", "x"),
                 io_utils.atomic_write_bytes(tmp_path / "b.bin", b"x"),
                 io_utils.write_json({"a": 1}, tmp_path / "sub" / "j.json")]
        with open(tmp_path / "plain.txt", "w") as f:
            f.write("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode) == mode
    for p in paths:
        assert stat.S_IMODE(p.stat().st_mode) == mode, p


def test_current_umask_without_proc_sets_and_restores_it(monkeypatch):
    """Where /proc/self/status is unreadable the umask is read by setting it, then restored."""
    import builtins
    import os

    real_open = builtins.open

    def no_proc(file, *a, **k):
        if str(file).startswith("/proc/"):
            raise OSError("no /proc here")
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", no_proc)
    old = os.umask(0o027)
    try:
        assert io_utils.current_umask() == 0o027
        assert os.umask(0o027) == 0o027          # unchanged by the call
    finally:
        os.umask(old)
