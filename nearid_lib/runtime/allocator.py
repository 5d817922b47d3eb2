"""glibc ``malloc`` thresholds for CPU inference and training.

With glibc's defaults, every allocation above the (dynamic, at most 32 MiB) mmap threshold is a
fresh ``mmap`` and every free a ``munmap``: a convolutional network at batch 32 and 224 px allocates
activations of ~50 MiB per layer, so each forward maps, zero-fills (page faults) and unmaps them
again. Measured on this repository's 2-core machine (``benchmarks/bench_allocator.py``), an
EfficientNet-Lite0 forward runs ~2x faster once large blocks are served from the heap instead; the
arithmetic is the same, so results do not change (the smoke tables are identical with and without).

:func:`tune_allocator` sets, for the calling process, ``M_MMAP_THRESHOLD`` (blocks below it come
from the heap) and ``M_TRIM_THRESHOLD`` (free heap kept before it is returned to the system), the
usual remedy short of preloading jemalloc or tcmalloc. The price is memory: up to
``trim_threshold`` of freed heap stays with the process. Profiles switch it with
``runtime.tune_malloc`` (environment: ``NEARID_TUNE_MALLOC=0`` leaves glibc's defaults); other C
libraries (macOS, musl) are left as they are.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["tune_allocator", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

MMAP_THRESHOLD = 256 << 20      # bytes: blocks up to 256 MiB come from the heap
TRIM_THRESHOLD = 512 << 20      # bytes: up to 512 MiB of freed heap is kept for reuse
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3      # mallopt parameters (<malloc.h>)
_STATE: dict[str, str] = {}


def _glibc():
    """The C library when it is glibc (it has ``mallopt`` and ``gnu_get_libc_version``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
        return libc
    except (OSError, AttributeError):
        return None


def tune_allocator(enabled: bool = True, mmap_threshold: int = MMAP_THRESHOLD,
                   trim_threshold: int = TRIM_THRESHOLD) -> str:
    """Set glibc's mmap and trim thresholds of this process (see the module docstring); returns what
    was done, as recorded in a run's ``run.json``. ``enabled=False`` changes nothing. Idempotent;
    a non-glibc C library is left as it is."""
    if not enabled:
        return "off (glibc defaults)"
    key = f"{mmap_threshold}/{trim_threshold}"
    if key in _STATE:
        return _STATE[key]
    if mmap_threshold < 0 or trim_threshold < 0:
        raise ValueError(f"tune_allocator: thresholds must be >= 0, got {mmap_threshold}, {trim_threshold}")
    libc = _glibc()
    if libc is None:
        status = "unchanged (not glibc)"
    elif libc.mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold)) == 1 and \
            libc.mallopt(_M_TRIM_THRESHOLD, int(trim_threshold)) == 1:
        status = f"glibc mallopt: mmap_threshold={mmap_threshold >> 20} MiB, trim_threshold={trim_threshold >> 20} MiB"
    else:
        status = "unchanged (mallopt refused the thresholds)"
    _STATE[key] = status
    return status
