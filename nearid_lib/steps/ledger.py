"""The resource ledger of the paper path: every GPU-heavy computation of ``make reproduce
PROFILE=paper`` declared once, as a :class:`Step`, with what the plan, the preflight and the cost
table need to know about it before it runs:

- its **models**, loaded one after another (never two at once), each with the working set it needs
  beside its weights on a GPU and whether ``device_map`` may spread it over several GPUs;
- its **items** at the run's scale, counted from the release's rows and splits (:class:`Sizes`,
  filled by the preflight's data check from the mirror) by the same enumeration the step runs, never
  typed; without a mirror the paper's stated sizes stand in and every figure says so;
- its **cost** per item on one GPU kind with its basis (measured by ``benchmarks/gpu_suite.py`` or
  by the authors, else projected and how), and the resource that bounds it, so that another kind is
  costed by its bandwidth or its throughput (:mod:`.gpus`);
- the bytes it writes and reads, the network it needs, its outputs and how it resumes.

The paper packages declare their steps where their code lives (:func:`register_step`, the registry
pattern of the encoders); :func:`all_steps` imports the modules of :data:`PROVIDERS` first, so a plan
made from any entry point sees every step. The plan (:mod:`.plan`) places each step on a
machine with :func:`~nearid_lib.steps.placement.plan_replicas` and turns items into hours.
"""
from __future__ import annotations

import importlib
import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping

from ..io_utils import atomic_write_text
from ..paths import out_dir, repo_root
from .gpus import KINDS, GpuKind, kind_of_name

__all__ = ["Sizes", "ModelUse", "Cost", "Step", "register_step", "all_steps", "step", "targets", "PROVIDERS", "STATED",
           "per_source_pairs", "measured_results", "suite_entry", "suite_cost", "RESULTS_ENV", "steps_dir", "record_items", "recorded_items", "check_records"]

# The modules that declare steps (imported by :func:`all_steps`, lowest layer first).
PROVIDERS = ("nearid_lib.nearid.gpu_work", "nearid_lib.idsim.gpu_work", "nearid_lib.fpr.gpu_work")

# The release's sizes as its authors state them (NearID Sec. 4.1 and App. B, the splits of
# Gorluxor/NearID, DreamBench++'s 7 methods x 1,350 prompts, FPR Sec. 4), used when the mirror has
# not been read. ``ids``/``three_view`` per split; MTG pairs per split of abdo-eldesokey/mtg-dataset.
STATED: dict = {
    "ids": {"train": 18_786, "val": 100, "test": 500},
    # 6,433 of 19,386 identities have a third view; per split in that proportion
    "three_view": {"train": round(18_786 * 6_433 / 19_386), "val": round(100 * 6_433 / 19_386),
                   "test": round(500 * 6_433 / 19_386)},
    # MTG's train pairs are not stated: 3,350 steps x 128 rows over 11 epochs, less the NearID rows, in
    # repeats of 4 (NearID App. D); its 100 test pairs are
    "mtg_pairs": {"train": round((3_350 * 128 / 11 - 18_786) / 4), "test": 100},
    "dbpp_generations": 7 * 1_350,
    "basis": "stated by the papers and the authors' splits (the mirror was not read)",
}


@dataclass(frozen=True)
class Sizes:
    """The run's sizes: identities and 3-view identities per split of the positives, MTG pairs per
    split, the DreamBench++ generations rated by humans, the profile's sources; ``basis`` says where
    they come from (the release's rows, or :data:`STATED`)."""

    ids: Mapping[str, int]
    three_view: Mapping[str, int]
    mtg_pairs: Mapping[str, int]
    dbpp_generations: int
    eval_sources: int
    train_sources: int
    basis: str
    # views per test identity in the release's row order, where the release was read: a judge capped
    # at its first K identities (eval.vlm_max_ids) is then counted exactly
    test_views: tuple[int, ...] | None = None

    def views(self, split: str) -> int:
        """Views of ``split``: two per identity plus the third ones."""
        return 2 * int(self.ids.get(split, 0)) + int(self.three_view.get(split, 0))

    @classmethod
    def stated(cls, cfg=None) -> "Sizes":
        """The authors' stated sizes, with the profile's sources (paper: 9 evaluated, 4 trained)."""
        ev = len(cfg.world.nearid_sources) if cfg is not None else 9
        tr = len(cfg.world.train_sources) if cfg is not None else 4
        return cls(dict(STATED["ids"]), dict(STATED["three_view"]), dict(STATED["mtg_pairs"]),
                   STATED["dbpp_generations"], ev, tr, STATED["basis"])

    @classmethod
    def from_facts(cls, facts: Mapping, cfg=None) -> "Sizes":
        """The sizes the preflight's data check counted from the mirror (``ids_by_split``,
        ``three_view_by_split``, ``mtg_pairs_by_split``, ``dbpp_generations``); a count it could not
        make keeps the stated figure, and the basis names both."""
        base = cls.stated(cfg)
        got, kept = [], []

        def pick(key, default):
            if facts.get(key) is not None:
                got.append(key)
                return facts[key]
            kept.append(key)
            return default

        out = replace(base, ids=pick("ids_by_split", base.ids), three_view=pick("three_view_by_split", base.three_view),
                      mtg_pairs=pick("mtg_pairs_by_split", base.mtg_pairs),
                      dbpp_generations=int(pick("dbpp_generations", base.dbpp_generations)),
                      test_views=tuple(facts["test_views"]) if facts.get("test_views") is not None else None)
        basis = ("counted from the release in the mirror: " + ", ".join(got)) if got else base.basis
        if got and kept:
            basis += "; stated: " + ", ".join(kept)
        return replace(out, basis=basis)


@dataclass(frozen=True)
class ModelUse:
    """One model a step loads: ``repo``; ``working_bytes`` it needs beside its weights on a GPU
    (activations, KV cache, optimiser state; None: the placement rule's default for a VLM);
    ``splittable``: ``device_map`` may spread it over several GPUs (inference), not a training step;
    ``companions``: further repositories loaded with it (an adapter, a matting network);
    ``in_kernels``: the notebooks load it themselves as well (to score what the step trained);
    ``resident_bytes``: the bytes of its weights that stay on the GPU while the step works, where
    that is not all of them (DreamBooth's trained transformer in fp32 and the VAE, its text encoders
    parked on the CPU), with ``resident_basis``; None: every weight as loaded."""

    repo: str
    working_bytes: int | None = None
    splittable: bool = True
    working_basis: str = ""
    companions: tuple[str, ...] = ()        # repositories loaded beside it (counted in working_bytes)
    in_kernels: bool = False                # the notebooks load it too, to evaluate (the frozen backbone)
    resident_bytes: int | None = None
    resident_basis: str = ""


@dataclass(frozen=True)
class Cost:
    """Seconds per item on one GPU of kind ``on`` (a key of :data:`~nearid_lib.steps.gpus.KINDS`),
    the resource that ``bound``\\ s it (``"memory"``, ``"compute"``, ``"disk"``, ``"network"``,
    ``"cpu"``), ``status`` (``"measured"``, ``"measured by the authors"``, ``"projected"``) and the basis."""

    seconds: float
    on: str
    bound: str
    status: str
    basis: str

    def seconds_on(self, kind: GpuKind) -> float:
        """Seconds per item on ``kind`` (scaled by the bounding resource; the same off the GPU)."""
        ref = KINDS.get(self.on)
        return self.seconds if ref is None else self.seconds * kind.scale(ref, self.bound)


@dataclass(frozen=True)
class Step:
    """A GPU-heavy computation of the paper run (module docstring). ``items(sizes, cfg)`` counts
    the units of ``item`` it processes; ``per_model``: the items are processed once per model
    (each judge scale judges every pair); ``gpus``: ``"all"`` (items dealt over every replica),
    ``"one"`` (a notebook's kernel: one replica on one GPU, the others idle meanwhile),
    ``"none"`` (no GPU: CPU or network); ``written``/``read``: bytes as functions of the sizes."""

    name: str
    command: str
    feeds: str
    models: tuple[ModelUse, ...]
    items: Callable
    item: str
    cost: Cost | Callable[[], Cost]         # a function: read at plan time (a GPU suite run committed later)
    resume: str
    outputs: str
    per_model: bool = False
    gpus: str = "all"
    written: Callable = lambda s, cfg: 0.0
    read: Callable = lambda s, cfg: 0.0
    network: str = ""
    models_of: Callable | None = None       # the models this profile asks for (default: all of ``models``)
    skip: str = ""                          # the profile switch that leaves the step out, for a plan's fix
    target: str = ""                        # the make target whose runner launches it ("": still in a notebook)
    entry: str = ""                         # the module whose main() the runner calls for that target

    def models_for(self, cfg) -> tuple[ModelUse, ...]:
        """The models the profile ``cfg`` makes this step load."""
        if self.models_of is None or cfg is None:
            return self.models
        want = set(self.models_of(cfg))
        return tuple(m for m in self.models if m.repo in want)

    def current_cost(self) -> Cost:
        """The per-item cost as the committed results give it now."""
        return self.cost() if callable(self.cost) else self.cost

    def count(self, sizes: Sizes, cfg=None) -> int:
        """Items at ``sizes`` (once; :attr:`per_model` multiplies by the models in the plan)."""
        n = self.items(sizes, cfg)
        if n < 0 or (isinstance(n, float) and not math.isfinite(n)):
            raise ValueError(f"step {self.name}: {n} items at sizes {sizes.basis}")
        return int(round(n))


_REGISTRY: dict[str, Step] = {}


def register_step(s: Step) -> Step:
    """Declare ``s`` (a name declared twice is an error: one step, one declaration; a step of several
    models processes its items once per model)."""
    if s.name in _REGISTRY and _REGISTRY[s.name] is not s:
        raise ValueError(f"step {s.name!r} is declared twice")
    if len(s.models) > 1 and not s.per_model:
        raise ValueError(f"step {s.name!r}: several models, each loaded alone, need per_model=True")
    _REGISTRY[s.name] = s
    return s


def all_steps() -> list[Step]:
    """Every declared step, in run order (the order the providers declare them)."""
    for mod in PROVIDERS:
        importlib.import_module(mod)
    return list(_REGISTRY.values())


def targets() -> dict[str, tuple[str, list[Step]]]:
    """``{make target: (entry module, its ledger steps)}`` of every step the runner launches; one
    target may run several ledger steps (``judge``: NearID-bench, MTG and DreamBench++)."""
    out: dict[str, tuple[str, list[Step]]] = {}
    for s in all_steps():
        if s.target:
            entry, steps = out.setdefault(s.target, (s.entry, []))
            if entry != s.entry:
                raise ValueError(f"make target {s.target!r}: steps name two entry modules ({entry}, {s.entry})")
            steps.append(s)
    return out


def step(name: str) -> Step:
    """The declared step ``name`` (KeyError naming the known ones)."""
    steps = {s.name: s for s in all_steps()}
    if name not in steps:
        raise KeyError(f"no step {name!r}; declared: {', '.join(steps)}")
    return steps[name]


def per_source_pairs(sizes: Sizes, split: str = "test", max_ids: int | None = None) -> tuple[float, float]:
    """NearID-bench pairs of one split, as :func:`nearid_lib.nearid.pairs.nearid_pairs` enumerates them:
    (positive pairs = one per pair of views: 1 for a 2-view and 3 for a 3-view identity, distractor
    pairs per source = one per view), of the first ``max_ids`` identities when capped (exact where
    the release's views per identity were read, else in proportion)."""
    if split == "test" and sizes.test_views is not None:
        views = sizes.test_views[:max_ids] if max_ids else sizes.test_views
        return sum(v * (v - 1) // 2 for v in views), sum(views)
    n, t = int(sizes.ids.get(split, 0)), int(sizes.three_view.get(split, 0))
    k = min(1.0, max_ids / n) if max_ids and n else 1.0
    return k * ((n - t) + 3 * t), k * sizes.views(split)


def steps_dir(profile: str):
    """Where the steps of a run record what they processed: ``$NEARID_OUT/<profile>/steps``."""
    return out_dir(profile) / "steps"


def record_items(profile: str, name: str, items: Mapping[str, int] | int, item: str, **extra) -> None:
    """Record that step ``name`` processed ``items`` (per model, or a total) in this run of ``profile``
    (written atomically by the process that knows the totals), so that the dry run can check every
    step's real work against the ledger's count at the fixture's size."""
    if name not in {s.name for s in all_steps()}:
        raise KeyError(f"record_items: {name!r} is not a declared step")
    rec = {"step": name, "item": item, "items": items if isinstance(items, int) else dict(items), **extra}
    d = steps_dir(profile)
    d.mkdir(parents=True, exist_ok=True)
    atomic_write_text(d / f"{name}.json", json.dumps(rec, indent=1, default=str))


def recorded_items(profile: str) -> dict[str, dict]:
    """Every step record of a run of ``profile`` (:func:`record_items`), by step name."""
    d = steps_dir(profile)
    return {f.stem: json.loads(f.read_text()) for f in sorted(d.glob("*.json"))} if d.is_dir() else {}


def check_records(profile: str, sizes: Sizes, cfg) -> list[str]:
    """Problems where a step's recorded items differ from the ledger's count at ``sizes`` (per model
    for a step that judges with several), and records of undeclared steps; empty when they agree."""
    steps = {s.name: s for s in all_steps()}
    out = []
    for name, rec in recorded_items(profile).items():
        st = steps.get(name)
        if st is None:
            out.append(f"step record {name}: no such step in the ledger")
            continue
        want = st.count(sizes, cfg)
        got = rec["items"]
        for model, n in (got.items() if isinstance(got, dict) else [("", got)]):
            if int(n) != want:
                out.append(f"step {name}{f' ({model})' if model else ''}: processed {n} {st.item}, the ledger "
                           f"counts {want} at these sizes ({sizes.basis})")
    return out


RESULTS_ENV = "NEARID_BENCH_RESULTS"


def measured_results(name: str) -> dict | None:
    """A committed benchmark result (``benchmarks/results/<name>``, or ``$NEARID_BENCH_RESULTS/<name>``)
    the ledger takes a rate from, or None where the checkout has none (an installed package without
    its benchmarks)."""
    f = Path(os.environ.get(RESULTS_ENV) or repo_root() / "benchmarks" / "results") / name
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return None


def suite_entry(name: str) -> dict | None:
    """The result of GPU suite entry ``name`` (``benchmarks/gpu_suite.py`` on a GPU, committed as
    ``gpu_suite_cuda.json``) when it ran, with ``_run`` = the run that measured it (date, device,
    commit); None when absent, skipped or failed."""
    suite = measured_results("gpu_suite_cuda.json") or {}
    if suite.get("mode") != "cuda":
        return None
    for e in suite.get("entries", []):
        if e.get("name") == name and e.get("status") == "ok":
            run = e.get("run") or {k: suite.get(k) for k in ("started", "device", "commit")}
            return {**e["result"], "sizes": e.get("sizes", {}), "_run": run}
    return None


def suite_cost(entry: dict, seconds: float, bound: str, what: str) -> Cost:
    """A measured :class:`Cost` from a suite entry (:func:`suite_entry`): its device's kind, the run's date."""
    run = entry["_run"]
    kind = kind_of_name(str(run.get("device") or ""))
    return Cost(seconds, kind.rates_of or kind.name, bound, "measured",
                f"benchmarks/gpu_suite.py, {str(run.get('started') or '')[:10]}, {run.get('device')}, commit "
                f"{str(run.get('commit') or 'unknown')[:7]}: {what}")
