"""nearid_lib.runtime.allocator: glibc malloc thresholds (checked in child processes, whose malloc state
this test process does not share), and the runtime.tune_malloc switch."""
from __future__ import annotations

import subprocess
import sys

import pytest

from nearid_lib.runtime.allocator import _glibc, tune_allocator
from nearid_lib.config import ConfigValueError, get_profile, runtime_env

GLIBC = _glibc() is not None

# a 100 MiB malloc: with glibc's defaults it is mmapped (mallinfo2.hblkhd grows); once the mmap
# threshold is 256 MiB it comes from the heap (hblkhd does not grow)
CHILD = """
import ctypes, sys
from nearid_lib.runtime.allocator import tune_allocator
class MI(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                              "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MI
libc.malloc.restype = ctypes.c_void_p
print(tune_allocator(sys.argv[1] == "1"))
before = libc.mallinfo2().hblkhd
p = libc.malloc(100 << 20)
print(libc.mallinfo2().hblkhd - before)
libc.free(ctypes.c_void_p(p))
"""


def _child(on: bool) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", CHILD, "1" if on else "0"], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    return out[0], int(out[1])


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_large_blocks_come_from_the_heap_once_tuned():
    status, mapped = _child(False)
    assert status.startswith("off") and mapped >= 100 << 20
    status, mapped = _child(True)
    assert status == "glibc mallopt: mmap_threshold=256 MiB, trim_threshold=512 MiB"
    assert mapped == 0


def test_off_changes_nothing_and_bad_thresholds_raise():
    assert tune_allocator(False) == "off (glibc defaults)"
    with pytest.raises(ValueError, match="thresholds"):
        tune_allocator(True, mmap_threshold=-1, trim_threshold=5)


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_idempotent():
    assert tune_allocator() == tune_allocator()


def test_runtime_switch_from_environment_and_overrides():
    native = {"NEARID_PORTABLE": "0"}       # (portable numerics add runtime.threads = 1)
    assert runtime_env({**native, "NEARID_TUNE_MALLOC": "0"}) == {"runtime.tune_malloc": False}
    assert runtime_env({**native, "NEARID_TUNE_MALLOC": "1"}) == {"runtime.tune_malloc": True}
    assert runtime_env(native) == {}
    with pytest.raises(ConfigValueError, match="NEARID_TUNE_MALLOC"):
        runtime_env({"NEARID_TUNE_MALLOC": "yes"})
    assert get_profile("smoke").runtime.tune_malloc is True
    assert get_profile("smoke", {"runtime.tune_malloc": False}).runtime.tune_malloc is False
