"""Resumable training state of the NearID head: ``resume/step_XXXXXXX/`` folders (head, AdamW state,
learnable loss parameters and torch RNG in safetensors; step, scheduler and param groups in
``state.json``), written to a temporary folder and renamed, so a kill never leaves a torn one; and
:func:`config_key`, the hash that tells whether a saved state (or a finished run of
:mod:`nearid_lib.nearid.sweep`) belongs to a configuration.

Once a run has written its final head, :func:`finish_train_state` drops the weights and optimiser
state of its last step (three quarters of a run folder's bytes: a smoke head is 52 MB, its AdamW
moments twice that) and keeps ``state.json`` marked finished: the run's own ``head.safetensors``
is then what a resume of that folder loads, and nothing is left to step."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file

from ..config import profile_to_dict
from ..paths import out_dir
from ..runtime.code_closure import closure_fingerprint

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["save_train_state", "finish_train_state", "latest_state", "load_train_state", "config_key",
           "data_fingerprint", "run_key", "run_dir"]

FINAL_HEAD = "head.safetensors"     # the run folder's final head (models.checkpoint.HEAD_FILE)


def save_train_state(directory: Path, step: int, head, opt, sched, extra: dict | None = None,
                     loss_params=None) -> Path:
    """Atomically write ``directory/step_XXXXXXX`` (head, AdamW state, learnable loss parameters,
    RNG: safetensors; rest JSON)."""
    directory = Path(directory)
    final = directory / f"step_{step:07d}"
    tmp = directory / f".step_{step:07d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}, str(tmp / "head.safetensors"))
    osd = opt.state_dict()
    tensors = {"rng.torch": torch.get_rng_state()}
    for k, v in (loss_params.state_dict() if loss_params is not None else {}).items():
        tensors[f"loss.{k}"] = v.detach().contiguous().cpu()
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


def finish_train_state(directory: Path, step: int, extra: dict | None = None) -> Path:
    """Replace the states under ``directory`` (a run's ``resume/``) by a finished one at ``step``,
    once the run folder above it holds its final ``head.safetensors``: a ``step_XXXXXXX`` folder with
    only ``state.json`` (``"finished": true``, the step, ``extra``), written to a temporary folder
    and renamed before the older states go, so a kill at any point leaves a state that loads."""
    directory = Path(directory)
    if not (directory.parent / FINAL_HEAD).exists():
        raise FileNotFoundError(f"{directory.parent}: no final {FINAL_HEAD}; a run is finished once it is written")
    final = directory / f"step_{step:07d}"
    tmp = directory / f".step_{step:07d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "state.json").write_text(json.dumps({"step": step, "finished": True, **(extra or {})}, default=str))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in directory.glob("step_*"):
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest_state(directory: Path) -> Path | None:
    """The newest complete ``step_*`` folder under ``directory`` (None if there is none)."""
    d = Path(directory)
    cands = sorted(p for p in d.glob("step_*") if (p / "state.json").exists()) if d.exists() else []
    return cands[-1] if cands else None


def load_train_state(path: Path, head, opt, sched, loss_params=None) -> dict:
    """Restore head, optimiser, scheduler, learnable loss parameters and torch RNG from
    :func:`save_train_state`; returns state.json. A finished state (:func:`finish_train_state`)
    restores only the head, from the run folder's final ``head.safetensors``: no step is left to take."""
    path = Path(path)
    state = json.loads((path / "state.json").read_text())
    if state.get("finished"):
        head.load_state_dict(load_file(str(path.parent.parent / FINAL_HEAD)))
        return state
    head.load_state_dict(load_file(str(path / "head.safetensors")))
    tens = load_file(str(path / "optim.safetensors"))
    if loss_params is not None and len(loss_params):
        loss_params.load_state_dict({k[5:]: v for k, v in tens.items() if k.startswith("loss.")})
    per: dict[int, dict[str, Any]] = {}
    for k, v in tens.items():
        if k.startswith("opt."):
            _, pid, name = k.split(".", 2)
            per.setdefault(int(pid), {})[name] = v
    opt.load_state_dict({"state": per, "param_groups": state["param_groups"]})
    sched.load_state_dict(state["scheduler"])
    torch.set_rng_state(tens["rng.torch"])
    return state


def config_key(cfg: Profile) -> str:
    """A short hash of everything in ``cfg`` that changes a trained head (train, head, backbone, seed)."""
    d = profile_to_dict(cfg)
    part = {k: d[k] for k in ("name", "seed", "train", "head", "backbone", "world")}
    part["train"] = {k: v for k, v in part["train"].items() if k not in ("checkpoint_every", "eval_every")}
    return hashlib.sha1(json.dumps(part, sort_keys=True).encode()).hexdigest()[:12]


def data_fingerprint(data: NearIDData) -> str:
    """The dataset a head is trained and scored on: its manifest (which names profile, seed, counts
    and, for a built world, the world fingerprint), else the table files' sizes and mtimes."""
    root = Path(data.root)
    h = hashlib.sha1()
    man = root / "manifest.json"
    if man.exists():
        h.update(man.read_bytes())
    else:
        for rel in sorted(p.relative_to(root).as_posix() for p in root.rglob("*.csv")):
            st = (root / rel).stat()
            h.update(f"{rel}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:12]


# Where the code of a trained-and-scored run starts (its data, backbone, head, losses, batches,
# training loop, scoring); :func:`training_code` follows it (:mod:`nearid_lib.runtime.code_closure`), so
# tables, claims' verdicts, reports, curation and the other papers' packages are not in the key and
# editing them reuses finished runs. Dotted names: resolved when the key is computed, so this module
# imports none of them.
TRAINING_ROOTS = tuple(f"nearid_lib.{m}" for m in (
    "nearid.train", "nearid.group", "nearid.sweep", "nearid.evaluate", "features.stream",
    "nearid.train_inputs", "data.schema", "models.backbones", "models.map_head", "config"))


def training_code() -> str:
    """Fingerprint of the library modules on the training-and-scoring path (:data:`TRAINING_ROOTS`)."""
    return closure_fingerprint(*TRAINING_ROOTS)


def run_key(cfg: Profile, data: NearIDData) -> str:
    """What a reused training result (a resumed head, a finished sweep run) is keyed by: the
    configuration (:func:`config_key`), the data (:func:`data_fingerprint`) and the library code
    that trains and scores it (:func:`training_code`), so that a change of that code never serves a
    stale result and an edit elsewhere keeps it."""
    part = f"{config_key(cfg)}|{data_fingerprint(data)}|{training_code()}"
    return hashlib.sha1(part.encode()).hexdigest()[:12]


def run_dir(cfg: Profile, data: NearIDData, run_root: str | os.PathLike | None = None) -> Path:
    """The folder of the run ``cfg`` on ``data`` (``<out>/head_runs/<run key>``): where
    :func:`~nearid_lib.nearid.sweep.train_and_score` trains and looks for a finished run, and where
    ``python -m nearid_lib.nearid.train`` (e.g. under ``accelerate launch``) trains by default, so the
    notebooks reuse that training."""
    return (Path(run_root) if run_root is not None else out_dir(cfg.name) / "head_runs") / run_key(cfg, data)
