"""The preflight's machine check: the environment variables the steps need, free disk against the
run's projected outputs, visible GPUs against the judge's and the trainer's memory.

**Disk** (:func:`disk_plan`; formulas in docs/paper-profile.md, "Disk"): per output and its folder,
bytes still to write, summed per file system and compared with its free space:

- materialised images (``$NEARID_DATA``): every view of the positives plus one distractor per
  source, PNG at zlib level ``world.png_compress``: ``views x (1 + sources) x W x H x 3 x``
  :data:`PNG_RATIO` (W x H from the release's ``size1`` column where it has one, else
  ``world.image_size``), masks ``views x W x H x`` :data:`MASK_RATIO`; nothing once the dataset is
  complete;
- the token store (``$NEARID_CACHE``, ``train.token_store``): grids ``x`` bytes per grid, grids as
  the resource ledger's prefill step counts them (:func:`~nearid_lib.features.disk.store_grids`:
  training views x (1 + training sources) + val/test views x (1 + sources) + 4 images per MTG pair,
  both variants), bytes per grid tokens ``x`` (width + a float32 scale) for int8 and fp8 (``x`` 2
  width for float16; :func:`~nearid_lib.features.shards.record_bytes`), tokens ``(backbone.image_size
  // patch)^2`` and width from the backbone's ``config.json`` in the mirror; less the grids already
  in **the store this run opens** (:func:`run_store`: its key covers the backbone, the codec's code
  and the materialised release, so the backbone is loaded on the CPU to compute it, and only when
  a store of that backbone and dtype lies in the cache). Every other entry of the cache (a store
  of another code version, backbone or dataset; judge answers, embedding caches) is reported as
  used space with its size and the folder to delete, never subtracted. The store stops writing at
  the reserve of free space it leaves its file system
  (:func:`~nearid_lib.features.disk.reserve_bytes`) and the run streams the backbone for the rest:
  a store larger than the room the other outputs leave is a note with its numbers, not a problem;
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
import shlex
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from .. import hub
from ..data.schema import is_complete
from ..features.disk import STORES, cache_entries, reserve_bytes, store_grids, stored_grids
from ..features.shards import record_bytes
from ..features.stream import store_dir, store_prefix
from ..models import load_backbone
from ..models.registry import resolve_name
from ..paths import cache_dir, data_dir, downloads_dir
from ..run import ALLOW_CPU_ENV
from ..steps import Sizes, plan_run, visible_gpus
from .findings import Report
from .repos import vision_geometry

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["check_machine", "disk_plan", "run_store", "PNG_RATIO", "MASK_RATIO", "STORE_OUTPUT"]

# Assumptions of the projection (not measured on the release, which this machine cannot download):
PNG_RATIO = 0.6          # PNG bytes / raw RGB bytes of a 512 px render at zlib level 1
MASK_RATIO = 0.02        # bytes per pixel of a binary mask PNG
GB = 1e9
STORE_OUTPUT = "token store"     # the disk plan's label of the one output that may stream instead


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


def _grid_bytes(cfg: Profile) -> int | None:
    """Bytes of one stored grid, from the backbone's ``config.json`` in the mirror (None without it)."""
    mirror = hub.hub_dir()
    repo = next((r for r, _, _ in hub.PAPER_REPOS if r.split("/")[-1] == cfg.backbone.name), None)
    geo = vision_geometry(mirror / repo) if mirror is not None and repo else None
    if geo is None:
        return None
    patch, width = geo
    tokens = (cfg.backbone.image_size // patch) ** 2
    # the small profiles' per-group caches keep float16 grids
    dtype = "float16" if cfg.train.token_store == "cache" else cfg.train.token_store
    return record_bytes(tokens, width, dtype)


def run_store(cfg: Profile) -> tuple[Path | None, str]:
    """The folder of the token store this run opens (:func:`~nearid_lib.features.stream.store_dir`
    of the profile's backbone, the materialised release and the dtype), or None and why it is not
    known ("" where no store of this backbone and dtype lies in the cache). The backbone is loaded,
    on the CPU, only when one does: the key covers its weights, dtype, preprocessing and the code
    of its forward, which nothing short of the loaded backbone tells."""
    tc = cfg.train
    if not tc.use_cache or tc.token_store == "cache":
        return None, ""                                  # no sharded store: nothing of it to identify
    shards = cache_dir(cfg.name) / STORES
    prefix = store_prefix(resolve_name(cfg.backbone.name), tc.token_store)
    if not shards.is_dir() or not any(p.name.startswith(prefix) for p in shards.iterdir()):
        return None, ""
    root = data_dir(cfg.name) / "nearid"
    if not is_complete(root):
        return None, (f"the release under {root} is not materialised yet and the store's key covers its "
                      f"manifest: no store there is this run's")
    try:
        backbone = load_backbone(cfg, device="cpu")[0]
    except Exception as err:                             # noqa: BLE001  (said in the note)
        return None, f"the backbone could not be loaded to compute the store's key ({type(err).__name__}: {err})"
    # store_dir reads the dataset's root only (its manifest): the release need not be loaded
    return store_dir(backbone, SimpleNamespace(root=root), cache_dir(cfg.name), tc.token_store), ""


def _token_store(rep: Report, cfg: Profile) -> float:
    """Bytes the token store still has to write; what was counted goes to ``rep.facts["token_store"]``
    (read by the notes of :func:`_disk`)."""
    per_grid = _grid_bytes(cfg)
    grids = store_grids(Sizes.from_facts(rep.facts, cfg))
    folder, why = run_store(cfg)
    written = min(grids, stored_grids(folder)) if folder is not None else 0
    rep.facts["token_store"] = {"grids": grids, "grid_bytes": per_grid, "written": written, "folder": folder,
                                "unknown": why, "others": cache_entries(cache_dir(cfg.name), folder)}
    return float((grids - written) * per_grid) if per_grid is not None else 0.0


def _datasets_cache() -> Path:
    v = os.environ.get("HF_DATASETS_CACHE") or (os.path.join(os.environ["HF_HOME"], "datasets")
                                                if os.environ.get("HF_HOME") else None)
    return Path(v) if v else Path.home() / ".cache" / "huggingface" / "datasets"


def disk_plan(cfg: Profile, rep: Report) -> list[tuple[str, Path, float]]:
    """``[(output, folder, bytes still to write)]`` (module docstring)."""
    out = []
    root = data_dir(cfg.name) / "nearid"
    out.append(("materialised release (PNG)", root, 0.0 if is_complete(root) else _png_bytes(rep, cfg)))
    out.append((f"{STORE_OUTPUT} ({cfg.train.token_store})", cache_dir(cfg.name), _token_store(rep, cfg)))
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
        rep.plan("disk", f"{what}: {_size(need)} to write under {folder}" + _store_detail(what, rep))
        by_dev.setdefault(os.stat(where).st_dev, []).append((what, where, need))
    _used_space(rep)
    for items in by_dev.values():
        store = [it for it in items if it[0].startswith(STORE_OUTPUT)]
        rest = [it for it in items if not it[0].startswith(STORE_OUTPUT)]
        need = sum(n for _, _, n in rest)
        free = shutil.disk_usage(items[0][1]).free
        # the store stops at its reserve and the run streams the rest: only the other outputs can fill the disk
        if need > free:
            rep.problem("disk", f"{need / GB:.1f} GB projected on the file system of {items[0][1]} "
                        f"({', '.join(w for w, _, _ in rest)}), {free / GB:.1f} GB free",
                        "free space, or point NEARID_DATA / NEARID_CACHE / HF_DATASETS_CACHE at a larger disk")
        elif store:
            _store_room(rep, store[0], free, need)


def _store_detail(what: str, rep: Report) -> str:
    ts = rep.facts.get("token_store")
    if not what.startswith(STORE_OUTPUT) or not ts or ts["grid_bytes"] is None:
        return ""
    held = f"; {ts['written']:,} already in {ts['folder']}" if ts["folder"] is not None else ""
    return f" ({ts['grids']:,} grids of {ts['grid_bytes']:,} bytes{held})"


def _used_space(rep: Report) -> None:
    """Notes naming everything under the cache that is not the store this run opens."""
    ts = rep.facts.get("token_store")
    if not ts:
        return
    if ts["unknown"]:
        rep.note("disk", f"token store: no grid counted as already written ({ts['unknown']})")
    for path, n, is_store in ts["others"]:
        if is_store and ts["unknown"]:
            what = "a token store, which this run may or may not open (not known, see the note above)"
        elif is_store:
            what = "a token store this run does not open (another backbone, dtype, codec version or release)"
        else:
            what = "cached outputs other than the token store (reused where still valid, computed again when deleted)"
        rep.note("disk", f"{_size(n)} already used by {path}: {what}; not counted against the plan "
                         f"(rm -rf {shlex.quote(str(path))} frees it)")


def _store_room(rep: Report, store: tuple[str, Path, float], free: float, others: float) -> None:
    """A note where the token store needs more than the room its file system keeps for it: the
    store stops at its reserve of free space and the run streams the backbone for the rest."""
    what, where, need = store
    reserve = reserve_bytes(where)
    room = max(0.0, free - others - reserve)
    if need <= room:
        return
    ts = rep.facts.get("token_store") or {}
    per_grid, grids = ts.get("grid_bytes") or 0, ts.get("grids") or 0
    left = int(-(-(need - room) // per_grid)) if per_grid else 0
    of = f" ({left:,} of {grids:,} grids, {left / grids:.0%})" if left and grids else ""
    rep.note("disk", f"{what}: {need / GB:.1f} GB projected, {room / GB:.1f} GB of room on the file system of "
                     f"{where} ({free / GB:.1f} GB free, less {others / GB:.1f} GB of the other outputs there and "
                     f"the {reserve / GB:.1f} GB the store leaves free): the store stops writing there and the run "
                     f"streams the backbone for the other {(need - room) / GB:.1f} GB{of}, computing those grids each "
                     f"time they are read (slower, the same numbers); free space or point NEARID_CACHE at a larger "
                     f"disk to store them all")


def check_machine(cfg: Profile, rep: Report) -> None:
    """The machine part of the preflight (module docstring)."""
    _env(cfg, rep)
    _disk(cfg, rep)
    _gpu(cfg, rep)
