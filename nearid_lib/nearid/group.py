"""Which NearID heads can share one pass over the training data (issue "paper scale"; the pattern of
dinov2's linear evaluation, which trains its whole grid of heads from one pass over the features).

A head's *batch stream* -- the rows of every epoch, their order, the role-aware masking, the
augmentations and token crops of every step, hence the backbone tokens every step reads -- depends
on the seed, the data settings and the batch geometry, never on the loss, its weights, the
optimiser or the head: :func:`stream_key` hashes exactly the fields that decide it
(:data:`HEAD_ONLY` are left out; the InfoNCE objectives reorder the positives of every row, so the
loss enters only as "InfoNCE or not"). Heads with the same stream key are trained together by the
one training loop, :func:`~nearid_lib.nearid.train.train_group`: each step reads and prepares its
tokens **once**, then every head takes its own step on them, and each head ends exactly where it
would alone (``tests/test_nearid_group.py``). :func:`groups_of` partitions configurations into such
groups; :func:`~.sweep.run_rows` uses it in every profile.

On a GPU node the token reads dominate a head step (~180 ms to read a step's int8 grids at 3 GB/s
against ~7 ms of head compute on an H100): a group of 12 heads reads the store once instead of 12
times.
"""
from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Sequence

from ..config import profile_to_dict
from .losses import loss_spec

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["HEAD_ONLY", "stream_key", "groups_of"]

# train.* fields that change a head's objective or optimiser but not the batches it reads
HEAD_ONLY = ("loss", "alpha", "beta", "temperature", "disc_average", "oracle_margin", "circle_gamma", "circle_m",
             "siglip_scale", "siglip_bias", "siglip_learnable", "lr", "weight_decay", "warmup_steps",
             "checkpoint_every", "eval_every", "mixed_precision")


def stream_key(cfg: Profile) -> str:
    """The hash of what decides a head's batch stream: the profile without the head, the loss
    settings of :data:`HEAD_ONLY` and the evaluation / reporting sections, plus whether the
    objective trains on one positive per row (``LossSpec.first_positive``: the InfoNCE variants
    reorder each row's positives)."""
    d = profile_to_dict(cfg)
    train = {k: v for k, v in d["train"].items() if k not in HEAD_ONLY}
    train["infonce_order"] = loss_spec(cfg.train.loss).first_positive
    part = {"name": d["name"], "seed": d["seed"], "world": d["world"], "backbone": d["backbone"], "train": train}
    return hashlib.sha256(json.dumps(part, sort_keys=True, default=str).encode()).hexdigest()[:16]


def groups_of(configs: Sequence[Profile]) -> list[list[int]]:
    """Indices of ``configs`` grouped by :func:`stream_key`, in first-appearance order."""
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(stream_key(c), []).append(i)
    return list(groups.values())
