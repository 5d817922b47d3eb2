"""One training step of a NearID head, split where heads can share it (:mod:`.group`): the step's
inputs (:func:`batch_inputs`: the rows of the batch and every random choice that does not depend on
the head -- positive order, role-aware masking, augmentations, token crops -- hence the backbone
tokens it reads) and each head's own step on them (:func:`loss_step`: forward, loss, backward,
optimiser and schedule). The one training loop, :func:`~.train.train_group`, runs them for the
heads of one batch stream (one head: :func:`~.train.train_head`)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from ..runtime.seeding import make_rng, torch_generator
from . import distributed
from .losses import compute_loss, loss_spec
from .rows import TrainRows, random_positive_first
from .train_inputs import TrainFeatures, crop_masks

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["ROLE_P", "BatchInputs", "batch_inputs", "embed_inputs", "loss_step", "dropout_generator", "amp_context"]

ROLE_P = ("mask_p_anchor", "mask_p_positive", "mask_p_distractor")


def amp_context(cfg: Profile, dev: torch.device):
    """The autocast context of ``train.mixed_precision`` on ``dev`` (fp16 autocast is a GPU feature:
    off on the CPU)."""
    mp = cfg.train.mixed_precision
    if mp == "no":
        return torch.autocast(dev.type, enabled=False)
    if mp == "fp16" and dev.type != "cuda":
        return torch.autocast(dev.type, enabled=False)       # fp16 autocast is a GPU feature
    return torch.autocast(dev.type, dtype=torch.float16 if mp == "fp16" else torch.bfloat16)


@dataclass
class BatchInputs:
    """What one step of one rank feeds every head (the same for every head that shares the batch
    stream): the backbone tokens of every valid slot ``tok`` [S, N, D] (anchors, then positives,
    then distractors, each fg-masked with its role's probability), the token crop mask ``tmask``,
    where the slots go back (``n``, ``pm`` [n, P], ``dm`` [n, K]) and the batch rows themselves."""

    batch: TrainRows
    tok: torch.Tensor
    tmask: Any
    n: int
    pm: np.ndarray
    dm: np.ndarray


def batch_inputs(cfg: Profile, feats: TrainFeatures, rows: TrainRows, lo: int, size: int, step: int, rank: int,
                 dev: torch.device) -> BatchInputs:
    """The inputs of step ``step`` for rows ``lo:lo+size`` of the epoch: every random choice of the
    step that does not depend on the head (positive order for the single-positive losses, role-aware
    masking, augmentations, token crops) drawn from ``(seed, "step", step, rank)`` in a fixed order,
    so heads trained alone or together (:mod:`nearid_lib.nearid.group`) see the same inputs."""
    tc = cfg.train
    batch = rows.take(np.arange(lo, lo + size))
    rng = make_rng(cfg.seed, "step", step, rank)
    if loss_spec(tc.loss).first_positive:
        batch = random_positive_first(batch, rng)
    n = len(batch)
    pm = batch.positives != ""
    dm = batch.distractors != ""
    rels = list(batch.anchor) + list(batch.positives[pm]) + list(batch.distractors[dm])
    msks = list(batch.anchor_mask) + list(batch.pos_masks[pm]) + list(batch.dist_masks[dm])
    roles = np.repeat([0, 1, 2], [n, int(pm.sum()), int(dm.sum())])
    fg = rng.random(len(rels)) < np.asarray([getattr(tc, k) for k in ROLE_P])[roles]
    crop_p = float(tc.token_crop) if tc.use_cache and tc.augment else 0.0
    tok = feats.tokens(rels, msks, fg, rng).to(dev)                  # [S, N, D]
    n_tok = tok.shape[1]
    grid = int(round(math.sqrt(n_tok)))
    tmask = crop_masks(len(rels), grid, n_tok, crop_p, rng).to(dev)
    return BatchInputs(batch, tok, tmask, n, pm, dm)


def embed_inputs(head, x: BatchInputs, gen, amp):
    """One head call on the step's inputs, the slots put back in place: ``(anchor [n,E], positives
    [n,P,E], distractors [n,K,E], pos_mask [n,P], dist_mask [n,K])``."""
    with amp:
        e = head(x.tok, token_mask=x.tmask, generator=gen)
    e = F.normalize(e.float(), dim=-1)                                  # [S, E]
    dev = e.device
    n, P, K, E = x.n, x.pm.shape[1], x.dm.shape[1], e.shape[1]
    n_pos = int(x.pm.sum())
    pos = e.new_zeros(n, P, E)
    pos[torch.from_numpy(x.pm).to(dev)] = e[n:n + n_pos]
    dis = e.new_zeros(n, K, E)
    dis[torch.from_numpy(x.dm).to(dev)] = e[n + n_pos:]
    return e[:n], pos, dis, torch.from_numpy(x.pm).to(dev), torch.from_numpy(x.dm).to(dev)


def loss_step(cfg: Profile, head, loss_params, opt, sched, x: BatchInputs, gen, amp, dev, accel=None):
    """Forward, loss (:func:`~nearid_lib.nearid.losses.compute_loss` with ``cfg``'s objective),
    backward and one optimiser / schedule step of one head on the step's inputs ``x``."""
    a, pos, dis, pmask, dmask = embed_inputs(head, x, gen, amp)
    pool = distributed.gather_pool(a, pos, pmask)
    loss, parts = compute_loss(
        cfg.train.loss, a, pos, dis, pmask, dmask, cfg,
        dist_oracle=torch.from_numpy(x.batch.oracle).to(dev, torch.float32),
        rank_only=torch.from_numpy(x.batch.rank_only).to(dev), pool=pool,
        params=loss_params if len(loss_params) else None)
    opt.zero_grad(set_to_none=True)
    if accel is not None:
        accel.backward(loss)
    else:
        loss.backward()
    opt.step()
    sched.step()
    return loss, parts


def dropout_generator(cfg: Profile, step: int, rank: int, dev: torch.device):
    """The token-dropout generator of a step (``(seed, "dropout", step, rank)``; the device's global
    generator on a GPU)."""
    return torch_generator(cfg.seed, "dropout", step, rank) if dev.type == "cpu" else None
