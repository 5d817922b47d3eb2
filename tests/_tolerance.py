"""The suite's tolerance policy (``../shared/DESIGN.md``, "Tolerances"), in one place.

1. **Exact** where the computation's order is fixed: the same code on the same inputs, batch, device
   and thread count (a resumed job, a cache read back, a re-run with the same seed). Compare with
   ``==`` / ``np.array_equal`` / ``atol=0``.
2. **Across batch compositions, thread counts or devices** a float32 kernel (GEMM, convolution,
   attention, reductions) may pick another blocking and summation order, so the same value is
   computed with other rounding: a relative error of a few float32 ulps per accumulation, growing
   with the reduction length. Compare with :data:`BATCHING` (CPU) or :data:`DEVICE` (CPU vs CUDA, where
   TF32 / cuDNN algorithm choice add more), and test the *decision* that matters exactly, away from
   its boundary: :func:`decisions_agree` for thresholded values, ranks and argmax for scores.

Each test that uses a tolerance says which of these applies.
"""
from __future__ import annotations

import numpy as np

__all__ = ["BATCHING", "DEVICE", "assert_close_across_batching", "decisions_agree"]

# float32 values of order 1 after O(100-1000)-term reductions: ~1e-6 relative per ulp chain, with
# headroom for CPUs whose kernels (AVX-512 vs AVX2, oneDNN vs reference) differ (1.4e-5 was seen on
# a CLIPSeg probability of one CI machine, batched vs one by one).
BATCHING = {"rtol": 1e-4, "atol": 1e-4}
# CPU vs CUDA (TF32 matmuls, other convolution algorithms): 1e-3 relative.
DEVICE = {"rtol": 1e-3, "atol": 1e-3}


def assert_close_across_batching(a, b, what: str = "", tol: dict | None = None) -> None:
    """``a`` and ``b`` are the same float32 computation under another batching (policy item 2)."""
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                               err_msg=what, **(tol or BATCHING))


def decisions_agree(a: np.ndarray, b: np.ndarray, value: np.ndarray, threshold: float,
                    tol: dict | None = None) -> bool:
    """Whether two thresholded decisions ``a`` and ``b`` (bool arrays, ``value > threshold``) agree
    wherever ``value`` is farther from ``threshold`` than the batching tolerance: inside that band
    the other rounding may legitimately flip the decision, outside it it must not."""
    t = tol or BATCHING
    band = np.abs(np.asarray(value, dtype=np.float64) - threshold) <= t["atol"] + t["rtol"] * abs(threshold)
    return bool(np.array_equal(np.asarray(a)[~band], np.asarray(b)[~band]))
