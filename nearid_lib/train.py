"""Training of the NearID MAP head on a frozen backbone (paper Section 4.1), cached or on the fly.

One training row = one anchor image a, its positives (the identity's other views, up to 2 slots) and
its distractors (one slot per training source: the distractor inpainted into the *anchor's* view, so
it shares the anchor's background). MTG part-edit pairs are interleaved as extra rows (anchor
image_1_original or image_2_original, positive = the other original, distractors = the anchor's own
part edit and, given a second slot, the positive's part edit, each with its oracle), repeated
``train.mtg_repeat`` times per epoch and flagged ``rank_only``: the loss forms only ranking terms for them (``nearid_lib.losses``: "rank_only rows").

Determinism and resumption: the rows of epoch e and their order come from ``make_rng(seed, ..., e)``,
and every random choice of step s (role-aware masking, token dropout, token crops, image
augmentations) from ``(seed, "step", s)``. Global step s is batch ``s % steps_per_epoch`` of epoch
``s // steps_per_epoch``. A run killed after a checkpoint therefore resumes to bit-identical
weights (tested in ``tests/test_train.py``).

Two feature modes:

* cached (``train.use_cache=True``, default): backbone tokens come from the
  :class:`~nearid_lib.features.TokenCache` of each image group and variant (``"full"`` and ``"fg"``:
  background blacked out, used for role-aware foreground masking, anchor 0.5 / positives 0.2 /
  distractors 0.6). Cheap augmentations act on the token grid: token dropout (in the head) and a
  random token-window crop (``train.token_crop``: a translation/scale proxy). A horizontal flip is
  deliberately absent: the MAP head has no position embedding, so a flipped grid pools identically.
  Colour jitter, flips and translation/scale of the pixels need the uncached mode.
* uncached (``train.use_cache=False``): images are loaded, masked by role, augmented
  (colour jitter, horizontal flip, random translation/scale) and run through the frozen backbone
  at every step. Without augmentation both modes see the same tokens (up to the cache's float16).

Multi-GPU: ``accelerate launch --num_processes N -m nearid_lib.train --profile paper``. Each rank takes
its equal slice of the global batch (``train.batch_size``) and the positives are all-gathered with
gradients (``distributed.gather_pool``) so the pool G spans the global batch, as in the paper.

CLI: ``python -m nearid_lib.train --profile mini [--set train.lr=3e-4 ...] [--out DIR] [--no-resume]``.

Checkpoints (``out_dir``): ``head.safetensors`` + ``head_config.json`` (``models.save_head`` with the
resolved config, loadable by ``load_encoder("nearid", checkpoint=out_dir)``), ``history.json``, and
``resume/step_XXXXXXX/`` (head, AdamW state and torch RNG in safetensors; step, scheduler and param
groups in ``state.json``), written to a temporary folder and renamed, so a kill never leaves a torn one.
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
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageEnhance

from .seeding import make_rng, torch_generator

__all__ = ["TrainRows", "ablation_setup", "epoch_rows", "steps_per_epoch", "build_head", "train_head", "TrainResult",
           "augment_image", "make_scheduler", "save_train_state", "load_train_state", "latest_state",
           "train_groups", "config_key", "train_and_score", "main"]

ROLE_P = ("mask_p_anchor", "mask_p_positive", "mask_p_distractor")


# --------------------------------------------------------------------------- rows
@dataclass
class TrainRows:
    """A table of training rows (numpy object arrays of relpaths; "" = empty slot)."""

    anchor: np.ndarray          # [n]
    anchor_mask: np.ndarray     # [n] mask relpath of the anchor (for "fg")
    positives: np.ndarray       # [n, P]
    pos_masks: np.ndarray       # [n, P]
    distractors: np.ndarray     # [n, K]
    dist_masks: np.ndarray      # [n, K]
    oracle: np.ndarray          # [n, K] float, NaN = unknown
    rank_only: np.ndarray       # [n] bool (MTG rows)

    def __len__(self) -> int:
        return len(self.anchor)

    def take(self, idx) -> "TrainRows":
        return TrainRows(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))


def _train_sources(data, cfg) -> list[str]:
    src = list(cfg.train.sources) if cfg.train.sources else list(data.train_sources)
    bad = [s for s in src if s not in data.distractors]
    if bad:
        raise KeyError(f"train.sources {bad} not in the dataset's sources {data.sources}")
    return src


def epoch_rows(data, cfg, epoch: int, split: str = "train") -> TrainRows:
    """The rows of ``epoch`` in training order (deterministic in ``(cfg.seed, epoch)``)."""
    seed = cfg.seed
    tc = cfg.train
    sources = _train_sources(data, cfg)
    K = max(1, len(sources))
    P = 2
    rows: list[tuple] = []
    if tc.use_nearid:
        sel = (data.positives["split"] == split).to_numpy()
        pos = data.positives[sel]
        dists = {s: data.distractors[s][sel] for s in sources}
        rng = make_rng(seed, "anchor-view", epoch)
        for j in range(len(pos)):
            r = pos.iloc[j]
            views = [k for k in (1, 2, 3) if r[f"img{k}"]]
            k = views[int(rng.integers(len(views)))]
            others = [v for v in views if v != k]
            p = [r[f"img{v}"] for v in others] + [""] * (P - len(others))
            pm = [r[f"mask{v}"] for v in others] + [""] * (P - len(others))
            d = [dists[s].iloc[j][f"nimg{k}"] for s in sources] + [""] * (K - len(sources))
            dm = [r[f"mask{k}"] if x else "" for x in d]
            rows.append((r[f"img{k}"], r[f"mask{k}"], p, pm, d, dm, [np.nan] * K, False))
    if tc.use_mtg and data.mtg is not None:
        m = data.mtg[data.mtg["split"] == split]
        for rep in range(int(tc.mtg_repeat)):
            # alternate which image is the anchor: both backgrounds get ranking terms
            a, b = (1, 2) if rep % 2 == 0 else (2, 1)
            for j in range(len(m)):
                r = m.iloc[j]
                # Distractors: the anchor's own part edit and, where there is a second slot, the
                # positive's part edit, each with its oracle (1 - |part|/|object|). Two oracle-scored
                # distractors per row are what gives the oracle-ranking variants (RankNet on
                # oracle-ordered pairs) a pair to rank; with one, that term would be empty.
                edits = [a, b][:K]
                rows.append((r[f"image_{a}_original"], r[f"image_{a}_object_mask"],
                             [r[f"image_{b}_original"]] + [""] * (P - 1),
                             [r[f"image_{b}_object_mask"]] + [""] * (P - 1),
                             [r[f"image_{e}_inpainted"] for e in edits] + [""] * (K - len(edits)),
                             [r[f"image_{e}_object_mask"] for e in edits] + [""] * (K - len(edits)),
                             [float(r[f"oracle_{e}"]) for e in edits] + [np.nan] * (K - len(edits)),
                             True))
    if not rows:
        raise ValueError(f"no training rows in split {split!r} (use_nearid={tc.use_nearid}, "
                         f"use_mtg={tc.use_mtg})")
    order = make_rng(seed, "order", epoch).permutation(len(rows))
    rows = [rows[i] for i in order]

    def col(i, dtype=object):
        return np.array([r[i] for r in rows], dtype=dtype)

    return TrainRows(col(0), col(1), col(2), col(3), col(4), col(5), col(6, float), col(7, bool))


def steps_per_epoch(n_rows: int, batch_size: int) -> int:
    """Full batches per epoch (the last partial batch is dropped: equal shards on every rank)."""
    return max(1, n_rows // batch_size)


def train_groups(data, cfg) -> list[str]:
    """The image groups (``evaluate.image_groups``) training reads."""
    from .evaluate import image_groups

    return image_groups(data, ("train",), _train_sources(data, cfg), mtg=cfg.train.use_mtg)


# --------------------------------------------------------------------------- augmentation
def augment_image(img: Image.Image, rng: np.random.Generator, jitter: float = 0.2, flip: bool = True,
                  max_shift: float = 0.08, scale: tuple[float, float] = (0.9, 1.1)) -> Image.Image:
    """Per-slot image augmentation of the uncached mode: colour jitter (brightness, contrast,
    saturation, each x U[1-jitter, 1+jitter]), horizontal flip (p=0.5), random translation
    (|shift| <= max_shift of the size) and isotropic scale, black fill outside."""
    w, h = img.size
    for enh in (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color):
        img = enh(img).enhance(float(rng.uniform(1 - jitter, 1 + jitter)))
    if flip and rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    s = float(rng.uniform(*scale))
    tx, ty = (float(v) for v in rng.uniform(-max_shift, max_shift, size=2) * (w, h))
    # inverse affine about the centre: output pixel (x,y) samples input ((x-cx-tx)/s+cx, ...)
    cx, cy = w / 2, h / 2
    coeffs = (1 / s, 0, cx - (cx + tx) / s, 0, 1 / s, cy - (cy + ty) / s)
    return img.transform((w, h), Image.AFFINE, coeffs, resample=Image.BILINEAR)


def _crop_masks(n: int, grid: int, n_tokens: int, p: float, rng: np.random.Generator) -> torch.Tensor:
    """Token-window crops [n, N] bool: with prob. p keep a random (grid-1)x(grid-1) window of the
    grid x grid token map (translation/scale proxy on cached tokens); else keep everything."""
    keep = np.ones((n, n_tokens), dtype=bool)
    if p <= 0 or grid * grid != n_tokens or grid < 3:
        return torch.from_numpy(keep)
    for i in np.flatnonzero(rng.random(n) < p):
        g = np.zeros((grid, grid), dtype=bool)
        y0, x0 = rng.integers(0, 2, size=2)
        g[y0:y0 + grid - 1, x0:x0 + grid - 1] = True
        keep[i] = g.ravel()
    return torch.from_numpy(keep)


# --------------------------------------------------------------------------- features
class _Features:
    """Backbone tokens for a list of (relpath, mask, variant) slots, cached or on the fly."""

    def __init__(self, encoder, data, cfg, profile, cache_root=None, progress=True):
        from .evaluate import Embedder

        self.cfg, self.data = cfg, data
        self.backbone = getattr(encoder, "backbone", encoder)
        self.emb = Embedder(self.backbone, data, profile=profile, cache_root=cache_root, progress=progress,
                            batch_size=cfg.backbone.batch_size, store_tokens=True)
        if cfg.train.use_cache:
            self.emb.build(train_groups(data, cfg), variants=("full", "fg"))

    def tokens(self, rels: Sequence[str], masks: Sequence[str], fg: np.ndarray,
               rng: np.random.Generator) -> torch.Tensor:
        n = len(rels)
        if self.cfg.train.use_cache:
            out = torch.empty(n, self.backbone.n_tokens, self.backbone.token_dim)
            for variant, sel in (("fg", np.flatnonzero(fg)), ("full", np.flatnonzero(~fg))):
                if len(sel):
                    out[torch.from_numpy(sel)] = self.emb.tokens([rels[i] for i in sel], variant)
            return out
        from .features import apply_variant

        imgs = []
        for i in range(n):
            im = self.data.image(rels[i])
            if fg[i]:
                im = apply_variant(im, self.data.mask(masks[i]), "fg")
            if self.cfg.train.augment:
                im = augment_image(im, rng)
            imgs.append(im)
        with torch.no_grad():
            return self.backbone(self.backbone.preprocess.batch(imgs)).tokens.float().cpu()


# --------------------------------------------------------------------------- model / optim
def build_head(cfg, token_dim: int, backbone=None):
    """A fresh :class:`MAPHead` from ``cfg.head`` (SigLIP backbones: a copy of their own MAP head when
    ``head.init_from_backbone``, as in the paper). Initialised from ``(cfg.seed, "head-init")``."""
    from .models import MAPHead

    hc = cfg.head
    if hc.init_from_backbone and backbone is not None and hasattr(backbone, "siglip_head"):
        return MAPHead.from_siglip(backbone.siglip_head, token_dropout=hc.token_dropout)
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


# --------------------------------------------------------------------------- checkpoints
def save_train_state(directory: Path, step: int, head, opt, sched, extra: dict | None = None) -> Path:
    """Atomically write ``directory/step_XXXXXXX`` (head, AdamW state, RNG: safetensors; rest JSON)."""
    from safetensors.torch import save_file

    directory = Path(directory)
    final = directory / f"step_{step:07d}"
    tmp = directory / f".step_{step:07d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}, str(tmp / "head.safetensors"))
    osd = opt.state_dict()
    tensors = {"rng.torch": torch.get_rng_state()}
    for pid, st in osd["state"].items():
        for k, v in st.items():
            tensors[f"opt.{pid}.{k}"] = (v if torch.is_tensor(v) else torch.tensor(v)).detach().contiguous().cpu()
    save_file(tensors, str(tmp / "optim.safetensors"))
    state = {"step": step, "param_groups": osd["param_groups"], "scheduler": sched.state_dict(),
             **(extra or {})}
    (tmp / "state.json").write_text(json.dumps(state, default=str))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in directory.glob("step_*"):        # keep only the newest
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest_state(directory: Path) -> Path | None:
    """The newest complete ``step_*`` folder under ``directory`` (None if there is none)."""
    d = Path(directory)
    cands = sorted(p for p in d.glob("step_*") if (p / "state.json").exists()) if d.exists() else []
    return cands[-1] if cands else None


def load_train_state(path: Path, head, opt, sched) -> dict:
    """Restore head, optimiser, scheduler and torch RNG from :func:`save_train_state`; returns state.json."""
    from safetensors.torch import load_file

    path = Path(path)
    head.load_state_dict(load_file(str(path / "head.safetensors")))
    state = json.loads((path / "state.json").read_text())
    tens = load_file(str(path / "optim.safetensors"))
    per: dict[int, dict[str, Any]] = {}
    for k, v in tens.items():
        if k.startswith("opt."):
            _, pid, name = k.split(".", 2)
            per.setdefault(int(pid), {})[name] = v
    opt.load_state_dict({"state": per, "param_groups": state["param_groups"]})
    sched.load_state_dict(state["scheduler"])
    torch.set_rng_state(tens["rng.torch"])
    return state


# --------------------------------------------------------------------------- training
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


def _slot_embed(head, feats: _Features, rels, masks, fg, rng, gen, dev, crop_p, amp) -> torch.Tensor:
    tok = feats.tokens(rels, masks, fg, rng).to(dev)                  # [S, N, D]
    n_tok = tok.shape[1]
    grid = int(round(math.sqrt(n_tok)))
    tmask = _crop_masks(len(rels), grid, n_tok, crop_p, rng).to(dev)
    with amp:
        e = head(tok, token_mask=tmask, generator=gen)
    return F.normalize(e.float(), dim=-1)


def _amp(cfg, dev):
    mp = cfg.train.mixed_precision
    if mp == "no":
        return torch.autocast(dev.type, enabled=False)
    if mp == "fp16" and dev.type != "cuda":
        return torch.autocast(dev.type, enabled=False)       # fp16 autocast is a GPU feature
    return torch.autocast(dev.type, dtype=torch.float16 if mp == "fp16" else torch.bfloat16)


def train_head(cfg, data, encoder=None, out_dir: str | os.PathLike | None = None, resume: bool = True,
               stop_after: int | None = None, progress: bool = True, eval_split: str | None = "val",
               cache_root=None, log_every: int = 10, final_eval: bool = True) -> TrainResult:
    """Train a MAP head on ``data`` with ``cfg.train`` / ``cfg.head`` (a resolved Profile).

    Args:
        encoder: the frozen backbone (default: ``load_encoder(cfg.backbone.name, tiny=...)``).
        out_dir: checkpoint folder (None: no checkpoints, no resumption).
        resume: continue from the newest ``out_dir/resume/step_*`` if present.
        stop_after: stop after this global step (simulates a kill in tests; a checkpoint is written).
        eval_split: validation split scored every ``train.eval_every`` steps (0: only at the end).
    Returns:
        :class:`TrainResult` (the head is in eval mode, on CPU).
    """
    from . import distributed, losses
    from .evaluate import Embedder, evaluate_split
    from .models import save_head

    t0 = time.time()
    tc = cfg.train
    if encoder is None:
        from .models import load_backbone

        encoder = load_backbone(cfg)[0]
    backbone = getattr(encoder, "backbone", encoder)
    accel = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from accelerate import Accelerator

        accel = Accelerator(mixed_precision=tc.mixed_precision if torch.cuda.is_available() else "no")
    dev = accel.device if accel is not None else (
        torch.device("cuda") if cfg.device in ("auto", "cuda") and torch.cuda.is_available() else torch.device("cpu"))
    world, rank = distributed.world_size(), distributed.rank()
    feats = _Features(backbone, data, cfg, cfg.name, cache_root=cache_root, progress=progress and rank == 0)

    rows0 = epoch_rows(data, cfg, 0)
    B = min(int(tc.batch_size), len(rows0))
    if B % world:
        raise ValueError(f"global batch {B} is not divisible by the {world} processes")
    spe = steps_per_epoch(len(rows0), B)
    total = int(tc.epochs) * spe if tc.max_steps is None else int(tc.max_steps)
    head = build_head(cfg, backbone.token_dim, backbone).to(dev)
    loss_params = losses.make_loss_parameters(tc.loss, cfg).to(dev)
    opt = torch.optim.AdamW(list(head.parameters()) + list(loss_params.parameters()), lr=tc.lr,
                            weight_decay=tc.weight_decay)
    sched = make_scheduler(opt, int(tc.warmup_steps), total)
    ckpt = Path(out_dir) if out_dir is not None else None
    start, history, evals = 0, [], []
    key = config_key(cfg)
    if ckpt is not None and resume and (st := latest_state(ckpt / "resume")) is not None:
        if json.loads((st / "state.json").read_text()).get("config_key") == key:
            state = load_train_state(st, head, opt, sched)
            start, history, evals = int(state["step"]), state.get("history", []), state.get("evals", [])
        else:   # a different configuration trained here before: start over instead of mixing runs
            shutil.rmtree(ckpt / "resume", ignore_errors=True)
    resumed_from = start
    if accel is not None:
        head, opt = accel.prepare(head, opt)
    raw_head = accel.unwrap_model(head) if accel is not None else head
    amp = _amp(cfg, dev)
    role_p = [getattr(tc, k) for k in ROLE_P]
    crop_p = float(tc.token_crop) if tc.use_cache and tc.augment else 0.0

    def run_eval(step: int) -> dict:
        raw_head.eval()
        emb = Embedder(backbone, data, head=raw_head, profile=cfg.name, cache_root=cache_root, progress=False,
                       batch_size=cfg.backbone.batch_size, store_tokens=True)
        row = {"step": step, "split": eval_split, **evaluate_split(emb, data, eval_split)}
        raw_head.train()
        return row

    bar = None
    if progress and rank == 0:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=start, desc=f"train {tc.loss}", unit="step")
    head.train()
    cur_epoch, rows = -1, None
    step = start
    while step < total:
        t_step = time.perf_counter()
        epoch, b = divmod(step, spe)
        if epoch != cur_epoch:
            rows, cur_epoch = (rows0 if epoch == 0 else epoch_rows(data, cfg, epoch)), epoch
        lo = b * B + rank * (B // world)
        batch = rows.take(np.arange(lo, lo + B // world))
        rng = make_rng(cfg.seed, "step", step, rank)
        gen = torch_generator(cfg.seed, "dropout", step, rank)
        if dev.type != "cpu":
            gen = None
        n, P, K = len(batch), batch.positives.shape[1], batch.distractors.shape[1]
        # flatten every valid slot into one head batch: anchors, then positives, then distractors
        pm = batch.positives != ""
        dm = batch.distractors != ""
        rels = list(batch.anchor) + list(batch.positives[pm]) + list(batch.distractors[dm])
        msks = list(batch.anchor_mask) + list(batch.pos_masks[pm]) + list(batch.dist_masks[dm])
        roles = np.repeat([0, 1, 2], [n, int(pm.sum()), int(dm.sum())])
        u = rng.random(len(rels))
        fg = u < np.asarray(role_p)[roles]
        e = _slot_embed(head, feats, rels, msks, fg, rng, gen, dev, crop_p, amp)   # [S, E]
        E = e.shape[1]
        a = e[:n]
        pos = e.new_zeros(n, P, E)
        pos[torch.from_numpy(pm).to(dev)] = e[n:n + int(pm.sum())]
        dis = e.new_zeros(n, K, E)
        dis[torch.from_numpy(dm).to(dev)] = e[n + int(pm.sum()):]
        pmask, dmask = torch.from_numpy(pm).to(dev), torch.from_numpy(dm).to(dev)
        pool = distributed.gather_pool(a, pos, pmask)
        loss, parts = losses.compute_loss(
            tc.loss, a, pos, dis, pmask, dmask, cfg,
            dist_oracle=torch.from_numpy(batch.oracle).to(dev, torch.float32),
            rank_only=torch.from_numpy(batch.rank_only).to(dev), pool=pool,
            params=loss_params if len(loss_params) else None)
        opt.zero_grad(set_to_none=True)
        if accel is not None:
            accel.backward(loss)
        else:
            loss.backward()
        opt.step()
        sched.step()
        step += 1
        rec = {"step": step, "epoch": epoch, "loss": float(loss.detach()), "lr": float(sched.get_last_lr()[0]),
               **{k: float(v) for k, v in parts.items()}, "seconds": time.perf_counter() - t_step}
        history.append(rec)
        if bar is not None:
            bar.update(1)
            if step % max(1, log_every) == 0:
                bar.set_postfix(loss=f"{rec['loss']:.3f}", rank=f"{rec['rank']:.3f}")
        if eval_split and tc.eval_every and step % tc.eval_every == 0 and step < total and rank == 0:
            evals.append(run_eval(step))
        if ckpt is not None and rank == 0 and (step % max(1, tc.checkpoint_every) == 0 or step == stop_after):
            save_train_state(ckpt / "resume", step, raw_head, opt, sched,
                             {"history": history, "evals": evals, "config_key": key})
        if stop_after is not None and step >= stop_after:
            break
    if bar is not None:
        bar.close()
    finished = step >= total
    if finished and final_eval and eval_split and rank == 0:
        evals.append(run_eval(step))
    raw_head.eval()
    if ckpt is not None and rank == 0 and finished:
        from .config import profile_to_dict

        save_head(raw_head, ckpt, backbone={"name": backbone.name, "tiny": bool(backbone.tiny),
                                            "image_size": int(backbone.image_size)},
                  config=profile_to_dict(cfg), step=step, final_eval=evals[-1] if evals else None)
        from .io_utils import write_json

        write_json({"history": history, "evals": evals}, ckpt / "history.json")
        write_json(profile_to_dict(cfg), ckpt / "config.json")
    return TrainResult(head=raw_head.cpu() if dev.type != "cpu" else raw_head, out_dir=ckpt, steps=step,
                       history=history, evals=evals, seconds=time.time() - t0, resumed_from=resumed_from)


# --------------------------------------------------------------------------- helpers for notebooks
def config_key(cfg) -> str:
    """A short hash of everything in ``cfg`` that changes a trained head (train, head, backbone, seed)."""
    import hashlib

    from .config import profile_to_dict

    d = profile_to_dict(cfg)
    part = {k: d[k] for k in ("name", "seed", "train", "head", "backbone", "world")}
    part["train"] = {k: v for k, v in part["train"].items() if k not in ("checkpoint_every", "eval_every")}
    return hashlib.sha1(json.dumps(part, sort_keys=True).encode()).hexdigest()[:12]


def train_and_score(cfg, data, encoder=None, splits: Sequence[str] = ("val", "test"),
                    run_root: str | os.PathLike | None = None, reuse: bool = True, progress: bool = False,
                    cache_root=None, label: str = "") -> dict:
    """Train a head with ``cfg`` and score it on ``splits`` (``evaluate.summary_row`` per split).

    Results (scores.json + the head) go to ``run_root/<config_key(cfg)>/``; with ``reuse`` an identical
    configuration is not trained twice (notebooks 05/06/07 share e.g. the default L_NearID run).
    Returns ``{"key", "label", "seconds", "steps", "final_loss", "<split>": summary_row}``."""
    from .evaluate import Embedder, evaluate_split
    from .io_utils import write_json
    from .models import save_head
    from .paths import out_dir

    key = config_key(cfg)
    root = Path(run_root) if run_root is not None else out_dir(cfg.name) / "head_runs"
    d = root / key
    if reuse and (d / "scores.json").exists():
        got = json.loads((d / "scores.json").read_text())
        if all(s in got for s in splits):
            got["label"] = label or got.get("label", "")
            got["reused"] = True
            return got
    from .models import load_backbone

    encoder = encoder if encoder is not None else load_backbone(cfg)[0]
    res = train_head(cfg, data, encoder, out_dir=None, progress=progress, eval_split=None, cache_root=cache_root)
    backbone = getattr(encoder, "backbone", encoder)
    emb = Embedder(backbone, data, head=res.head, profile=cfg.name, cache_root=cache_root, progress=progress,
                   batch_size=cfg.backbone.batch_size, store_tokens=True)
    out = {"key": key, "label": label, "seconds": res.seconds, "steps": res.steps,
           "final_loss": float(np.mean([h["loss"] for h in res.history[-10:]])), "reused": False}
    for s in splits:
        out[s] = evaluate_split(emb, data, s)
    save_head(res.head, d, backbone={"name": backbone.name, "tiny": bool(backbone.tiny),
                                     "image_size": int(backbone.image_size)}, label=label)
    write_json(out, d / "scores.json")
    return out


# --------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nearid_lib.train --profile mini [--set key=value ...] [--out DIR] [--no-resume]``."""
    from .config import get_profile
    from .data import load_nearid, nearid_root
    from .paths import checkpoint_dir

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="mini")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="dotted config override, e.g. train.lr=3e-4 (repeatable)")
    ap.add_argument("--data", default=None, help="dataset root (default data_dir(profile)/nearid)")
    ap.add_argument("--out", default=None, help="checkpoint folder (default checkpoint_dir(profile)/nearid)")
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
    torch.set_num_threads(max(1, min(torch.get_num_threads(), os.cpu_count() or 1)))
    data = load_nearid(args.data or nearid_root(cfg.name))
    out = Path(args.out) if args.out else checkpoint_dir(cfg.name) / "nearid"
    res = train_head(cfg, data, out_dir=out, resume=not args.no_resume, stop_after=args.stop_after)
    if res.evals:
        print(json.dumps(res.evals[-1], indent=1, default=float))
    print(f"trained {res.steps} steps in {res.seconds:.1f}s -> {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


def ablation_setup(profile: str, seed: int, notebook: str):
    """Shared setup of the ablation notebooks (05/06/07): the resolved profile (seeded), run
    metadata, the dataset, the frozen backbone and the step budget every head gets
    (``train.ablation_steps``, else ``train.max_steps``). Returns ``(cfg, data, backbone, steps)``."""
    from .config import get_profile
    from .data import build_world, load_nearid, nearid_root
    from .paths import results_dir
    from .runmeta import write_run_metadata
    from .seeding import seed_everything

    cfg = get_profile(profile, seed=seed)
    seed_everything(seed)
    steps = cfg.train.ablation_steps or cfg.train.max_steps
    write_run_metadata(results_dir(profile, notebook), {"PROFILE": profile, "SEED": seed, "steps": steps}, cfg)
    data = load_nearid(build_world(cfg) if cfg.world.source == "procedural" else nearid_root(profile))
    from .models import load_backbone

    return cfg, data, load_backbone(cfg)[0], steps
