"""The preflight's machine check: the environment variables the steps need, free disk against the
run's projected outputs, visible GPUs against the judge's and the trainer's memory.

**Disk** (:func:`disk_plan`; formulas in docs/paper-profile.md, "Disk"): per output and its folder,
bytes still to write, summed per file system and compared with its free space:

- materialised images (``$NEARID_DATA``): every view of the positives plus one distractor per
  source, PNG at zlib level ``world.png_compress``: ``views x (1 + sources) x W x H x 3 x``
  :data:`PNG_RATIO` (W x H from the release's ``size1`` column where it has one, else
  ``world.image_size``), masks ``views x W x H x`` :data:`MASK_RATIO`; nothing once the dataset is
  complete;
- the token store (``$NEARID_CACHE``, ``train.token_store``): grids ``x`` tokens ``x`` bytes per
  token (int8: width + a float32 scale; float16: 2 x width), tokens ``(backbone.image_size //
  patch)^2`` and width from the backbone's ``config.json`` in the mirror; grids = training views x
  (1 + training sources) + val/test views x (1 + sources), both variants (full and FG-only) when
  ``eval.fg_only``: an upper bound (training fills the store lazily; MTG's few hundred images left
  out); less what the store already holds;
- the ``datasets`` cache (``HF_DATASETS_CACHE``): ``load_dataset("parquet", ...)`` writes an arrow copy
  of every parquet dataset the run reads (the positives, MTG, Subjects2k, Stanford Cars): their bytes
  in the mirror (a copy already built is reused, so this over-counts a second run).

**GPUs**: every step of the resource ledger (:mod:`nearid_lib.steps.ledger`: curation, prefill, the
head trainings, the judge at every scale over NearID-bench, MTG and DreamBench++, ID-Sim's MLLM row,
FPR's generators, DreamBooth, background removal, the galleries) placed on the visible GPUs by the
one placement rule (:func:`nearid_lib.steps.placement.plan_replicas`) with its items counted from the
release as the data check read it: the plan printed here is the one ``nearid plan`` prints and the
one the steps run; a step no GPU group holds is a problem, named with its numbers.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from .. import hub
from ..data.schema import is_complete
from ..paths import cache_dir, data_dir, downloads_dir
from ..run import ALLOW_CPU_ENV
from ..steps import Sizes, plan_run, visible_gpus
from .findings import Report
from .repos import vision_geometry

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["check_machine", "disk_plan", "PNG_RATIO", "MASK_RATIO"]

# Assumptions of the projection (not measured on the release, which this machine cannot download):
PNG_RATIO = 0.6          # PNG bytes / raw RGB bytes of a 512 px render at zlib level 1
MASK_RATIO = 0.02        # bytes per pixel of a binary mask PNG
GB = 1e9


def _env(cfg: Profile, rep: Report) -> None:
    mirror = os.environ.get(hub.HUB_DIR_ENV, "").strip()
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes")
    if offline and not mirror:
        rep.problem("env", "HF_HUB_OFFLINE=1 but NEARID_HUB_DIR is unset: every hub read would fail",
                    "export NEARID_HUB_DIR=<the mirror> (on every machine of the run)")
    if not os.environ.get("NEARID_DOWNLOADS"):
        rep.note("env", f"NEARID_DOWNLOADS is unset: hand downloads and the authors' release are read from "
                        f"{downloads_dir()} (export NEARID_DOWNLOADS=... on every machine of the run)")
    if mirror and not offline:
        rep.note("env", "HF_HUB_OFFLINE is not set: a load missing from the mirror would try the network "
                        "(export HF_HUB_OFFLINE=1 on a node without internet)")


def _gpu(cfg: Profile, rep: Report) -> None:
    gpus = visible_gpus()
    if not gpus:
        if os.environ.get(ALLOW_CPU_ENV, "") == "1":
            rep.note("gpu", f"no GPU visible: the run goes to the CPU ({ALLOW_CPU_ENV}=1)")
        else:
            rep.problem("gpu", "no CUDA GPU visible: PROFILE=paper stops at once",
                        f"run on a GPU node (make install TORCH=cu128; check nvidia-smi, CUDA_VISIBLE_DEVICES), "
                        f"or {ALLOW_CPU_ENV}=1 to run on the CPU anyway")
    else:
        rep.plan("gpu", f"{len(gpus)} GPU(s): " + ", ".join(f"{g.name} {g.memory_bytes / GB:.0f} GB" for g in gpus))
    sizes = Sizes.from_facts(rep.facts, cfg)
    for p in plan_run(gpus, sizes, cfg, mirror=hub.hub_dir()):
        if p.problem:
            rep.problem("gpu", p.problem, f"run it on larger GPUs (nearid plan --gpus COUNTxMODEL shows where it fits)"
                        + (f", or skip it: {p.step.skip}" if p.step.skip else ""))
        elif p.models:
            rep.plan("gpu", f"{p.step.name}: {p.placement()}; {p.items:,} {p.step.item}"
                     + (f", {p.wall_h:.1f} h" if p.wall_h is not None else ""))


def _png_bytes(rep: Report, cfg: Profile) -> float:
    views = rep.facts.get("views", 0)
    pixels = rep.facts.get("pixels_per_view") or cfg.world.image_size ** 2
    n_src = len(cfg.world.nearid_sources)
    return views * pixels * (3 * PNG_RATIO * (1 + n_src) + MASK_RATIO)


def _token_bytes(rep: Report, cfg: Profile) -> float:
    mirror = hub.hub_dir()
    repo = next((r for r, _, _ in hub.PAPER_REPOS if r.split("/")[-1] == cfg.backbone.name), None)
    geo = vision_geometry(mirror / repo) if mirror is not None and repo else None
    if geo is None:
        return 0.0
    patch, width = geo
    tokens = (cfg.backbone.image_size // patch) ** 2
    per_token = width + 4 if cfg.train.token_store == "int8" else 2 * width
    v = rep.facts.get("views_by_split") or {}
    grids = v.get("train", 0) * (1 + len(cfg.world.train_sources)) + \
        (v.get("val", 0) + v.get("test", 0)) * (1 + len(cfg.world.nearid_sources))
    grids *= 2 if cfg.eval.fg_only else 1
    return float(grids * tokens * per_token)


def _folder_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else 0


def _datasets_cache() -> Path:
    v = os.environ.get("HF_DATASETS_CACHE") or (os.path.join(os.environ["HF_HOME"], "datasets")
                                                if os.environ.get("HF_HOME") else None)
    return Path(v) if v else Path.home() / ".cache" / "huggingface" / "datasets"


def disk_plan(cfg: Profile, rep: Report) -> list[tuple[str, Path, float]]:
    """``[(output, folder, bytes still to write)]`` (module docstring)."""
    out = []
    root = data_dir(cfg.name) / "nearid"
    out.append(("materialised release (PNG)", root, 0.0 if is_complete(root) else _png_bytes(rep, cfg)))
    store = cache_dir(cfg.name)
    out.append((f"token store ({cfg.train.token_store})", store,
                max(0.0, _token_bytes(rep, cfg) - _folder_bytes(store))))
    mirror = hub.hub_dir()
    pq_bytes = 0
    for r, t, _ in hub.PAPER_REPOS:
        if t == "dataset" and mirror is not None and (mirror / r).is_dir() and hub.parquet_splits(mirror / r):
            pq_bytes += sum(Path(f).stat().st_size for fs in hub.parquet_splits(mirror / r).values() for f in fs)
    out.append(("datasets cache (arrow copy of the parquet datasets)", _datasets_cache(), float(pq_bytes)))
    return out


def _size(n: float) -> str:
    return f"{n / GB:.1f} GB" if n >= 0.1 * GB else f"{n / 1e6:.1f} MB"


def _existing(p: Path) -> Path:
    p = p.resolve()
    while not p.exists():
        p = p.parent
    return p


def _disk(cfg: Profile, rep: Report) -> None:
    by_dev: dict[int, list] = {}
    for what, folder, need in disk_plan(cfg, rep):
        where = _existing(folder)
        rep.plan("disk", f"{what}: {_size(need)} to write under {folder}")
        by_dev.setdefault(os.stat(where).st_dev, []).append((what, where, need))
    for items in by_dev.values():
        need = sum(n for _, _, n in items)
        free = shutil.disk_usage(items[0][1]).free
        if need > free:
            rep.problem("disk", f"{need / GB:.1f} GB projected on the file system of {items[0][1]} "
                        f"({', '.join(w for w, _, _ in items)}), {free / GB:.1f} GB free",
                        "free space, or point NEARID_DATA / NEARID_CACHE / HF_DATASETS_CACHE at a larger disk")


def check_machine(cfg: Profile, rep: Report) -> None:
    """The machine part of the preflight (module docstring)."""
    _env(cfg, rep)
    _disk(cfg, rep)
    _gpu(cfg, rep)
