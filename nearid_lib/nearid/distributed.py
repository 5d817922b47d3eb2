"""Cross-device pools for the NearID losses: all-gather with gradients and the global candidate pool.

The paper gathers positives across devices (DDP) so that the pool G spans the global batch. Gradients must
flow back to the shard that produced each gathered row: the backward of :func:`all_gather_with_grad` sums,
over ranks, the gradient every rank's loss sent to the gathered tensor, and returns this rank's slice.
Combined with the losses' global normalisation (local loss = world_size * local share of the global loss,
see ``nearid_lib.nearid.losses``), DDP's gradient averaging then yields exactly the single-process gradient of the
global batch. Everything is the identity when torch.distributed is not initialised (or world size is 1).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
from torch import Tensor

from .losses import Pool

__all__ = ["is_distributed", "world_size", "rank", "all_gather_with_grad", "all_gather_nograd",
           "all_reduce_sum", "gather_pool"]


def is_distributed() -> bool:
    """True when a process group with more than one rank is active."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def _check_equal_rows(x: Tensor) -> None:
    # all_gather needs equal shapes; say so clearly instead of hanging or failing deep inside the backend.
    n = torch.tensor([x.shape[0]], dtype=torch.int64, device=x.device)
    sizes = [torch.zeros_like(n) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, n)
    got = [int(s.item()) for s in sizes]
    if len(set(got)) != 1:
        raise ValueError(f"all ranks must have the same local batch size to gather the pool, got {got}; "
                         "pad with fully masked rows (masked slots are inert in every loss)")


def all_gather_with_grad(x: Tensor) -> Tensor:
    """Concatenate ``x`` [n,...] from every rank in rank order, differentiably (identity on one process).
    All ranks must call it (and later run backward) with the same n."""
    if not is_distributed():
        return x
    _check_equal_rows(x)
    # torch's differentiable all_gather: its backward sums every rank's gradient of the
    # gathered tensor and returns this rank's slice (reduce-scatter; all-to-all on gloo)
    return torch.cat(dist_nn.all_gather(x.contiguous()), dim=0)


def all_gather_nograd(x: Tensor) -> Tensor:
    """Concatenate ``x`` from every rank without gradient (masks, flags). Bool tensors travel as uint8
    (gloo has no bool all_gather)."""
    if not is_distributed():
        return x
    is_bool = x.dtype == torch.bool
    y = x.to(torch.uint8) if is_bool else x
    out = [torch.empty_like(y) for _ in range(dist.get_world_size())]
    dist.all_gather(out, y.contiguous())
    cat = torch.cat(out, dim=0)
    return cat.bool() if is_bool else cat


def all_reduce_sum(x: Tensor) -> Tensor:
    """Sum over ranks of a count tensor, no gradient (identity on one process)."""
    if not is_distributed():
        return x
    y = x.detach().clone()
    dist.all_reduce(y, op=dist.ReduceOp.SUM)
    return y


def gather_pool(anchor: Tensor, positives: Tensor, pos_mask: Tensor | None = None,
                with_anchors: bool = True) -> Pool:
    """The global candidate pool for ``nearid_lib.nearid.losses`` (``pool=`` argument).

    Gathers positives [B,P,D] (with gradients) and their mask across ranks; with ``with_anchors`` also the
    anchors (needed by the symmetric InfoNCE variants only). ``offset`` = rank * B is this rank's first
    global row. On one process this is the local batch and the losses are unchanged."""
    if pos_mask is None:
        pos_mask = torch.ones(positives.shape[:2], dtype=torch.bool, device=positives.device)
    pos_mask = pos_mask.to(torch.bool)
    if not is_distributed():
        return Pool(positives=positives, pos_mask=pos_mask, offset=0, world_size=1, anchors=anchor)
    return Pool(
        positives=all_gather_with_grad(positives),
        pos_mask=all_gather_nograd(pos_mask),
        offset=rank() * positives.shape[0],
        world_size=world_size(),
        anchors=all_gather_with_grad(anchor) if with_anchors else None,
        reduce_sum=all_reduce_sum,
    )
