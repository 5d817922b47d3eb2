"""Train-and-score runs of the NearID head, over seeds and over the rows of the ablation tables.

Every row of NearID Tables 1, 3, 6, 8, 9 and 10 is one *configuration* trained with the main recipe
(same steps, schedule, data and seeds; only the row's overrides differ, :mod:`.ablations`) and scored
on the test split. A run lives in ``<run_root>/<run_key>/`` where :func:`~.checkpoints.run_key`
hashes the configuration (seed included), the dataset and the library code, so an identical run is
never trained twice (Table 1's NearID row, Table 3's L_NearID row and Table 8's alpha = 0.5 row are
the same runs) and a code or data change never serves a stale one. A run folder holds the head and
its resumable training state (:func:`~.train.train_head`), the per-identity and per-MTG-pair outcomes
(``units_<split>_<variant>.csv``, ``mtg_<split>.csv``: the evidence of :mod:`nearid_lib.claims`),
``history.json`` and, written last, ``scores.json``.

A table row reports the mean over seeds of each metric, with ``<metric>_sd`` (the spread over
seeds) beside it; claims bootstrap the per-unit outcomes of all seeds (:func:`Sweep.evidence`).

Runs that read the same batch stream (:func:`~.group.stream_key`: the same seed and data settings,
any loss) are trained together, one pass over the token store for all of them
(:func:`~.train.train_group`, :func:`train_grouped`): each head equals the head trained alone.

Runs are independent, so :func:`run_rows` can train the missing ones in ``workers`` processes
(the profile's ``runtime.workers``, which ``NEARID_WORKERS`` sets, e.g. 2 on a 2-core machine): each
worker loads the dataset from its folder and the profile's backbone, uses the main process's torch
thread count (``runtime.threads``), and writes
its run folder; the main process then reads every run as a reused one. A run's result does not
depend on which process trained it (same key, same code, same thread count). Tiny random-init
backbones are not seeded at load, so profiles that use one always train in the main process.
"""
from __future__ import annotations

import queue as _q
import json
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from ..claims.evidence import Evidence
from ..config import seeds_of, with_overrides
from ..data import load_nearid
from ..io_utils import write_csv, write_json
from ..models import load_backbone, load_encoder, resolve_device
from ..runtime import set_torch_threads
from .checkpoints import run_dir
from ..features.embedder import Embedder
from .dbpp import graded_evidence
from .evaluate import embed_split, mtg_bench, mtg_units, nearid_bench, nearid_evidence, summary_row, units_from_bench
from .group import groups_of
from .scorers import EmbeddingBenchEncoder
from .train import train_group, train_head

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["RowSpec", "RunResult", "Sweep", "seeds_of", "train_and_score", "train_missing", "train_grouped", "run_rows",
           "METRICS", "worker_devices", "run_dir"]

METRICS = ("nearid_ssr", "nearid_pa", "nearid_pa_strict", "mtg_mo", "mtg_mopair", "mtg_ssr", "mtg_pa",
           "train_ssr", "train_pa", "unseen_ssr", "unseen_pa")


@dataclass(frozen=True)
class RowSpec:
    """One configuration of a table: ``key`` names its evidence (``<key>.<variant>.<group>.<stat>``),
    ``aliases`` are further names of the same run (e.g. Table 9's beta = 0 is Table 8's alpha = 1)."""
    key: str
    label: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    paper_id: str = ""          # the row's key in the paper's table (paper_values row_id), if any


@dataclass
class RunResult:
    """One trained and scored head (one configuration, one seed)."""
    key: str
    seed: int
    label: str
    directory: Path
    seconds: float
    steps: int
    final_loss: float
    reused: bool
    scores: dict[str, dict]                     # "<split>" / "<split>_fg" -> summary_row
    units: dict[str, pd.DataFrame]              # variant -> unit_outcomes of the test split
    mtg: pd.DataFrame | None

    @property
    def checkpoint(self) -> Path:
        return self.directory


def _load(d: Path, key: str, seed: int, label: str) -> RunResult:
    s = json.loads((d / "scores.json").read_text())
    units = {v: pd.read_csv(d / f"units_{s['split']}_{v}.csv", keep_default_na=False,
                            dtype={"unit": str, "source": str}) for v in s["variants"]}
    mp = d / f"mtg_{s['split']}.csv"
    mtg = pd.read_csv(mp, dtype={"unit": str}) if mp.exists() else None
    return RunResult(key, seed, label or s.get("label", ""), d, s["seconds"], s["steps"], s["final_loss"], True,
                     s["scores"], units, mtg)


def train_and_score(cfg: Profile, data: NearIDData, encoder=None, label: str = "", split: str = "test",
                    variants: Sequence[str] = ("full", "fg"), run_root: str | os.PathLike | None = None,
                    reuse: bool = True, progress: bool = False, cache_root=None) -> RunResult:
    """Train a head with ``cfg`` (resumable: a killed run continues) and score it on ``split`` for
    each variant; an identical finished run (:func:`~.checkpoints.run_key`) is loaded instead."""
    d = run_dir(cfg, data, run_root)
    key = d.name
    if reuse and (d / "scores.json").exists():
        return _load(d, key, cfg.seed, label)
    encoder = encoder if encoder is not None else load_backbone(cfg)[0]
    res = train_head(cfg, data, encoder, out_dir=d, resume=reuse, progress=progress, eval_split=None,
                     cache_root=cache_root)
    backbone = getattr(encoder, "backbone", encoder)
    emb = Embedder(backbone, data, head=res.head, profile=cfg, cache_root=cache_root, progress=progress,
                   batch_size=cfg.backbone.batch_size, store_tokens=True)
    scores, units, mtg = {}, {}, None
    for v in variants:
        se = embed_split(emb, data, split, v)
        nb = nearid_bench(se, data.train_sources, per_identity=True)
        mt = mtg_bench(se)
        scores[split if v == "full" else f"{split}_{v}"] = summary_row(nb, mt)
        units[v] = units_from_bench(nb, se.ids)
        write_csv(units[v], d / f"units_{split}_{v}.csv")
        if v == "full" and se.mtg is not None:
            mtg = mtg_units(se)
            write_csv(mtg, d / f"mtg_{split}.csv")
    final_loss = float(np.mean([h["loss"] for h in res.history[-10:]])) if res.history else float("nan")
    write_json({"key": key, "label": label, "seed": cfg.seed, "seconds": res.seconds, "steps": res.steps,
                "final_loss": final_loss, "split": split, "variants": list(variants), "scores": scores}, d / "scores.json")
    return RunResult(key, cfg.seed, label, d, res.seconds, res.steps, final_loss, False, scores, units, mtg)


@dataclass
class Sweep:
    """The runs of several rows over seeds: ``runs[row key]`` = one :class:`RunResult` per seed."""
    rows: list[RowSpec]
    runs: dict[str, list[RunResult]]
    sources: list[str]
    train_sources: list[str]
    # per row key, (seed, scores) of each run on the graded pairs of the last :meth:`dbpp` call
    # with a scorer that keeps its pairs (the procedural stand-in): evidence ``<row>.dbpp_proc.mh``
    graded: dict[str, list[tuple[int, np.ndarray]]] = field(default_factory=dict)
    graded_pairs: pd.DataFrame | None = None

    def summary(self, split: str = "test") -> pd.DataFrame:
        """One line per row: the mean over seeds of every metric, ``<metric>_sd``, ``n_seeds``,
        ``seconds`` (training time summed over seeds, reused runs included at their recorded cost)."""
        out = []
        for r in self.rows:
            runs = self.runs[r.key]
            per = pd.DataFrame([run.scores[split] for run in runs])
            line = {"key": r.key, "row_id": r.paper_id, "ours_label": r.label, "n_seeds": len(runs),
                    "seconds": float(sum(run.seconds for run in runs)),
                    "steps": int(runs[0].steps), "reused": all(run.reused for run in runs)}
            for m in [c for c in per.columns if pd.api.types.is_numeric_dtype(per[c])]:
                line[m] = float(per[m].mean())
                if m in METRICS:
                    line[f"{m}_sd"] = float(per[m].std(ddof=1)) if len(per) > 1 else float("nan")
            out.append(line)
        return pd.DataFrame(out)

    def evidence(self) -> dict[str, Evidence]:
        """Claims evidence of every row (and alias), all seeds pooled with a ``seed`` column; with
        ``<row>.dbpp_proc.mh`` once :meth:`dbpp` has scored the rows on the procedural stand-in."""
        ev: dict[str, Evidence] = {}
        for r in self.rows:
            runs = self.runs[r.key]
            units = {v: pd.concat([run.units[v].assign(seed=run.seed) for run in runs], ignore_index=True)
                     for v in runs[0].units}
            mtg = (pd.concat([run.mtg.assign(seed=run.seed) for run in runs], ignore_index=True)
                   if runs[0].mtg is not None else None)
            for name in (r.key, *r.aliases):
                ev.update(nearid_evidence(name, units, mtg, self.sources, self.train_sources))
                if r.key in self.graded and self.graded_pairs is not None:
                    ev.update(graded_evidence(name, self.graded_pairs, self.graded[r.key]))
        return ev

    def dbpp(self, backbone, data: NearIDData, dbpp: Any, profile: Profile | None = None,
             column: str = "dbpp_mh") -> pd.DataFrame:
        """DreamBench++ metric-to-human of every row: each run's head (its checkpoint folder) on
        ``backbone``, scored by ``dbpp`` (:func:`~nearid_lib.nearid.dbpp.dbpp_for_profile`'s
        callable, or :func:`~nearid_lib.nearid.bench.standin_scorer`'s procedural stand-in with
        ``column="dbpp_mh_procedural"``), embedded through the caches of ``profile`` (the notebook's
        resolved profile; None: the defaults of an :class:`Embedder` without one); one line per row:
        ``key``, ``<column>`` (mean over seeds), ``<column>_sd``. A scorer that keeps its pairs
        (``dbpp.pairs``: the stand-in) also leaves each run's scores in :attr:`graded` for
        :meth:`evidence`."""
        out = []
        pairs = getattr(dbpp, "pairs", None)
        for r in self.rows:
            vals = []
            if pairs is not None:
                self.graded[r.key], self.graded_pairs = [], pairs
            for run in self.runs[r.key]:
                # the run's head on the one backbone object every run shares (the factory builds no tower)
                enc = load_encoder("nearid", checkpoint=str(run.directory), backbone=backbone)[0].eval()
                benc = EmbeddingBenchEncoder(Embedder(enc, data, profile=profile, progress=False, label=r.label))
                mh, scores = dbpp(benc)
                vals.append(float(mh["m_h"]))
                if pairs is not None:
                    self.graded[r.key].append((run.seed, np.asarray(scores, dtype=float)))
            out.append({"key": r.key, column: float(np.mean(vals)),
                        f"{column}_sd": float(np.std(vals, ddof=1)) if len(vals) > 1 else float("nan")})
        return pd.DataFrame(out)


def _train_in_worker(cfg: Profile, root: str, kw: dict, threads: int) -> str:
    """One run in a worker process (see the module docstring): returns its run folder."""
    set_torch_threads(threads, cfg.runtime.tune_malloc)   # same thread count: same float summation order
    cfg = replace(cfg, runtime=replace(cfg.runtime, workers=1))     # no nested process pools (feature caches)
    res = train_and_score(cfg, load_nearid(root), None, progress=False, **kw)
    return str(res.directory)


def _group_in_worker(cfgs: list, root: str, kw: dict, threads: int) -> list[str]:
    """One group of runs in a worker process: trained together (:func:`~.train.train_group`), then
    each scored (:func:`train_and_score` finds it trained)."""
    set_torch_threads(threads, cfgs[0].runtime.tune_malloc)
    cfgs = [replace(c, runtime=replace(c.runtime, workers=1)) for c in cfgs]
    data = load_nearid(root)
    train_group(cfgs, data, None, out_dirs=[run_dir(c, data, kw.get("run_root")) for c in cfgs], progress=False,
                cache_root=kw.get("cache_root"))
    return [str(train_and_score(c, data, None, progress=False, **kw).directory) for c in cfgs]


def train_grouped(configs: Sequence[Profile], data: NearIDData, encoder=None, workers: int = 1,
                  progress: bool = False, **kw: Any) -> int:
    """Train the missing runs of ``configs`` that share a batch stream with another missing run,
    group by group (:func:`~.group.groups_of`, :func:`~.train.train_group`); returns how many runs
    were trained. With ``workers`` > 1 (real backbones) the groups run in up to ``workers`` worker
    processes, which also score them: on GPUs one whole group each (a group is never split: that
    would read the token store once per part), on the CPU each group split into up to ``workers``
    parts (compute, not reads, is the cost there). Runs alone in their stream are left to :func:`train_missing` /
    :func:`train_and_score`.
    ``kw``: :func:`train_and_score` options (``run_root``, ``cache_root``, ``split``, ``variants``)."""
    kw = {k: v for k, v in kw.items() if k != "reuse"}
    dirs = {run_dir(c, data, kw.get("run_root")): c for c in configs}      # one entry per distinct run
    todo = [c for d, c in dirs.items() if not (d / "scores.json").exists() and not (d / "head.safetensors").exists()]
    groups = [[todo[i] for i in g] for g in groups_of(todo) if len(g) > 1]
    if not groups:
        return 0
    n_runs = sum(len(g) for g in groups)
    if workers > 1 and not configs[0].backbone.tiny:
        # On GPUs one process per stream, a stream never split over processes, even with processes
        # to spare: a part of a stream reads the whole token store again, and on the paper's node the
        # reads (~180 ms a step at 3 GB/s, shared node-wide) outweigh a step of all 12 heads of a
        # stream (~84 ms on an H100), so an extra pass costs more wall time than an idle GPU saves.
        # On the CPU a head step is the cost and a pass over the local cache is cheap: a group is
        # split into up to ``workers`` parts, so every core has a head to train. Each head is the same
        # either way (a head in a group equals the head alone).
        split = resolve_device(configs[0].device).type == "cpu"
        parts = [g[k::workers] for g in groups for k in range(min(workers, len(g)))] if split else groups
        n = min(workers, len(parts))
        print(f"training {n_runs} runs in {len(groups)} groups sharing their batch stream, {len(parts)} passes, "
              f"{n} worker processes", flush=True)
        with _worker_pool(n) as ex:
            futs = [ex.submit(_group_in_worker, p, str(data.root), kw, torch.get_num_threads()) for p in parts]
            for f in as_completed(futs):
                f.result()
        return n_runs
    for g in groups:
        print(f"training {len(g)} runs together (one batch stream)", flush=True)
        train_group(g, data, encoder, out_dirs=[run_dir(c, data, kw.get("run_root")) for c in g],
                    progress=progress, cache_root=kw.get("cache_root"))
    return n_runs


def worker_devices(n_workers: int, visible: str | None = None, count: int | None = None) -> list[str | None]:
    """The GPU each of ``n_workers`` sweep workers gets (as a ``CUDA_VISIBLE_DEVICES`` value): the
    visible GPUs (``visible``: the parent's ``CUDA_VISIBLE_DEVICES``; else ``0..count-1``,
    ``count`` = ``torch.cuda.device_count()``) dealt round-robin; ``[None] * n_workers`` without a GPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    count = torch.cuda.device_count() if count is None else count
    if visible is not None and visible.strip():
        ids = [v.strip() for v in visible.split(",") if v.strip()][:count] if count else []
    else:
        ids = [str(i) for i in range(count)]
    return [ids[k % len(ids)] if ids else None for k in range(n_workers)]


def _pin_device(queue) -> None:
    """Sweep worker initializer: this process sees only the GPU it takes from ``queue`` (before CUDA
    is initialised in it), so ``device="auto"`` puts its run on that GPU."""

    try:
        dev = queue.get(timeout=10)
    except _q.Empty:                     # a replacement worker after all devices were dealt
        dev = None
    if dev is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = dev


def _worker_pool(n: int) -> ProcessPoolExecutor:
    """``n`` spawned worker processes, each pinned to one GPU of :func:`worker_devices` (none
    without a GPU) before CUDA starts in it."""
    ctx = get_context("spawn")
    queue = ctx.Queue()
    for d in worker_devices(n):
        queue.put(d)
    return ProcessPoolExecutor(n, mp_context=ctx, initializer=_pin_device, initargs=(queue,))


def train_missing(configs: Sequence[Profile], data: NearIDData, workers: int, **kw: Any) -> int:
    """Train the configurations whose run is not finished in ``workers`` processes (spawned);
    returns how many were trained. ``kw``: :func:`train_and_score` options (``run_root``,
    ``cache_root``, ``split``, ``variants``); ``reuse=False`` is not allowed here."""
    if kw.get("reuse", True) is False:
        raise ValueError("train_missing: reuse=False retrains in the main process (run_rows workers=1)")
    kw.pop("reuse", None)
    dirs = {run_dir(c, data, kw.get("run_root")): c for c in configs}      # one entry per distinct run
    todo = [c for d, c in dirs.items() if not (d / "scores.json").exists()]
    if workers <= 1 or len(todo) <= 1:
        return 0
    n = min(workers, len(todo))
    devices = worker_devices(n)
    where = f" on GPUs {','.join(devices)}" if devices[0] is not None else ""
    print(f"training {len(todo)} runs in {n} worker processes{where}", flush=True)
    with _worker_pool(n) as ex:
        futs = [ex.submit(_train_in_worker, c, str(data.root), kw, torch.get_num_threads()) for c in todo]
        for f in as_completed(futs):
            f.result()                      # a failed run raises here, with the worker's error
    return len(todo)


def run_rows(cfg: Profile, data: NearIDData, encoder, rows: Sequence[RowSpec], seeds: Sequence[int] | None = None,
             progress: bool = True, workers: int | None = None, **kw: Any) -> Sweep:
    """Train and score every row for every seed (``seeds``: default :func:`seeds_of`), reusing
    finished runs; prints one line per run. ``workers`` (default ``cfg.runtime.workers``): train the
    missing runs in that many processes first (real backbones only, see the module docstring)."""
    workers = cfg.runtime.workers if workers is None else int(workers)
    configs = [replace(with_overrides(cfg, r.overrides), seed=int(s)) for r in rows
               for s in (seeds_of(cfg) if seeds is None else seeds)]
    if kw.get("reuse", True):
        # runs that read the same batches train together (one pass per stream), then the rest
        train_grouped(configs, data, encoder, workers, progress=progress, **kw)
        if workers > 1 and not cfg.backbone.tiny:
            train_missing(configs, data, workers, **{k: v for k, v in kw.items() if k != "reuse"})
    runs: dict[str, list[RunResult]] = {}
    for r in rows:
        runs[r.key] = []
        for seed in (seeds_of(cfg) if seeds is None else seeds):
            c = replace(with_overrides(cfg, r.overrides), seed=int(seed))
            res = train_and_score(c, data, encoder, label=r.label, progress=progress, **kw)
            runs[r.key].append(res)
            sc = res.scores["test"]
            print(f"{r.key:24s} seed {seed}  SSR {sc['nearid_ssr']:5.1f}  PA {sc['nearid_pa']:5.1f}  "
                  f"M-O {sc['mtg_mo']:+.3f}  MTG SSR {sc['mtg_ssr']:5.1f}  "
                  f"({res.seconds:.0f}s{', reused' if res.reused else ''})")
    return Sweep(list(rows), runs, list(data.sources), list(data.train_sources))
