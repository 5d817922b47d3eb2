"""Multi-GPU phases that cannot time out (issue 52, item 11), on two gloo processes on the CPU
(``torchrun --standalone``, as the other distributed tests): what rank 0 does after the last
collective (writing tables, MTG, a manifest) runs outside the process group, however long it takes;
the groups the project creates wait ``collective_timeout()`` (``NEARID_COLLECTIVE_TIMEOUT_S``) inside
a collective, shown by a slow rank 0 *inside* one: past the timeout the launch fails, within it it
succeeds. The default is sized to the longest phase other ranks wait through inside a collective."""
from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from nearid_lib.runtime.launch import RANK0_PHASES_S, TIMEOUT_ENV, collective_timeout

TORCHRUN = Path(sys.executable).with_name("torchrun")
SCRIPT = """
import sys, time
from nearid_lib.runtime.launch import end_launch, exit_entry, launched_state

def main():
    where, seconds, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    state = launched_state()
    state.wait_for_everyone()
    if state.is_main_process:
        time.sleep(seconds)            # a slow rank-0-only phase
    if where == "inside":
        state.wait_for_everyone()      # ... that the other rank waits through in a collective
    if state.is_main_process:
        open(out, "w").write("written")
    end_launch()
    return 0

exit_entry(main)
"""


def _launch(tmp_path, where: str, seconds: float, timeout_s: float) -> subprocess.CompletedProcess:
    script = tmp_path / "slow_rank0.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", **{TIMEOUT_ENV: str(timeout_s)})
    return subprocess.run([str(TORCHRUN), "--standalone", "--nproc_per_node", "2", str(script), where, str(seconds),
                           str(tmp_path / f"{where}-{timeout_s}.txt")], env=env, capture_output=True, text=True,
                          timeout=300)


def test_rank0_phase_after_the_last_collective_outlasts_any_timeout(tmp_path):
    res = _launch(tmp_path, "after", seconds=8, timeout_s=2)
    assert res.returncode == 0, res.stderr[-4000:]
    assert (tmp_path / "after-2.txt").read_text() == "written"


def test_the_timeout_bounds_a_slow_rank0_inside_a_collective(tmp_path):
    slow = _launch(tmp_path, "inside", seconds=8, timeout_s=2)      # rank 1 gives up after 2 s
    assert slow.returncode != 0 and not (tmp_path / "inside-2.txt").exists()
    ok = _launch(tmp_path, "inside", seconds=3, timeout_s=120)       # within the timeout: it waits
    assert ok.returncode == 0, ok.stderr[-4000:]
    assert (tmp_path / "inside-120.txt").read_text() == "written"


def test_default_timeout_is_sized_to_the_longest_phase(monkeypatch):
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    longest = max(RANK0_PHASES_S.values())
    assert collective_timeout() == timedelta(seconds=max(3600.0, 2 * longest))
    assert collective_timeout() > timedelta(minutes=10)               # NCCL's default would not do
    monkeypatch.setenv(TIMEOUT_ENV, "90")
    assert collective_timeout() == timedelta(seconds=90)
    for bad in ("soon", "0", "-5"):
        monkeypatch.setenv(TIMEOUT_ENV, bad)
        with pytest.raises(ValueError, match=TIMEOUT_ENV):
            collective_timeout()
