"""The plan of a paper run on a given machine, from the ledger: per step, each model's placement and
memory per GPU, the items, the hours, the GPU-hours and the bytes; a step that no GPU group of the
machine can hold is named, and the plan fails (``nearid plan --gpus 1x24GB`` exits 1).

``nearid plan --gpus 8xA100-40GB`` prints it; the preflight makes the same plan for the GPUs it sees;
``benchmarks/cost_table.py`` renders the docs' cost table from it for several machines. Hours:
``items x seconds per item on the machine's kind / replicas`` per model (models run one after
another), the slower of that and the step's disk reads at ``read_GBps``; GPU-hours bill every GPU of
the machine for the step's wall time (what a scheduler bills).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .gpus import GB, GpuKind
from .ledger import Cost, Sizes, Step, all_steps
from .placement import ModelSize, ReplicaPlan, model_size, plan_replicas

__all__ = ["ModelPlan", "StepPlan", "plan_step", "plan_run", "render_text", "render_markdown", "READ_RATES"]

# the token store's read rates the plan is shown at: measured on the lent H100 machine's disk
# (benchmarks/results/paper_scale_cuda.json, cold reads) and a fast local NVMe node
READ_RATES = (0.58, 3.0)


@dataclass(frozen=True)
class ModelPlan:
    """One model of a step on the machine: its size, its replica plan and the hours of its items."""

    repo: str
    weights_bytes: int | None
    size_basis: str
    plan: ReplicaPlan | None
    hours: float | None

    @property
    def fits(self) -> bool:
        return self.plan is None or self.plan.fits


@dataclass(frozen=True)
class StepPlan:
    """A step on the machine: its models' plans, the items (per model when :attr:`Step.per_model`),
    wall hours, GPU-hours and bytes; ``problem``: why it cannot run there (None: it can)."""

    step: Step
    items: int
    cost: Cost
    models: tuple[ModelPlan, ...]
    wall_h: float | None
    gpu_h: float | None
    written_bytes: float
    read_bytes: float
    problem: str | None

    def placement(self) -> str:
        """Each model's placement and memory per GPU, in one cell."""
        if not self.models:
            return "no GPU" if self.step.gpus == "none" else "-"
        parts = []
        for m in self.models:
            name = m.repo.split("/")[-1]
            if m.plan is None:
                parts.append(f"{name}: size unknown (one device)")
            elif not m.plan.gpu_bytes:
                parts.append(f"{name}: no GPU ({m.plan.need_bytes / GB:.0f} GB needed on one)")
            elif not m.plan.fits:
                parts.append(f"{name}: DOES NOT FIT ({m.plan.need_bytes / GB:.0f} GB needed)")
            elif self.step.gpus == "one":
                parts.append(f"{name}: 1 GPU (a notebook's kernel), {m.plan.per_gpu_bytes() / GB:.0f} GB")
            else:
                parts.append(f"{name}: {m.plan.placement()}, {m.plan.per_gpu_bytes() / GB:.0f} GB/GPU")
        return "; ".join(parts)


def plan_step(st: Step, gpus: Sequence[GpuKind], sizes: Sizes, cfg=None, mirror=None,
              read_GBps: float = READ_RATES[-1]) -> StepPlan:
    """Place and cost one step on ``gpus`` at ``sizes`` (module docstring)."""
    n = st.count(sizes, cfg)
    cost = st.current_cost()
    written, read = float(st.written(sizes, cfg)), float(st.read(sizes, cfg))
    mem = [g.memory_bytes for g in gpus]
    kind = gpus[0] if gpus else None
    models, problems, hours = [], [], 0.0
    uses = st.models_for(cfg)
    for use in uses:
        size = model_size(use.repo, mirror)
        if size is not None and use.resident_bytes is not None:
            size = ModelSize(use.repo, int(use.resident_bytes), use.resident_basis or "resident while it works")
        plan = None if size is None else plan_replicas(size.bytes, mem, use.working_bytes, use.splittable)
        h = None
        if plan is not None and plan.fits and plan.replicas and kind is not None:
            h = n * cost.seconds_on(kind) / (1 if st.gpus == "one" else len(plan.replicas)) / 3600
            hours += h
        elif plan is not None and not plan.fits:
            problems.append(f"{use.repo} needs {plan.need_bytes / GB:.1f} GB per replica "
                            f"({size.bytes / GB:.1f} GB of weights + working set); "
                            + ("the largest GPU holds" if not use.splittable else "all GPUs together hold")
                            + f" {(max(mem) if not use.splittable else sum(mem)) / GB:.1f} GB")
        models.append(ModelPlan(use.repo, None if size is None else size.bytes,
                                "unknown" if size is None else size.basis, plan, h))
    if not uses:
        if st.gpus == "none":
            hours = n * cost.seconds / 3600
        elif kind is not None:
            hours = n * cost.seconds_on(kind) / max(1, len(gpus)) / 3600
    if read and read_GBps:
        hours = max(hours, read / (read_GBps * GB) / 3600)
    wall = None if (problems or (kind is None and st.gpus != "none")) else hours
    gpu_h = None if wall is None else (0.0 if st.gpus == "none" else wall * len(gpus))
    problem = f"step {st.name}: " + "; ".join(problems) if problems else None
    return StepPlan(st, n, cost, tuple(models), wall, gpu_h, written, read, problem)


def plan_run(gpus: Sequence[GpuKind], sizes: Sizes, cfg=None, mirror=None, read_GBps: float = READ_RATES[-1],
             steps: Sequence[Step] | None = None) -> list[StepPlan]:
    """Every declared step (or ``steps``) placed and costed on ``gpus``."""
    return [plan_step(s, gpus, sizes, cfg, mirror, read_GBps) for s in (steps if steps is not None else all_steps())]


def _h(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 60:.0f} min" if x < 1 else f"{x:,.1f} h"


def _bytes(b: float) -> str:
    if not b:
        return "-"
    return f"{b / 1e12:.2f} TB" if b >= 1e12 else f"{b / GB:,.1f} GB"


def machine_name(gpus: Sequence[GpuKind]) -> str:
    """``"8 x A100-40GB"`` (groups of kinds joined with ``+``)."""
    out, last, n = [], None, 0
    for g in list(gpus) + [None]:
        if g is not None and last is not None and g.name == last.name:
            n += 1
            continue
        if last is not None:
            out.append(f"{n} x {last.name}" + (f" (rates of {last.rates_of})" if last.rates_of else ""))
        last, n = g, 1
    return " + ".join(out) or "no GPU"


def totals(plans: Sequence[StepPlan]) -> dict:
    """Wall hours, GPU-hours, bytes written and read over the steps that fit, and the ones that do not."""
    ok = [p for p in plans if p.problem is None]
    return {"wall_h": sum(p.wall_h or 0 for p in ok), "gpu_h": sum(p.gpu_h or 0 for p in ok),
            "written": sum(p.written_bytes for p in plans), "read": sum(p.read_bytes for p in plans),
            "problems": [p.problem for p in plans if p.problem]}


def render_text(plans: Sequence[StepPlan], gpus: Sequence[GpuKind], sizes: Sizes, read_GBps: float) -> str:
    """The plan as a person reads it in a terminal: one block per step, then the totals."""
    L = [f"plan of make reproduce PROFILE=paper on {machine_name(gpus)}; store reads at {read_GBps:g} GB/s",
         f"sizes: {sizes.basis}", ""]
    for p in plans:
        s = p.step
        L.append(f"{s.name}  ({s.command}; {s.feeds})")
        L.append(f"  items: {p.items:,} {s.item}" + (" per model" if s.per_model and len(p.models) > 1 else ""))
        L.append(f"  placement: {p.placement()}")
        for m in p.models:
            where = (None if m.plan is None else f"one GPU, {m.plan.need_bytes / GB:.3g} GB needed"
                     if p.step.gpus == "one" and m.plan.fits else m.plan.describe())
            L.append(f"    {m.repo}: {m.size_basis}" + (f"; {where}" if where else ""))
        L.append(f"  hours: {_h(p.wall_h)} wall, {_h(p.gpu_h)} GPU-hours; written {_bytes(p.written_bytes)}, "
                 f"read {_bytes(p.read_bytes)}" + (f"; network: {s.network}" if s.network else ""))
        where = f" on {p.cost.on}" if p.cost.on else ""
        L.append(f"  cost: {p.cost.seconds:.3g} s an item ({s.item}){where} ({p.cost.status}: {p.cost.basis})")
        L.append(f"  resumes: {s.resume}")
        if p.problem:
            L.append(f"  CANNOT RUN: {p.problem}")
        L.append("")
    t = totals(plans)
    L.append(f"total: {_h(t['wall_h'])} wall, {t['gpu_h']:,.0f} GPU-hours, {_bytes(t['written'])} written, "
             f"{_bytes(t['read'])} read" + (f" (steps that fit; {len(t['problems'])} do not)" if t["problems"] else ""))
    for pr in t["problems"]:
        L.append(f"does not fit: {pr}")
    return "\n".join(L)


def render_markdown(machines: Sequence[tuple[str, Sequence[GpuKind]]], sizes: Sizes, cfg=None,
                    read_rates: Sequence[float] = READ_RATES) -> str:
    """The docs' cost table: one row per step, one column of wall hours (GPU-hours) per machine at the
    last of ``read_rates``, the placement on the first machine, the items and the basis; then the
    totals per machine at every read rate."""
    fast = read_rates[-1]
    per = {name: plan_run(g, sizes, cfg, read_GBps=fast) for name, g in machines}
    first = machines[0][0]
    head = "| step | items | " + " | ".join(f"{n}: wall (GPU-h)" for n, _ in machines) + f" | placement on {first} | cost basis |"
    L = [head, "|" + "---|" * (4 + len(machines))]
    for i, p0 in enumerate(per[first]):
        s = p0.step
        cells = []
        for name, _ in machines:
            p = per[name][i]
            cells.append("does not fit" if p.problem else f"{_h(p.wall_h)} ({_h(p.gpu_h).replace(' h', '')})")
        L.append(f"| {s.name} | {p0.items:,} {s.item} | " + " | ".join(cells)
                 + f" | {p0.placement()} | {p0.cost.status}: {p0.cost.basis} |")
    L.append("")
    for rate in read_rates:
        row = []
        for name, g in machines:
            t = totals(plan_run(g, sizes, cfg, read_GBps=rate))
            row.append(f"{name} {_h(t['wall_h'])} ({t['gpu_h']:,.0f} GPU-h"
                       + (f"; {len(t['problems'])} step(s) do not fit" if t["problems"] else "") + ")")
        L.append(f"- store read at {rate:g} GB/s: " + "; ".join(row))
    L.append(f"- sizes: {sizes.basis}")
    return "\n".join(L)
