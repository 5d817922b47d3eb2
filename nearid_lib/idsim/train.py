"""ID-Sim training (paper 001, Sec. 3.2-3.3, App. A and C) on a NearID-schema dataset.

Loss: CLS InfoNCE (anchor, its positive, one hard negative + the batch's other positives and hard
negatives) + lambda * the same InfoNCE with similarity = -Sinkhorn distance between L2-normalised
projected patch-token sets (:func:`nearid_lib.idsim.losses.idsim_loss`). AdamW (lr 3e-4, wd 0),
micro-batch 8, gradient accumulation 4, ``cfg.idsim.epochs`` epochs capped by ``cfg.idsim.max_steps``
(optimizer steps), bf16 autocast on CUDA.

Training triplets, mixed 1:1:1 from real instance pairs (S1), identity-preserving context edits
(S2a) and identity-altering edits as hard negatives (S2b): :mod:`nearid_lib.idsim.triplets`, over
instances drawn with the balanced sampling of App. A.1 (:mod:`nearid_lib.idsim.sampling`; the mini
world's "datasets" are its object classes).

Cached mode (CNN backbones, see :mod:`nearid_lib.idsim.model`): the frozen prefix features of
every image are computed once (:class:`~nearid_lib.idsim.prefix.PrefixStore`). Augmentations
(App. C.4: random resized crop scale 0.9-1 aspect 1 bicubic; colour jitter 0.2/0.2/0.08 p=0.8;
Gaussian blur 7x7 sigma 0.05-0.6 p=0.5, :func:`~nearid_lib.idsim.sampling.augment`) are applied to
the pixels *before* caching: each image is cached as its clean version plus ``cfg.idsim.aug_variants`` augmented draws, and every use of an image picks one
of them at random. The paper's "mild generative noise on anchor/positive when the negative is an
edit" has no analogue here (procedural fills leave no generator artefacts) and is not applied.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pandas as pd
import torch

from ..runtime.code_closure import closure_fingerprint
from ..features import dataset_scope
from ..io_utils import current_umask, write_csv, write_json
from ..runtime.seeding import derive_seed, make_rng
from .losses import idsim_loss
from .model import IDSimSpec, build_idsim, is_idsim_checkpoint, load_idsim, save_idsim
from .prefix import PrefixStore, frozen_embeddings
from .sampling import balanced_instances
from .triplets import build_triplets

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["idsim_seeds", "train_idsim_seeds", "idsim_spec", "train_step_batch", "training_store", "train_idsim",
           "TrainedRuns", "TRAINING_ROOTS"]


def idsim_spec(cfg: Profile) -> IDSimSpec:
    """The :class:`~nearid_lib.idsim.model.IDSimSpec` of a profile's ``idsim`` section."""
    return IDSimSpec.from_config(cfg.idsim)


def train_step_batch(model, feats: torch.Tensor, B: int, cfg: Profile) -> tuple[torch.Tensor, dict]:
    """Loss of one micro-batch: ``feats`` [3B, ...] = anchors, positives, negatives (prefix
    features). Returns (loss, parts)."""
    c = cfg.idsim
    use_bf16 = c.mixed_precision == "bf16" and feats.is_cuda
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_bf16):
        out = model.from_prefix(feats)
    cls, tok = out.pooled.float(), out.tokens.float()
    return idsim_loss(cls[:B], cls[B:2 * B], cls[2 * B:], tok[:B], tok[B:2 * B], tok[2 * B:],
                      lam=c.lam, temperature=c.temperature, blur=c.sinkhorn_blur, objective=c.objective,
                      patch_metric=c.patch_metric, cls_weight=c.cls_weight)



def training_store(cfg: Profile, data: NearIDData, model, path=None, seed: int | None = None) -> PrefixStore:
    """The prefix store of a profile's training images: ``idsim.aug_variants`` augmented copies per
    image when ``idsim.augment``. ``seed`` fixes the augmentation and context-edit draws (default the
    profile's seed); several training seeds may share one store (the images are then the same, the
    instances, triplets, order and initialisation differ)."""
    c = cfg.idsim
    return PrefixStore(model, data, n_variants=c.aug_variants if c.augment else 0,
                       seed=int(cfg.seed if seed is None else seed), batch_size=c.cache_batch_size, path=path)


def _cache_triplets(cfg: Profile, data: NearIDData, model, store: PrefixStore, log) -> tuple:
    """Instances (balanced, or the raw skewed pool), their triplets (hard negatives mined in the
    frozen space) and the prefix features of every image they use: ``(instances, triplets, seconds)``."""
    c, seed = cfg.idsim, int(cfg.seed)
    t0 = time.time()
    ids = data.identities[data.identities.split == "train"]
    inst = balanced_instances(ids, c.n_instances, make_rng(seed, "idsim-balance"), balanced=c.balanced,
                              shares=c.unbalanced_shares)

    def embed(keys):
        store.ensure(keys, [0])
        return frozen_embeddings(model, store, keys)

    trip = build_triplets(data, inst, c.n_triplets, make_rng(seed, "idsim-triplets"), embed,
                          mix=c.mix, label_noise=c.label_noise)
    all_keys = list(dict.fromkeys(trip[["anchor", "positive", "negative"]].to_numpy().ravel().tolist()))
    n0 = store.n_computed
    store.ensure(all_keys, progress=True)
    store.save()
    t_cache = time.time() - t0
    log(f"idsim: {len(inst)} instances, {len(trip)} triplets, {len(all_keys)} images "
        f"x {store.V + 1} variants ready in {t_cache:.1f}s ({store.n_computed - n0} computed)")
    return inst, trip, t_cache


def _total_steps(cfg: Profile, n_triplets: int) -> tuple[int, int]:
    """``(optimiser steps, micro-batches per epoch)``: epochs of full micro-batches over gradient
    accumulation, capped by ``idsim.max_steps``."""
    c = cfg.idsim
    B, accum = int(c.batch_size), max(1, int(c.grad_accum))
    n_micro_epoch = n_triplets // B
    if n_micro_epoch == 0:
        raise ValueError(f"train_idsim: {n_triplets} triplets < batch size {B}")
    total_steps = (n_micro_epoch * int(c.epochs)) // accum
    if c.max_steps is not None:
        total_steps = min(total_steps, int(c.max_steps))
    return total_steps, n_micro_epoch


def _optimise(cfg: Profile, model, trip: pd.DataFrame, store: PrefixStore, log) -> list[dict]:
    """AdamW over the LoRA adapters and heads: micro-batches of ``idsim.batch_size`` triplets in a
    seeded order (``make_rng(seed, "idsim-train")``), each image in a random cached variant, one
    optimiser step every ``idsim.grad_accum`` micro-batches. Returns one history row per step."""
    c = cfg.idsim
    opt = torch.optim.AdamW(model.trainable_parameters(), lr=c.lr, weight_decay=c.weight_decay)
    B, accum = int(c.batch_size), max(1, int(c.grad_accum))
    total_steps, n_micro_epoch = _total_steps(cfg, len(trip))
    rng = make_rng(int(cfg.seed), "idsim-train")
    hist, step, micro = [], 0, 0
    model.train()
    t1 = time.time()
    opt.zero_grad(set_to_none=True)
    while step < total_steps:
        order = rng.permutation(len(trip))
        for j in range(n_micro_epoch):
            rows = trip.iloc[order[j * B:(j + 1) * B]]
            keys = rows["anchor"].tolist() + rows["positive"].tolist() + rows["negative"].tolist()
            var = rng.integers(0, store.V + 1, size=len(keys)).tolist()
            feats = store.get(keys, var).to(model.device)          # [3B, C, h, w]
            loss, parts = train_step_batch(model, feats, B, cfg)
            (loss / accum).backward()
            micro += 1
            if micro % accum:
                continue
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            hist.append({"step": step, "loss": float(loss.detach()), "cls": float(parts["cls"]),
                         "patch": float(parts["patch"]), "seconds": time.time() - t1})
            if step % max(1, total_steps // 10) == 0 or step == total_steps:
                log(f"idsim step {step}/{total_steps} loss {hist[-1]['loss']:.3f} "
                    f"(cls {hist[-1]['cls']:.3f}, patch {hist[-1]['patch']:.3f})")
            if step >= total_steps:
                break
    model.eval()
    return hist


def train_idsim(cfg: Profile, data: NearIDData, model=None, store_path: str | Path | None = None,
                log: Callable[[str], None] = print, device: str = "cpu", store: PrefixStore | None = None
                ) -> dict[str, Any]:
    """Train ID-Sim on the train split of ``data`` with profile ``cfg`` (its seed: instances,
    triplets, initialisation, order).

    ``store``: a :func:`training_store` of a model with the same frozen prefix to share (several
    seeds / ablation rows over one cache); otherwise one is made (persisted at ``store_path``).
    Returns dict: ``model``, ``history`` (DataFrame: step, loss, cls, patch, seconds),
    ``triplets`` (DataFrame), ``instances`` (DataFrame), ``store`` (PrefixStore),
    ``timings`` (seconds of caching / training), ``n_steps``."""
    torch.manual_seed(derive_seed("idsim-init", base=int(cfg.seed)))
    model = model or build_idsim(idsim_spec(cfg), device=device)
    if store is None:
        store = training_store(cfg, data, model, store_path)
    elif store.model.cache_key() != model.cache_key():
        raise ValueError(f"train_idsim: the shared store holds {store.model.cache_key()!r} features, "
                         f"the model needs {model.cache_key()!r}")
    else:
        store.model = model             # same frozen prefix: compute any missing feature with this model
    inst, trip, t_cache = _cache_triplets(cfg, data, model, store, log)
    # the training's torch draws (LoRA dropout) start from the seed, whether the model was built
    # here or passed in: one recipe and seed is one model (TrainedRuns reuses it across cells)
    torch.manual_seed(derive_seed("idsim-init", base=int(cfg.seed)))
    t1 = time.time()
    hist = _optimise(cfg, model, trip, store, log)
    return {"model": model, "history": pd.DataFrame(hist), "triplets": trip, "instances": inst,
            "store": store, "timings": {"cache_s": t_cache, "train_s": time.time() - t1},
            "n_steps": hist[-1]["step"] if hist else 0}


def idsim_seeds(cfg: Profile) -> list[int]:
    """The training seeds of the ID-Sim model: ``idsim.n_seeds`` consecutive seeds from the profile's."""
    return [int(cfg.seed) + i for i in range(max(1, int(cfg.idsim.n_seeds)))]


class TrainedRuns:
    """The finished :func:`train_idsim` results of one notebook, so that a recipe trained twice (a
    LoRA placement candidate that becomes the model, the baseline row of an ablation table, the
    ``lam = 0`` model of Table 2b and Supp. Table 8's CLS-only row) trains once.

    A run is keyed by everything that decides it: the profile's whole ``idsim`` section, the
    training seed, the seed of the prefix store's augmentation draws, the dataset and the device
    (:meth:`key`); :func:`train_idsim` reads nothing else of the profile, and it seeds torch itself
    before the model is built and again before the first step, so the same key gives the same
    model. ``trained`` counts the trainings run here, ``reused`` the lookups served.

    ``path`` (a folder): every finished run is also written there (:meth:`run_dir`: the model as
    :func:`~nearid_lib.idsim.model.save_idsim`, its history, triplets and instances; one folder
    renamed into place when complete), keyed as well by the library code that trains it, so a
    rerun of the notebook, or one that was killed, loads the runs already finished instead of
    training them again, and an edit of that code never serves a stale one. A loaded run's prefix
    store is the training store under ``store_path`` (as :func:`training_store` makes it)."""

    def __init__(self, path: str | Path | None = None, store_path: str | Path | None = None) -> None:
        self._runs: dict[str, dict[str, Any]] = {}
        self.path = Path(path) if path is not None else None
        self.store_path = store_path
        self.trained = 0
        self.reused = 0
        self.loaded = 0
        self._code: str | None = None       # the training code's fingerprint, hashed once per instance

    @staticmethod
    def key(cfg: Profile, data: NearIDData, store_seed: int, device: str = "cpu") -> str:
        """The identity of a training run (see the class)."""
        return repr((cfg.idsim, int(cfg.seed), int(store_seed), dataset_scope(data), str(device)))

    def run_dir(self, cfg: Profile, data: NearIDData, store_seed: int, device: str = "cpu") -> Path | None:
        """The folder of a run under ``path`` (None without one): a hash of :meth:`key` and of the
        library code on the training path (:data:`TRAINING_ROOTS`)."""
        if self.path is None:
            return None
        if self._code is None:
            self._code = closure_fingerprint(*TRAINING_ROOTS)
        part = f"{self.key(cfg, data, store_seed, device)}|{self._code}"
        return self.path / hashlib.sha1(part.encode()).hexdigest()[:16]

    def lookup(self, cfg: Profile, data: NearIDData, store_seed: int, device: str = "cpu") -> dict[str, Any] | None:
        """The finished run of this key (in memory, else under ``path``), or None."""
        k = self.key(cfg, data, store_seed, device)
        res = self._runs.get(k)
        d = self.run_dir(cfg, data, store_seed, device) if res is None else None
        if d is not None and (d / "run.json").exists():
            res = self._runs[k] = self._load(d, cfg, data, store_seed, device)
            self.loaded += 1
        self.reused += res is not None
        return res

    def add(self, cfg: Profile, data: NearIDData, store_seed: int, res: dict[str, Any], device: str = "cpu") -> None:
        """Record a finished :func:`train_idsim` result under its key (and write it under ``path``)."""
        k = self.key(cfg, data, store_seed, device)
        self._runs[k] = res
        self.trained += 1
        d = self.run_dir(cfg, data, store_seed, device)
        if d is not None:
            _write_run(d, res, k)

    def train(self, cfg: Profile, data: NearIDData, store: PrefixStore | None = None,
              store_path: str | Path | None = None, log: Callable[[str], None] = print,
              device: str = "cpu") -> dict[str, Any]:
        """:func:`train_idsim` (arguments as there; ``store_path`` defaults to the instance's), or the
        finished run of the same key."""
        store_seed = int(cfg.seed) if store is None else int(store.seed)
        res = self.lookup(cfg, data, store_seed, device)
        if res is None:
            res = train_idsim(cfg, data, store=store, store_path=store_path or self.store_path, log=log,
                              device=device)
            self.add(cfg, data, store_seed, res, device)
        return res

    def _load(self, d: Path, cfg: Profile, data: NearIDData, store_seed: int, device: str) -> dict[str, Any]:
        model = load_idsim(d, device=device)[0].eval()
        meta = json.loads((d / "run.json").read_text())
        frames = {name: pd.read_csv(d / f"{name}.csv") for name in ("history", "triplets", "instances")}
        store = training_store(cfg, data, model, self.store_path, seed=store_seed)
        return {"model": model, **frames, "store": store, "timings": meta["timings"], "n_steps": meta["n_steps"],
                "loaded_from": str(d)}


# where the code of an ID-Sim training starts (TrainedRuns keys its saved runs by the library modules
# these reach, nearid_lib.runtime.code_closure); dotted names, resolved when a key is computed
TRAINING_ROOTS = tuple(f"nearid_lib.{m}" for m in ("idsim.train", "data.schema"))


def _write_run(d: Path, res: dict[str, Any], key: str) -> None:
    """Write a finished run into folder ``d``: built beside it, renamed into place when complete
    (a killed job leaves no half run that a later lookup would read)."""
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{d.name}.", dir=d.parent))
    try:
        save_idsim(res["model"], tmp)
        for name in ("history", "triplets", "instances"):
            write_csv(res[name], tmp / f"{name}.csv")
        write_json({"key": key, "n_steps": int(res["n_steps"]), "timings": res["timings"]}, tmp / "run.json")
        if is_idsim_checkpoint(d):          # another process finished the same run first
            return
        os.chmod(tmp, 0o777 & ~current_umask())       # mkdtemp's private 0700 would hide the run from the group
        os.replace(tmp, d)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def train_idsim_seeds(cfg: Profile, data: NearIDData, store_path: str | Path | None = None,
                      log: Callable[[str], None] = print, device: str = "cpu",
                      trained: TrainedRuns | None = None) -> list[dict[str, Any]]:
    """:func:`train_idsim` once per seed of :func:`idsim_seeds` (the profile's seed first), all over
    the first one's prefix cache (same images; instances, triplets, order and initialisation follow
    each seed). ``trained``: runs already finished this session (reused, and the new ones added).
    Returns train_idsim's dicts with ``seed`` added."""
    trained = trained if trained is not None else TrainedRuns()
    out = []
    for s in idsim_seeds(cfg):
        rc = replace(cfg, seed=int(s))
        res = trained.train(rc, data, store_path=store_path, log=log, device=device,
                            store=out[0]["store"] if out else None)
        out.append({**res, "seed": int(s)})
    return out
