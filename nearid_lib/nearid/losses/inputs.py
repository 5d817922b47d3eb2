"""Validation of the embeddings given to :func:`nearid_lib.nearid.losses.compute_loss` (the public edge
of the losses): one floating dtype, finite values and unit norm in every *valid* slot.

Masked slots are not checked (they may hold anything, NaN included: the losses never read them).
``normalize=True`` L2-normalises the valid slots instead of rejecting un-normalised ones; masked
slots pass through untouched, so their value and gradient stay inert exactly as without it.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .terms import validate_masks

__all__ = ["check_loss_inputs", "NORM_TOLERANCE"]

# |‖x‖ - 1| allowed per dtype: half precision rounds a unit vector's norm by ~1e-3.
NORM_TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-3, torch.float64: 1e-6}


def _normalise_valid(x: Tensor, valid: Tensor) -> Tensor:
    """L2-normalise the rows of ``x`` where ``valid``; masked rows pass through unchanged (a constant
    stands in for them inside the normalisation, so NaN never reaches its gradient)."""
    safe = torch.where(valid.unsqueeze(-1), x, torch.ones_like(x))
    return torch.where(valid.unsqueeze(-1), F.normalize(safe, dim=-1), x)


def check_loss_inputs(anchor: Tensor, positives: Tensor, distractors: Tensor, pos_mask: Tensor | None,
                      dist_mask: Tensor | None, normalize: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """Check (or, with ``normalize``, normalise) the embeddings; returns ``(anchor, positives,
    distractors)``. Raises ``TypeError`` on non-tensors, non-float or mixed dtypes, and ``ValueError``
    naming the input and its first offending index on non-finite values or un-normalised rows."""
    named = {"anchor": anchor, "positives": positives, "distractors": distractors}
    for k, v in named.items():
        if not isinstance(v, Tensor):
            raise TypeError(f"compute_loss: {k} must be a torch.Tensor, got {type(v).__name__}")
        if not v.is_floating_point():
            raise TypeError(f"compute_loss: {k} must be a floating-point tensor, got {v.dtype}")
    dtypes = {k: v.dtype for k, v in named.items()}
    if len(set(dtypes.values())) > 1:
        listed = ", ".join(f"{k} {str(d).replace('torch.', '')}" for k, d in dtypes.items())
        raise TypeError(f"compute_loss: mixed dtypes ({listed}); cast all three to one dtype, "
                        f"e.g. .float()")
    pm, dm, _ = validate_masks(anchor, positives, distractors, pos_mask, dist_mask, None)
    valid = {"anchor": torch.ones(anchor.shape[:1], dtype=torch.bool, device=anchor.device),
             "positives": pm, "distractors": dm}
    if normalize:
        anchor, positives, distractors = (_normalise_valid(x, valid[k]) for k, x in
                                          zip(("anchor", "positives", "distractors"), (anchor, positives, distractors)))
        named = {"anchor": anchor, "positives": positives, "distractors": distractors}
    tol = NORM_TOLERANCE.get(anchor.dtype, 1e-3)
    with torch.no_grad():
        for k, x in named.items():
            rows = x.detach()[valid[k]]                                     # [n_valid, D]
            bad = ~torch.isfinite(rows).all(-1)
            if bad.any():
                idx = _index(valid[k], int(bad.nonzero()[0]))
                raise ValueError(f"compute_loss: {k}{idx} has non-finite values (NaN or inf) in a valid "
                                 f"slot; mask the slot out or fix the embedding")
            if normalize:
                continue
            err = (rows.float().norm(dim=-1) - 1).abs()
            off = err > tol
            if off.any():
                j = int(off.nonzero()[0])
                raise ValueError(f"compute_loss: {k}{_index(valid[k], j)} is not L2-normalised (norm "
                                 f"{float(rows[j].float().norm()):.4g}); the losses expect unit-norm "
                                 f"embeddings: F.normalize(x, dim=-1) first, or pass normalize=True")
    return anchor, positives, distractors


def _index(valid: Tensor, j: int) -> str:
    """The ``[i]`` / ``[i, p]`` index of the ``j``-th valid slot."""
    pos = valid.nonzero()[j].tolist()
    return "[" + ", ".join(map(str, pos)) + "]"
