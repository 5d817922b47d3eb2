"""Array conversion and cosine similarity shared by every metric (float64 numpy, no torch import)."""
from __future__ import annotations

import numpy as np

__all__ = ["cosine_similarity_matrix"]


def to_np(x, name: str, dtype=np.float64) -> np.ndarray:
    """numpy float64 view of arrays / tensors / lists (torch is optional, never imported here)."""
    if hasattr(x, "detach"):  # torch tensor without importing torch
        x = x.detach().cpu().numpy()
    try:
        return np.asarray(x, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: cannot convert to a {np.dtype(dtype).name} array ({e})") from None


def l2_normalise(x: np.ndarray, name: str) -> np.ndarray:
    if not np.all(np.isfinite(x)):
        bad = np.argwhere(~np.isfinite(x).all(axis=-1)).ravel()[:5]
        raise ValueError(f"{name}: non-finite values in rows {bad.tolist()}")
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    if np.any(n == 0):
        bad = np.argwhere(n.ravel() == 0).ravel()[:5]
        raise ValueError(f"{name}: zero-norm embedding in rows {bad.tolist()} (cosine undefined)")
    return x / n


def cosine_similarity_matrix(a, b) -> np.ndarray:
    """Cosine similarity [A,B] between rows of ``a`` [A,D] and ``b`` [B,D] (float64)."""
    a = l2_normalise(to_np(a, "a"), "a")
    b = l2_normalise(to_np(b, "b"), "b")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"cosine_similarity_matrix: need [A,D] and [B,D], got {a.shape} and {b.shape}")
    return a @ b.T
