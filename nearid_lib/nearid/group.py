"""One pass over the training data for many NearID heads (issue "paper scale"; the pattern of
dinov2's linear evaluation, which trains its whole grid of heads from one pass over the features).

A head's *batch stream* -- the rows of every epoch, their order, the role-aware masking, the
augmentations and token crops of every step, hence the backbone tokens every step reads -- depends
on the seed, the data settings and the batch geometry, never on the loss, its weights, the
optimiser or the head: :func:`stream_key` hashes exactly the fields that decide it
(:data:`HEAD_ONLY` are left out; the InfoNCE objectives reorder the positives of every row, so the
loss enters only as "InfoNCE or not"). Heads with the same stream key are trained together by
:func:`train_group`: each step reads and prepares its tokens **once** (:func:`~.step.batch_inputs`),
then every head takes its own step on them -- its own optimiser, schedule, loss parameters,
dropout generator, autocast and resumable checkpoint in its own run folder -- so each head ends
exactly where it would alone (the same operations on the same inputs: ``tests/test_nearid_group.py``).
:func:`groups_of` partitions configurations into such groups; :func:`~.sweep.run_rows` uses it in
every profile.

On a GPU node the token reads dominate a head step (~180 ms to read a step's int8 grids at 3 GB/s
against ~7 ms of head compute on an H100): a group of 12 heads reads the store once instead of 12
times.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import torch
from tqdm.auto import tqdm

from ..config import Profile, profile_to_dict
from ..io_utils import write_json
from ..models import load_backbone, resolve_device, save_head
from . import distributed
from .checkpoints import finish_train_state, latest_state, load_train_state, run_key, save_train_state
from .losses import loss_spec, make_loss_parameters
from .rows import epoch_rows, steps_per_epoch
from .step import amp_context, batch_inputs, dropout_generator, loss_step
from .train import TrainResult, build_head, make_scheduler, train_features

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["HEAD_ONLY", "stream_key", "groups_of", "train_group", "GroupMember"]

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


@dataclass
class GroupMember:
    """One head of a group: its configuration, run folder, head, loss parameters, optimiser,
    schedule, autocast context, run key, first step and history."""

    cfg: Profile
    out_dir: Path | None
    head: Any
    loss_params: torch.nn.ParameterDict
    opt: torch.optim.Optimizer
    sched: Any
    amp: Any
    key: str
    start: int = 0
    history: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    seconds: float = 0.0


def _member(cfg: Profile, data, backbone, dev, total: int, out_dir, resume: bool) -> GroupMember:
    tc = cfg.train
    head = build_head(cfg, backbone.token_dim, backbone).to(dev)
    loss_params = make_loss_parameters(tc.loss, cfg).to(dev)
    opt = torch.optim.AdamW(list(head.parameters()) + list(loss_params.parameters()), lr=tc.lr,
                            weight_decay=tc.weight_decay)
    sched = make_scheduler(opt, int(tc.warmup_steps), total)
    m = GroupMember(cfg, Path(out_dir) if out_dir is not None else None, head, loss_params, opt, sched,
                    amp_context(cfg, dev), run_key(cfg, data))
    st = latest_state(m.out_dir / "resume") if (m.out_dir is not None and resume) else None
    if st is not None:
        if json.loads((st / "state.json").read_text()).get("config_key") == m.key:
            state = load_train_state(st, m.head, m.opt, m.sched, m.loss_params)
            m.start, m.history, m.evals = int(state["step"]), state.get("history", []), state.get("evals", [])
    return m


def train_group(configs: Sequence[Profile], data: NearIDData, encoder=None,
                out_dirs: Sequence[str | os.PathLike | None] | None = None, resume: bool = True,
                stop_after: int | None = None, progress: bool = True, cache_root=None) -> list[TrainResult]:
    """Train the heads of ``configs`` (one :func:`stream_key`) in one pass over their shared batch
    stream; each head checkpoints to (and resumes from) its own ``out_dirs[i]`` exactly as
    :func:`~.train.train_head` does, and a finished head leaves a (finished) resume state at its last step, so
    ``train_head`` / :func:`~.sweep.train_and_score` on that folder finds it trained. One process
    (a multi-process launch trains one configuration at a time with ``train_head``). Returns one
    :class:`~.train.TrainResult` per configuration (no validation: the sweep scores test itself)."""
    configs = list(configs)
    if not configs:
        return []
    keys = {stream_key(c) for c in configs}
    if len(keys) != 1:
        raise ValueError(f"train_group: the configurations read {len(keys)} different batch streams "
                         f"(nearid.group.stream_key); group them with groups_of first")
    if distributed.world_size() > 1:
        raise RuntimeError("train_group runs in one process; under a launch train each head with train_head")
    out_dirs = list(out_dirs) if out_dirs is not None else [None] * len(configs)
    t0 = time.time()
    cfg0 = configs[0]
    tc = cfg0.train
    dev = resolve_device(cfg0.device)
    if encoder is None:
        encoder = load_backbone(cfg0, device=dev)[0]
    backbone = getattr(encoder, "backbone", encoder)
    feats = train_features(cfg0, data, backbone, 0, cache_root, progress=progress)
    rows0 = epoch_rows(data, cfg0, 0)
    B = min(int(tc.batch_size), len(rows0))
    spe = steps_per_epoch(len(rows0), B)
    total = int(tc.epochs) * spe if tc.max_steps is None else int(tc.max_steps)
    members = [_member(c, data, backbone, dev, total, d, resume) for c, d in zip(configs, out_dirs)]
    for m in members:
        m.head.train()
    start = min(m.start for m in members)
    bar = tqdm(total=total * len(members), initial=sum(m.start for m in members), unit="head-step",
               desc=f"train {len(members)} heads", disable=not progress)
    cur_epoch, rows = -1, None
    step = start
    while step < total:
        epoch, b = divmod(step, spe)
        if epoch != cur_epoch:
            rows, cur_epoch = (rows0 if epoch == 0 else epoch_rows(data, cfg0, epoch)), epoch
        t_read = time.perf_counter()
        x = batch_inputs(cfg0, feats, rows, b * B, B, step, 0, dev)          # read and prepared once
        read = time.perf_counter() - t_read
        for m in members:
            if step < m.start:                     # this head resumed past this step
                continue
            t = time.perf_counter()
            loss, parts = loss_step(m.cfg, m.head, m.loss_params, m.opt, m.sched, x,
                                    dropout_generator(m.cfg, step, 0, dev), m.amp, dev)
            sec = time.perf_counter() - t
            m.seconds += sec
            m.history.append({"step": step + 1, "epoch": epoch, "loss": float(loss.detach()),
                              "lr": float(m.sched.get_last_lr()[0]), **{k: float(v) for k, v in parts.items()},
                              "seconds": sec + read / len(members)})
            bar.update(1)
        step += 1
        last = step >= total or step == stop_after
        for m in members:
            if m.out_dir is not None and step > m.start and (step % max(1, m.cfg.train.checkpoint_every) == 0 or last):
                save_train_state(m.out_dir / "resume", step, m.head, m.opt, m.sched,
                                 {"history": m.history, "evals": m.evals, "config_key": m.key}, m.loss_params)
        if stop_after is not None and step >= stop_after:
            break
    bar.close()
    wall = time.time() - t0
    out = []
    for m in members:
        m.head.eval()
        if m.out_dir is not None and step >= total:
            # the finished head, as train_head leaves it (a sweep sees a trained run)
            save_head(m.head, m.out_dir, backbone=backbone.spec(), config=profile_to_dict(m.cfg), step=step,
                      final_eval=None)
            write_json({"history": m.history, "evals": m.evals, "group_seconds": wall,
                        "group_size": len(members)}, m.out_dir / "history.json")
            write_json(profile_to_dict(m.cfg), m.out_dir / "config.json")
            finish_train_state(m.out_dir / "resume", step, {"history": m.history, "evals": m.evals, "config_key": m.key})
        head = m.head.cpu() if dev.type != "cpu" else m.head
        out.append(TrainResult(head=head, out_dir=m.out_dir, steps=step, history=m.history, evals=m.evals,
                               seconds=wall / len(members), resumed_from=m.start))
    return out
