"""Training of NearID MAP heads on a frozen backbone (paper Section 4.1): one loop for one head or a
grid of heads on one batch stream (the pattern of dinov2's linear evaluation, which trains its whole
grid of heads from one pass over the features; a grid of one is the same code).

:func:`train_group` trains the heads of configurations that read the same batch stream
(:func:`~nearid_lib.nearid.group.stream_key`) together: each step reads and prepares its tokens once
(:func:`batch_inputs`), then every head takes its own step on them -- its own optimiser,
schedule, loss parameters, dropout generator, autocast, validation and resumable checkpoints in its
own run folder -- so each head ends exactly where it would alone (the same operations on the same
inputs: ``tests/test_nearid_group.py``). :func:`train_head` is ``train_group([cfg])[0]``.

A run reads the rows of each epoch (:mod:`nearid_lib.nearid.rows`), the backbone tokens of every
slot of a batch (:mod:`nearid_lib.nearid.train_inputs`), and minimises any objective of
:func:`nearid_lib.nearid.losses.compute_loss` with AdamW and a warmup + cosine schedule.

Determinism and resumption: the rows of epoch e and their order come from ``make_rng(seed, ..., e)``,
and every random choice of step s (role-aware masking, token dropout, token crops, image
augmentations) from ``(seed, "step", s)``. Global step s is batch ``s % steps_per_epoch`` of epoch
``s // steps_per_epoch``. A run killed after a checkpoint therefore resumes to bit-identical
weights (tested in ``tests/test_nearid_train.py``), each head of a group from its own folder.
Role-aware foreground masking uses the ``fg`` token caches: anchor 0.5 / positives 0.2 / distractors 0.6.

Multi-GPU: ``accelerate launch --num_processes N -m nearid_lib.nearid.train --profile paper`` (or
``torchrun``). Each rank takes its equal slice of the global batch (``train.batch_size``), the head
is wrapped in DDP, and the positives are all-gathered with gradients
(:func:`nearid_lib.nearid.distributed.gather_pool`) so the pool G spans the global batch, as in the
paper. A launch trains one configuration: a group of several raises before any work (under fp16 the
heads would share accelerate's one loss scaler, so one head's overflow would change another's step;
the sweep runs its groups in processes of one GPU each instead, :mod:`nearid_lib.nearid.sweep`).

CLI: ``python -m nearid_lib.nearid.train --profile mini [--set train.lr=3e-4 ...] [--out DIR] [--no-resume]``.

Checkpoints (each head's ``out_dir``): ``head.safetensors`` + ``head_config.json`` (``models.save_head``
with the resolved config and the final validation, loadable by ``load_encoder("nearid",
checkpoint=out_dir)``), ``history.json``, ``config.json`` and ``resume/step_XXXXXXX/``
(:mod:`nearid_lib.nearid.checkpoints`; a finished run keeps only its finished ``state.json``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..config import Profile, get_profile, profile_to_dict
from ..data import load_nearid, nearid_root
from ..paths import checkpoint_dir
from ..io_utils import write_json
from ..runtime.launch import collective_timeout, end_launch
from ..models import MAPHead, load_backbone, resolve_device, save_head
from ..runtime import set_torch_threads
from ..runtime.seeding import make_rng, torch_generator
from . import distributed
from .checkpoints import finish_train_state, latest_state, load_train_state, run_dir, run_key, save_train_state
from ..features.embedder import Embedder
from .evaluate import evaluate_split
from .group import stream_key
from .losses import compute_loss, loss_spec, make_loss_parameters
from .rows import TrainRows, epoch_rows, random_positive_first, steps_per_epoch
from .train_inputs import TrainFeatures, crop_masks, train_features

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["build_head", "make_scheduler", "TrainResult", "train_group", "train_head", "train_features", "main",
           "ROLE_P", "BatchInputs", "batch_inputs", "embed_inputs", "loss_step", "dropout_generator", "amp_context"]

# --------------------------------------------------------------------------- one step
# One training step, split where heads can share it (.group): the step's inputs (batch_inputs:
# the rows of the batch and every random choice that does not depend on the head -- positive
# order, role-aware masking, augmentations, token crops -- hence the backbone tokens it reads)
# and each head's own step on them (loss_step: forward, loss, backward, optimiser, schedule).
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


# --------------------------------------------------------------------------- model / optim
def build_head(cfg: Profile, token_dim: int, backbone=None) -> MAPHead:
    """A fresh :class:`MAPHead` from ``cfg.head`` (SigLIP backbones: a copy of their own MAP head when
    ``head.init_from_backbone``, as in the paper). Initialised from ``(cfg.seed, "head-init")``.
    The trainable head is float32 whatever the backbone's dtype (paper: float16): mixed precision
    is autocast over float32 master weights, never half-precision parameters under Adam."""
    hc = cfg.head
    if hc.init_from_backbone and backbone is not None and hasattr(backbone, "siglip_head"):
        return MAPHead.from_siglip(backbone.siglip_head, token_dropout=hc.token_dropout).float()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(make_rng(cfg.seed, "head-init").integers(2**62))
        return MAPHead(token_dim, num_heads=hc.num_heads, mlp_ratio=hc.mlp_ratio, out_dim=hc.out_dim,
                       token_dropout=hc.token_dropout)


def make_scheduler(opt, warmup: int, total: int):
    """Linear warmup over ``warmup`` steps, then cosine decay to 0 at ``total``."""
    def f(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        prog = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, prog)))

    return torch.optim.lr_scheduler.LambdaLR(opt, f)


# --------------------------------------------------------------------------- state of a run
@dataclass
class TrainResult:
    """What :func:`train_head` returns (:func:`train_group`: one per configuration). ``history``: one
    dict per step (loss, disc, rank, lr); ``evals``: validation rows (``evaluate.summary_row`` + step)."""

    head: Any
    out_dir: Path | None
    steps: int
    history: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    resumed_from: int = 0


@dataclass
class _Stream:
    """What the heads of one batch stream share: the first configuration (whose stream it is), the
    backbone and its features, the device and process layout, epoch 0's rows and the batch geometry
    (global batch ``B``, ``spe`` steps per epoch, ``total`` steps)."""

    cfg: Profile
    backbone: Any
    feats: TrainFeatures
    dev: torch.device
    accel: Any
    world: int
    rank: int
    rows0: TrainRows
    B: int
    spe: int
    total: int


@dataclass
class _Head:
    """One head of the stream: its configuration, run folder, head (``raw``: unwrapped from DDP), loss
    parameters, AdamW, schedule, run key, autocast; the step it resumed from (``finished``: its run
    was already complete) and its record."""

    cfg: Profile
    out_dir: Path | None
    head: Any
    loss_params: torch.nn.ParameterDict
    opt: torch.optim.Optimizer
    sched: Any
    key: str
    raw: Any = None
    amp: Any = None
    start: int = 0
    finished: bool = False
    history: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)


def _accelerator(cfg: Profile):
    """An ``accelerate.Accelerator`` when launched on several processes, else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    cuda = torch.cuda.is_available()
    # cpu=True on CPU-only ranks: otherwise accelerate sees no multi-CPU launcher variables under
    # torchrun, reports DistributedType.NO and never wraps the head in DDP (ranks silently diverge);
    # the group waits collective_timeout() (rank 0 validates while the others wait: launch docstring)
    accel = Accelerator(mixed_precision=cfg.train.mixed_precision if cuda else "no", cpu=not cuda,
                        kwargs_handlers=[InitProcessGroupKwargs(timeout=collective_timeout())])
    if accel.num_processes <= 1 or accel.distributed_type.name == "NO":
        raise RuntimeError(f"WORLD_SIZE={os.environ.get('WORLD_SIZE')} but accelerate set up no distributed "
                           f"training ({accel.distributed_type}); launch with `accelerate launch` or `torchrun`")
    return accel


def _stream(cfg: Profile, data: NearIDData, encoder, cache_root, progress: bool) -> _Stream:
    """Process layout, backbone (default: the profile's, :func:`~nearid_lib.models.load_backbone`) and
    its feature caches, epoch 0's rows and the batch geometry."""
    tc = cfg.train
    accel = _accelerator(cfg)
    dev = accel.device if accel is not None else resolve_device(cfg.device)
    if encoder is None:
        encoder = load_backbone(cfg, device=dev)[0]
    backbone = getattr(encoder, "backbone", encoder)
    world, rank = distributed.world_size(), distributed.rank()
    feats = train_features(cfg, data, backbone, rank, cache_root, progress=progress and rank == 0)
    rows0 = epoch_rows(data, cfg, 0)
    B = min(int(tc.batch_size), len(rows0))
    if B % world:
        raise ValueError(f"global batch {B} is not divisible by the {world} processes")
    spe = steps_per_epoch(len(rows0), B)
    total = int(tc.epochs) * spe if tc.max_steps is None else int(tc.max_steps)
    return _Stream(cfg, backbone, feats, dev, accel, world, rank, rows0, B, spe, total)


def _clear_foreign_state(resume_dir: Path, key: str) -> bool:
    """Delete ``resume_dir`` when its newest state belongs to another run than ``key`` (runs are
    never mixed); returns whether it did. Rank 0's job alone under a launch (:func:`_head`)."""
    st = latest_state(resume_dir)
    if st is None or json.loads((st / "state.json").read_text()).get("config_key") == key:
        return False
    shutil.rmtree(resume_dir, ignore_errors=True)
    return True


def _head(s: _Stream, cfg: Profile, data: NearIDData, out_dir, resume: bool) -> _Head:
    """A fresh head with its loss parameters, AdamW and schedule, resumed from the newest state of
    this configuration under ``out_dir/resume`` (a state of another configuration is deleted, by rank
    0 alone and before any rank reads the folder: runs are never mixed), then wrapped for
    multi-process training and put in training mode."""
    tc = cfg.train
    head = build_head(cfg, s.backbone.token_dim, s.backbone).to(s.dev)
    loss_params = make_loss_parameters(tc.loss, cfg).to(s.dev)
    opt = torch.optim.AdamW(list(head.parameters()) + list(loss_params.parameters()), lr=tc.lr,
                            weight_decay=tc.weight_decay)
    sched = make_scheduler(opt, int(tc.warmup_steps), s.total)
    h = _Head(cfg, Path(out_dir) if out_dir is not None else None, head, loss_params, opt, sched, run_key(cfg, data))
    resume_dir = h.out_dir / "resume" if h.out_dir is not None and resume else None
    if resume_dir is not None and s.rank == 0:
        _clear_foreign_state(resume_dir, h.key)
    if resume_dir is not None and s.accel is not None:
        # every rank reads the folder only once rank 0 has cleared it: a rank deleting it (or
        # reading it mid-deletion) while another loads a state would start the ranks from different
        # weights. A bounded wait: rank 0 deletes one run's resume folder (one state, newest only),
        # and what precedes it on every rank is what DDP's prepare below already waits through.
        s.accel.wait_for_everyone()
    st = latest_state(resume_dir) if resume_dir is not None else None
    if st is not None:
        state_key = json.loads((st / "state.json").read_text()).get("config_key")
        if state_key != h.key:      # rank 0 cleared every foreign state: the ranks disagree on the key
            raise RuntimeError(f"rank {s.rank}: {st} belongs to run {state_key}, this rank trains {h.key}; "
                               f"the processes of a launch must train the same configuration on the same data and code")
        state = load_train_state(st, h.head, h.opt, h.sched, h.loss_params)
        h.start, h.history, h.evals = int(state["step"]), state.get("history", []), state.get("evals", [])
        h.finished = bool(state.get("finished"))
    if s.accel is not None:          # after resuming: DDP wraps the restored weights
        h.head, h.opt = s.accel.prepare(h.head, h.opt)
    h.raw = s.accel.unwrap_model(h.head) if s.accel is not None else h.head
    h.amp = amp_context(cfg, s.dev)
    h.head.train()
    return h


def _validate(s: _Stream, h: _Head, data: NearIDData, split: str, step: int, cache_root) -> dict:
    """``evaluate_split`` of the head as it is at ``step`` (back in training mode afterwards)."""
    h.raw.eval()
    emb = Embedder(s.backbone, data, head=h.raw, profile=h.cfg, cache_root=cache_root, progress=False,
                   batch_size=h.cfg.backbone.batch_size, store_tokens=True)
    row = {"step": step, "split": split, **evaluate_split(emb, data, split)}
    h.raw.train()
    return row


def _save_final(s: _Stream, h: _Head, step: int, wall: float, n_heads: int) -> None:
    """The finished run folder: the head with its config and final validation, the history, the
    config, and the finished resume state (the last step's weights and moments dropped)."""
    save_head(h.raw, h.out_dir, backbone=s.backbone.spec(), config=profile_to_dict(h.cfg), step=step,
              final_eval=h.evals[-1] if h.evals else None)
    write_json({"history": h.history, "evals": h.evals, "group_seconds": wall, "group_size": n_heads},
               h.out_dir / "history.json")
    write_json(profile_to_dict(h.cfg), h.out_dir / "config.json")
    finish_train_state(h.out_dir / "resume", step, {"history": h.history, "evals": h.evals, "config_key": h.key})


# --------------------------------------------------------------------------- the loop
def train_group(configs: Sequence[Profile], data: NearIDData, encoder=None,
                out_dirs: Sequence[str | os.PathLike | None] | None = None, resume: bool = True,
                stop_after: int | None = None, progress: bool = True, eval_split: str | None = None,
                cache_root=None, log_every: int = 10, final_eval: bool = True) -> list[TrainResult]:
    """Train a MAP head for each of ``configs`` (resolved Profiles of one :func:`~.group.stream_key`)
    in one pass over their shared batch stream.

    Args:
        encoder: the frozen backbone (default: the profile's, :func:`~nearid_lib.models.load_backbone`).
        out_dirs: each head's checkpoint folder (None: no checkpoints, no resumption).
        resume: continue each head from the newest ``out_dir/resume/step_*`` of its configuration
            (a finished run is returned as it is).
        stop_after: stop after this global step (simulates a kill in tests; a checkpoint is written).
        eval_split: validation split scored every ``train.eval_every`` steps and at the end
            (``final_eval``); None: no validation (the sweep scores test itself).
    Returns:
        one :class:`TrainResult` per configuration (the heads in eval mode, on CPU).
    """
    configs = list(configs)
    out_dirs = list(out_dirs) if out_dirs is not None else [None] * len(configs)
    # what cannot be trained together fails before any work
    if len(out_dirs) != len(configs):
        raise ValueError(f"train_group: {len(configs)} configurations but {len(out_dirs)} out_dirs")
    if not configs:
        return []
    if (n_streams := len({stream_key(c) for c in configs})) != 1:
        raise ValueError(f"train_group: the configurations read {n_streams} different batch streams "
                         f"(nearid.group.stream_key); group them with groups_of first")
    if len(configs) > 1 and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise RuntimeError(f"train_group: a multi-process launch trains one configuration, got {len(configs)}; "
                           f"launch once per configuration, or train the group in one process per GPU (nearid.sweep)")
    t0 = time.time()
    # the shared stream, then every head resumed where its own run folder stands
    s = _stream(configs[0], data, encoder, cache_root, progress)
    heads = [_head(s, c, data, d, resume) for c, d in zip(configs, out_dirs)]
    start = min(h.start for h in heads)
    desc = f"train {configs[0].train.loss}" if len(heads) == 1 else f"train {len(heads)} heads"
    bar = tqdm(total=s.total, initial=start, desc=desc, unit="step", disable=not (progress and s.rank == 0))
    n_local = s.B // s.world
    cur_epoch, rows = -1, None
    step = start
    while step < s.total:
        # this rank's slice of the global batch, read and prepared once for every head
        epoch, b = divmod(step, s.spe)
        if epoch != cur_epoch:
            rows, cur_epoch = (s.rows0 if epoch == 0 else epoch_rows(data, s.cfg, epoch)), epoch
        t_read = time.perf_counter()
        x = batch_inputs(s.cfg, s.feats, rows, b * s.B + s.rank * n_local, n_local, step, s.rank, s.dev)
        read = time.perf_counter() - t_read
        active = [h for h in heads if step >= h.start]          # a head resumed past this step waits
        # each head's own step on those inputs
        for h in active:
            t = time.perf_counter()
            loss, parts = loss_step(h.cfg, h.head, h.loss_params, h.opt, h.sched, x,
                                    dropout_generator(h.cfg, step, s.rank, s.dev), h.amp, s.dev, s.accel)
            # the logged loss is the global batch's (the mean of the ranks' losses), as on one process
            gl = distributed.all_reduce_sum(loss.detach().reshape(1)) / s.world
            h.history.append({"step": step + 1, "epoch": epoch, "loss": float(gl),
                              "lr": float(h.sched.get_last_lr()[0]), **{k: float(v) for k, v in parts.items()},
                              "seconds": time.perf_counter() - t + read / len(active)})
        step += 1
        bar.update(1)
        if not bar.disable and step % max(1, log_every) == 0:
            last = active[0].history[-1]
            bar.set_postfix(loss=f"{last['loss']:.3f}", rank=f"{last['rank']:.3f}")
        # validation (rank 0, while the others wait in the next step's collectives) and checkpoints
        for h in active:
            ev = h.cfg.train.eval_every
            if eval_split and ev and step % ev == 0 and step < s.total and s.rank == 0:
                h.evals.append(_validate(s, h, data, eval_split, step, cache_root))
            if h.out_dir is not None and s.rank == 0 and (step % max(1, h.cfg.train.checkpoint_every) == 0
                                                          or step == stop_after):
                save_train_state(h.out_dir / "resume", step, h.raw, h.opt, h.sched,
                                 {"history": h.history, "evals": h.evals, "config_key": h.key}, h.loss_params)
        if stop_after is not None and step >= stop_after:
            break
    bar.close()
    wall = time.time() - t0
    # the final validation and the finished run folders (a run found finished is left as it is)
    out = []
    for h in heads:
        done_now = step >= s.total and not h.finished
        if done_now and final_eval and eval_split and s.rank == 0:
            h.evals.append(_validate(s, h, data, eval_split, step, cache_root))
        h.raw.eval()
        if done_now and h.out_dir is not None and s.rank == 0:
            _save_final(s, h, step, wall, len(heads))
        out.append(TrainResult(head=h.raw.cpu() if s.dev.type != "cpu" else h.raw, out_dir=h.out_dir, steps=step,
                               history=h.history, evals=h.evals, seconds=wall / len(heads), resumed_from=h.start))
    return out


def train_head(cfg: Profile, data: NearIDData, encoder=None, out_dir: str | os.PathLike | None = None,
               resume: bool = True, stop_after: int | None = None, progress: bool = True,
               eval_split: str | None = "val", cache_root=None, log_every: int = 10,
               final_eval: bool = True) -> TrainResult:
    """Train one MAP head on ``data`` with ``cfg.train`` / ``cfg.head`` (a resolved Profile): the
    group of one of :func:`train_group`, whose arguments these are (``out_dir``: its folder), except
    that validation on ``eval_split`` (default ``"val"``) is on. Multi-process under a launch."""
    return train_group([cfg], data, encoder, [out_dir], resume=resume, stop_after=stop_after, progress=progress,
                       eval_split=eval_split, cache_root=cache_root, log_every=log_every, final_eval=final_eval)[0]


# --------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nearid_lib.nearid.train --profile mini [--set key=value ...] [--out DIR] [--no-resume]``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="mini")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="dotted config override, e.g. train.lr=3e-4 (repeatable)")
    ap.add_argument("--data", default=None, help="dataset root (default data_dir(profile)/nearid)")
    ap.add_argument("--out", default=None, help="checkpoint folder (default: the run folder of this configuration, "
                                                "<out>/head_runs/<run key>, which notebooks 03-07 then reuse)")
    ap.add_argument("--no-resume", action="store_true")
    ap.add_argument("--stop-after", type=int, default=None)
    args = ap.parse_args(argv)
    over = {}
    for kv in args.set:
        if "=" not in kv:
            ap.error(f"--set needs KEY=VALUE, got {kv!r}")
        k, v = kv.split("=", 1)
        over[k] = v
    cfg = get_profile(args.profile, overrides=over)
    set_torch_threads(cfg.runtime.threads, cfg.runtime.tune_malloc)
    data = load_nearid(args.data or nearid_root(cfg.name))
    if args.out:
        out = Path(args.out)
    else:
        out = run_dir(cfg, data)     # the folder notebook 03's run of this configuration uses
    res = train_head(cfg, data, out_dir=out, resume=not args.no_resume, stop_after=args.stop_after)
    if res.evals:
        print(json.dumps(res.evals[-1], indent=1, default=float))
    print(f"trained {res.steps} steps in {res.seconds:.1f}s -> {out}")
    if not args.out and distributed.rank() == 0 and (out / "head.safetensors").exists():
        # the profile's trained head (what `nearid score` / `nearid sim` and notebooks 09-11 load),
        # as notebook 03 publishes it
        ck = checkpoint_dir(cfg.name) / "nearid"
        shutil.rmtree(ck, ignore_errors=True)
        shutil.copytree(out, ck, ignore=shutil.ignore_patterns("resume", "units_*", "mtg_*"))
        print(f"published the head to {ck}")
    end_launch()   # every rank leaves the group (no barrier: rank 0 publishes outside it)
    return 0


if __name__ == "__main__":  # pragma: no cover
    from ..runtime.launch import exit_entry

    exit_entry(main)
