"""Training of the NearID MAP head on a frozen backbone (paper Section 4.1), cached or on the fly.

A run reads the rows of each epoch (:mod:`nearid_lib.nearid.rows`), the backbone tokens of every
slot of a batch (:mod:`nearid_lib.nearid.train_inputs`), and minimises any objective of
:func:`nearid_lib.nearid.losses.compute_loss` with AdamW and a warmup + cosine schedule.

Determinism and resumption: the rows of epoch e and their order come from ``make_rng(seed, ..., e)``,
and every random choice of step s (role-aware masking, token dropout, token crops, image
augmentations) from ``(seed, "step", s)``. Global step s is batch ``s % steps_per_epoch`` of epoch
``s // steps_per_epoch``. A run killed after a checkpoint therefore resumes to bit-identical
weights (tested in ``tests/test_nearid_train.py``). Role-aware foreground masking uses the ``fg``
token caches: anchor 0.5 / positives 0.2 / distractors 0.6.

Multi-GPU: ``accelerate launch --num_processes N -m nearid_lib.nearid.train --profile paper``. Each
rank takes its equal slice of the global batch (``train.batch_size``) and the positives are
all-gathered with gradients (:func:`nearid_lib.nearid.distributed.gather_pool`) so the pool G spans
the global batch, as in the paper.

CLI: ``python -m nearid_lib.nearid.train --profile mini [--set train.lr=3e-4 ...] [--out DIR] [--no-resume]``.

Checkpoints (``out_dir``): ``head.safetensors`` + ``head_config.json`` (``models.save_head`` with the
resolved config, loadable by ``load_encoder("nearid", checkpoint=out_dir)``), ``history.json``, and
``resume/step_XXXXXXX/`` (:mod:`nearid_lib.nearid.checkpoints`).
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

import torch
from tqdm.auto import tqdm

from ..config import Profile, get_profile, profile_to_dict
from ..data import load_nearid, nearid_root
from ..paths import checkpoint_dir
from ..io_utils import write_json
from ..launch import collective_timeout, end_launch
from ..models import MAPHead, load_backbone, resolve_device, save_head
from ..runtime import set_torch_threads
from ..seeding import make_rng
from . import distributed
from .checkpoints import finish_train_state, latest_state, load_train_state, run_dir, run_key, save_train_state
from ..features.embedder import Embedder
from .evaluate import evaluate_split
from .losses import make_loss_parameters
from .rows import TrainRows, epoch_rows, steps_per_epoch
from .step import amp_context, batch_inputs, dropout_generator, loss_step
from .train_inputs import TrainFeatures, train_features

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["build_head", "make_scheduler", "TrainResult", "train_head", "train_features", "main"]

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


# --------------------------------------------------------------------------- one run
@dataclass
class TrainResult:
    """What :func:`train_head` returns. ``history``: one dict per step (loss, disc, rank, lr);
    ``evals``: validation rows (``evaluate.summary_row`` + step)."""

    head: Any
    out_dir: Path | None
    steps: int
    history: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    resumed_from: int = 0


@dataclass
class _Setup:
    """Everything a run holds: the backbone and its features, the head and its optimiser, the batch
    geometry (global batch ``B``, ``spe`` steps per epoch, ``total`` steps) and the process layout."""

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
    head: Any
    loss_params: torch.nn.ParameterDict
    opt: torch.optim.Optimizer
    sched: Any
    key: str = ""
    raw_head: Any = None
    amp: Any = None


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


def _setup(cfg: Profile, data: NearIDData, encoder, cache_root, progress: bool) -> _Setup:
    """Backbone (default: the profile's, :func:`~nearid_lib.models.load_backbone`) and its feature
    caches, epoch 0's rows, the batch geometry, a fresh head, AdamW and the schedule."""
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
    head = build_head(cfg, backbone.token_dim, backbone).to(dev)
    loss_params = make_loss_parameters(tc.loss, cfg).to(dev)
    opt = torch.optim.AdamW(list(head.parameters()) + list(loss_params.parameters()), lr=tc.lr,
                            weight_decay=tc.weight_decay)
    sched = make_scheduler(opt, int(tc.warmup_steps), total)
    return _Setup(cfg, backbone, feats, dev, accel, world, rank, rows0, B, spe, total, head, loss_params, opt, sched,
                  key=run_key(cfg, data))


def _resume(s: _Setup, ckpt: Path | None, resume: bool) -> tuple[int, list[dict], list[dict]]:
    """``(start step, history, evals)`` of the newest resume state of this configuration under
    ``ckpt/resume``; a state of another configuration is deleted (runs are never mixed)."""
    if ckpt is None or not resume or (st := latest_state(ckpt / "resume")) is None:
        return 0, [], []
    if json.loads((st / "state.json").read_text()).get("config_key") != s.key:
        shutil.rmtree(ckpt / "resume", ignore_errors=True)
        return 0, [], []
    state = load_train_state(st, s.head, s.opt, s.sched, s.loss_params)
    return int(state["step"]), state.get("history", []), state.get("evals", [])


def _prepare(s: _Setup) -> None:
    """Wrap head and optimiser for multi-process training (after resuming), pick autocast."""
    if s.accel is not None:
        s.head, s.opt = s.accel.prepare(s.head, s.opt)
    s.raw_head = s.accel.unwrap_model(s.head) if s.accel is not None else s.head
    s.amp = amp_context(s.cfg, s.dev)


def _train_step(s: _Setup, rows: TrainRows, b: int, step: int) -> tuple[torch.Tensor, dict]:
    """One optimiser step on batch ``b`` of the epoch's ``rows`` (this rank's slice); every random
    choice comes from ``(seed, step, rank)``."""
    lo = b * s.B + s.rank * (s.B // s.world)
    x = batch_inputs(s.cfg, s.feats, rows, lo, s.B // s.world, step, s.rank, s.dev)
    gen = dropout_generator(s.cfg, step, s.rank, s.dev)
    return loss_step(s.cfg, s.head, s.loss_params, s.opt, s.sched, x, gen, s.amp, s.dev, s.accel)


def _validate(s: _Setup, data: NearIDData, split: str, step: int, cache_root) -> dict:
    """``evaluate_split`` of the head as it is at ``step`` (back in training mode afterwards)."""
    s.raw_head.eval()
    emb = Embedder(s.backbone, data, head=s.raw_head, profile=s.cfg, cache_root=cache_root, progress=False,
                   batch_size=s.cfg.backbone.batch_size, store_tokens=True)
    row = {"step": step, "split": split, **evaluate_split(emb, data, split)}
    s.raw_head.train()
    return row


def _progress_bar(s: _Setup, start: int, progress: bool):
    if not (progress and s.rank == 0):
        return None
    return tqdm(total=s.total, initial=start, desc=f"train {s.cfg.train.loss}", unit="step")


def _save_final(s: _Setup, ckpt: Path, step: int, history: list[dict], evals: list[dict]) -> None:
    bb = s.backbone
    save_head(s.raw_head, ckpt, backbone=bb.spec(),
              config=profile_to_dict(s.cfg), step=step, final_eval=evals[-1] if evals else None)
    write_json({"history": history, "evals": evals}, ckpt / "history.json")
    write_json(profile_to_dict(s.cfg), ckpt / "config.json")
    finish_train_state(ckpt / "resume", step, {"history": history, "evals": evals, "config_key": s.key})


def train_head(cfg: Profile, data: NearIDData, encoder=None, out_dir: str | os.PathLike | None = None,
               resume: bool = True, stop_after: int | None = None, progress: bool = True,
               eval_split: str | None = "val", cache_root=None, log_every: int = 10,
               final_eval: bool = True) -> TrainResult:
    """Train a MAP head on ``data`` with ``cfg.train`` / ``cfg.head`` (a resolved Profile).

    Args:
        encoder: the frozen backbone (default: the profile's, :func:`~nearid_lib.models.load_backbone`).
        out_dir: checkpoint folder (None: no checkpoints, no resumption).
        resume: continue from the newest ``out_dir/resume/step_*`` if present.
        stop_after: stop after this global step (simulates a kill in tests; a checkpoint is written).
        eval_split: validation split scored every ``train.eval_every`` steps (0: only at the end).
    Returns:
        :class:`TrainResult` (the head is in eval mode, on CPU).
    """
    t0 = time.time()
    tc = cfg.train
    s = _setup(cfg, data, encoder, cache_root, progress)
    ckpt = Path(out_dir) if out_dir is not None else None
    start, history, evals = _resume(s, ckpt, resume)
    _prepare(s)
    bar = _progress_bar(s, start, progress)
    s.head.train()
    cur_epoch, rows = -1, None
    step = start
    while step < s.total:
        t_step = time.perf_counter()
        epoch, b = divmod(step, s.spe)
        if epoch != cur_epoch:
            rows, cur_epoch = (s.rows0 if epoch == 0 else epoch_rows(data, cfg, epoch)), epoch
        loss, parts = _train_step(s, rows, b, step)
        step += 1
        # the logged loss is the global batch's (the mean of the ranks' losses), as on one process
        gl = distributed.all_reduce_sum(loss.detach().reshape(1)) / s.world
        rec = {"step": step, "epoch": epoch, "loss": float(gl), "lr": float(s.sched.get_last_lr()[0]),
               **{k: float(v) for k, v in parts.items()}, "seconds": time.perf_counter() - t_step}
        history.append(rec)
        if bar is not None:
            bar.update(1)
            if step % max(1, log_every) == 0:
                bar.set_postfix(loss=f"{rec['loss']:.3f}", rank=f"{rec['rank']:.3f}")
        if eval_split and tc.eval_every and step % tc.eval_every == 0 and step < s.total and s.rank == 0:
            evals.append(_validate(s, data, eval_split, step, cache_root))
        if ckpt is not None and s.rank == 0 and (step % max(1, tc.checkpoint_every) == 0 or step == stop_after):
            save_train_state(ckpt / "resume", step, s.raw_head, s.opt, s.sched,
                             {"history": history, "evals": evals, "config_key": s.key}, s.loss_params)
        if stop_after is not None and step >= stop_after:
            break
    if bar is not None:
        bar.close()
    finished = step >= s.total
    if finished and final_eval and eval_split and s.rank == 0:
        evals.append(_validate(s, data, eval_split, step, cache_root))
    s.raw_head.eval()
    if ckpt is not None and s.rank == 0 and finished:
        _save_final(s, ckpt, step, history, evals)
    return TrainResult(head=s.raw_head.cpu() if s.dev.type != "cpu" else s.raw_head, out_dir=ckpt, steps=step,
                       history=history, evals=evals, seconds=time.time() - t0, resumed_from=start)


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
    from ..launch import exit_entry

    exit_entry(main)
