"""Ablation sweeps of the NearID head (notebooks 05-07: Tables 3, 6, 8, 9, 10): train a head per
configuration with the same step budget and score it, reusing any configuration already trained."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..data import load_profile_data
from ..io_utils import write_json
from ..models import load_backbone, save_head
from ..paths import out_dir
from .checkpoints import config_key
from .embedder import Embedder
from .evaluate import evaluate_split
from .train import train_head

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData
    from ..models import Encoder

__all__ = ["ablation_steps", "ablation_inputs", "train_and_score"]


def ablation_steps(cfg: Profile) -> int | None:
    """The step budget every head of an ablation gets: ``train.ablation_steps``, else ``train.max_steps``."""
    return cfg.train.ablation_steps or cfg.train.max_steps


def ablation_inputs(cfg: Profile) -> tuple[NearIDData, Encoder, int | None]:
    """What every ablation notebook (05-07) starts from: the profile's dataset (the world built or
    resumed first), its frozen backbone and :func:`ablation_steps`."""
    data = load_profile_data(cfg)
    return data, load_backbone(cfg)[0], ablation_steps(cfg)


def train_and_score(cfg: Profile, data: NearIDData, encoder=None, splits: Sequence[str] = ("val", "test"),
                    run_root: str | os.PathLike | None = None, reuse: bool = True, progress: bool = False,
                    cache_root=None, label: str = "") -> dict:
    """Train a head with ``cfg`` and score it on ``splits`` (``evaluate.summary_row`` per split).

    Results (scores.json + the head) go to ``run_root/<config_key(cfg)>/``; with ``reuse`` an identical
    configuration is not trained twice (notebooks 05/06/07 share e.g. the default L_NearID run).
    Returns ``{"key", "label", "seconds", "steps", "final_loss", "<split>": summary_row}``."""
    key = config_key(cfg)
    root = Path(run_root) if run_root is not None else out_dir(cfg.name) / "head_runs"
    d = root / key
    if reuse and (d / "scores.json").exists():
        got = json.loads((d / "scores.json").read_text())
        if all(s in got for s in splits):
            got["label"] = label or got.get("label", "")
            got["reused"] = True
            return got
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
