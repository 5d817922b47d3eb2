"""Claims as data: each paper's checkable claims declared once and evaluated with 95% intervals.

A claim compares *quantities*: the NearID head's test SSR against a threshold, +R neg's M-O
against L_NearID's, ID-Sim's identity sensitivity against the frozen backbone's. Each quantity is
an :class:`Evidence`: per-unit outcomes (units = test identities, MTG pairs, grid anchors, FPR
identities, ...) for one or more training seeds, plus the name of the statistic that turns units
into a number (:data:`STATISTICS`). Every statistic is a ratio of sums over units, so a bootstrap
replicate is just a vector of resampling counts over units and all replicates are one matrix
product.

Intervals are percentile bootstraps over units. When two quantities are scored on the same units
(the same test identities seen by two models), each replicate resamples the units once for both:
a *paired* bootstrap, so the interval of a difference is not inflated by between-identity
variance. A statistic is computed per seed and averaged over seeds; the per-seed spread is
reported beside it (it is the part of the uncertainty that more identities would not remove) and
enters the interval as a Student t term with S - 1 degrees of freedom (:func:`_seed_noise`), the
small-sample interval of a mean over S trainings. A comparison of two quantities trained with the
same seeds is paired by seed as well (:func:`seeds_paired`): one t term, drawn from the spread of
the per-seed differences. Each claim of :func:`evaluate_claims` draws from a generator of its own
(:func:`claim_rng`: the notebook's seed and the claim's key), so adding, removing or reordering a
claim moves no other claim's interval.

Criteria live in the declarations, never in a notebook; when each was declared, before or after
its claim's first committed result, is read from git (:mod:`.history`). A criterion gives one of
four verdicts:

* ``holds``         - the interval lies on the claim's side of the criterion;
* ``does not hold`` - the interval lies on the other side;
* ``inconclusive``  - the interval straddles the criterion;
* ``not testable``  - a precondition fails (the machinery keeps them; no declared claim has one:
  the regime is a rule over every claim, :mod:`.exclusions`), every side of a comparison sits at the
  metric's floor or ceiling (:func:`at_bound`), or the profile has no evidence for it.

Whether a claim counts as a test is decided later, in the report, by the rules of :mod:`.exclusions`
(calibrated, by construction, post hoc, not testable, chance floor, regime, point, tie), applied to
every claims row alike; the row itself carries the two facts of the profile's world keyed by
quantity (:mod:`.world_facts`: ``calibrated``, ``by_construction``).

A quantity whose estimate lies below its metric's chance level (PA 1/2, a correlation 0, a
triplet accuracy 1/2; :attr:`Evidence.chance_level`) is flagged in the row's ``flags`` column.
"""
from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from .criteria import AtLeast, AtMost, Greater, Precondition, RatioAtLeast, Within, criterion_from_text
from ..stats import (  # noqa: F401
    MTG_PAIRS,
    STATISTICS,
    Statistic,
    grouped_pearson_columns,
    statistic,
)
from .evidence import Evidence, pool_seeds
from .world_facts import calibration_target, construction_reasons
from ..io_utils import write_csv
from ..paper_specs import paper_values_dir

__all__ = ["Evidence", "Statistic", "STATISTICS", "AtLeast", "AtMost", "Greater", "Within", "RatioAtLeast",
           "Precondition", "criterion_from_text", "PaperRef", "ClaimSpec", "evaluate_claim", "evaluate_claims",
           "paper_value", "VERDICTS", "claim", "write_claims", "with_earlier", "at_bound", "below_chance",
           "FLOOR_TOL", "grouped_pearson_columns", "pool_seeds", "seeds_paired", "claim_rng", "CLAIM_REPLICATES"]

# Bootstrap replicates of every claim. With three training seeds a replicate carries a t_2 draw
# whose 2.5% / 97.5% quantiles sit in thin tails: at 1000 replicates an interval end moved by up to
# 0.03 (sd over 20 draws, NearID 3d) with the evidence fixed, and NearID 6c's verdict changed in 1
# draw of 20; at 10000 the sd is 3-4 times smaller, at <= 0.2 s per claim
# (benchmarks/results/bootstrap_mc_mini_regen.md).
CLAIM_REPLICATES = 10000

VERDICTS = ("holds", "does not hold", "inconclusive", "not testable")


# A comparison whose every side lies within this share of the metric's range of the same bound is
# at the floor (or ceiling) of the metric: nothing it decides is evidence (e.g. SSR 0.0% vs 1.2%).
FLOOR_TOL = 0.02


# --------------------------------------------------------------------------- evidence
def at_bound(evs: Sequence[Evidence], points: Sequence[float], tol: float = FLOOR_TOL) -> str | None:
    """``"floor"`` / ``"ceiling"`` when every one of two or more quantities sits within ``tol`` of
    its metric's range from the same bound (a comparison that cannot move), else None."""
    if len(evs) < 2 or any(e.range is None for e in evs):
        return None
    for name, side in (("floor", 0), ("ceiling", 1)):
        if all(abs(p - e.range[side]) <= tol * (e.range[1] - e.range[0]) for e, p in zip(evs, points)):
            return name
    return None


def below_chance(qs: Sequence[str], evs: Sequence[Evidence], points: Sequence[float], fmt) -> str:
    """A flag naming every quantity whose estimate is below its chance level ("" when none)."""
    low = [f"{q} = {fmt(p)} < chance {fmt(e.chance_level)}" for q, e, p in zip(qs, evs, points)
           if e.chance_level is not None and np.isfinite(p) and p < e.chance_level]
    return ("below chance: " + "; ".join(low)) if low else ""


def _units(e: Evidence) -> tuple[str, ...]:
    return tuple(sorted(e.table["unit"].astype(str).unique()))


def _replicates(evs: Sequence[Evidence], rng: np.random.Generator, n_boot: int,
                seed_noise: bool = True) -> list[np.ndarray]:
    """Bootstrap replicates [n_boot] of each evidence's seed-averaged statistic, **hierarchical**:
    units are resampled (evidences sharing units together: paired, the others independently); where
    an evidence has several training seeds, each replicate adds the between-training part as a
    Student t draw (:func:`_seed_noise`), so a trained model's interval carries the spread between
    trainings as well as between test units; a bounded metric's replicate (:attr:`Evidence.range`)
    is clipped to its range after that draw (a mean AP of 1.003 is no possible value). One seed:
    units only. ``seed_noise=False``: the unit
    part alone (the caller adds a seed term drawn on a comparison's per-seed values,
    :func:`seeds_paired`)."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, e in enumerate(evs):
        groups.setdefault(_units(e), []).append(i)
    out: list[np.ndarray | None] = [None] * len(evs)
    for units, members in groups.items():
        n = len(units)
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot).astype(float)   # [B, n]
        for i in members:
            m = evs[i].unit_moments(units)                                           # [n, S, m]
            sums = np.einsum("bn,nsm->bsm", counts, m)                               # [B, S, m]
            vals = statistic(evs[i].stat).value(sums)                                # [B, S]
            if vals.shape[1] > 1:
                noise = _seed_noise(evs[i].per_seed(), rng, n_boot) if seed_noise else 0.0
                with np.errstate(invalid="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)                  # all-NaN replicate rows
                    out[i] = np.nanmean(vals, axis=1) + noise
                if seed_noise and evs[i].range is not None:     # the t term stops at the metric's range
                    out[i] = np.clip(out[i], *evs[i].range)
            else:
                out[i] = vals[:, 0]
    return out  # type: ignore[return-value]


def seeds_paired(evs: Sequence[Evidence]) -> bool:
    """Whether a comparison of two quantities is paired by training seed: both were trained with
    the same two or more seeds. Seed ``k`` of every NearID row starts from the same initialisation
    and, for rows with the same data settings, reads the same batch stream
    (:func:`~nearid_lib.nearid.group.stream_key`); or both quantities are the same trained model
    scored two ways (NearID 2d: FG-only vs full images). So the seed is a block: the between-training term is drawn once, from the spread of the per-seed differences
    (a paired t with S - 1 d.f.), not as two independent draws."""
    return len(evs) == 2 and len(evs[0].seeds) > 1 and evs[0].seeds == evs[1].seeds


def _seed_noise(per_seed: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """The between-training part of a seed mean's bootstrap: ``t * sd / sqrt(S)`` with ``t`` drawn
    from Student's t with ``S - 1`` degrees of freedom and ``sd`` the spread (ddof 1) of the ``S``
    per-seed values that are defined.

    With three seeds the spread is itself poorly known; resampling the seeds (what this replaced)
    treats it as known and shrinks it by (S-1)/S, so two regenerations that differ only in float
    rounding could flip a verdict (claim 3b, docs/mini.md). The t draw is the small-sample interval
    for a mean over S trainings (95% half-width 4.30 sd/sqrt(3) instead of about 1.96 x 0.82 sd/sqrt(3)).
    The draws come from a child generator (:meth:`numpy.random.Generator.spawn`), so the claim's
    unit draws are the same as without seeds."""
    v = np.asarray(per_seed, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) < 2:
        return np.zeros(n_boot)
    try:
        child = rng.spawn(1)[0]
    except (TypeError, AttributeError):          # a generator without a seed sequence
        child = np.random.default_rng(int(rng.integers(2**63)))
    return child.standard_t(len(v) - 1, size=n_boot) * float(np.std(v, ddof=1)) / np.sqrt(len(v))


@dataclass(frozen=True)
class PaperRef:
    """One number of ``paper_values/<table>.csv``: the row where ``where`` matches, ``column``."""
    table: str
    where: tuple[tuple[str, str], ...]
    column: str


def paper_value(ref: PaperRef, folder: Path | None = None) -> float:
    """The transcribed paper number ``ref`` points at (raises if it is not exactly one cell)."""
    df = pd.read_csv(Path(folder or paper_values_dir()) / f"{ref.table}.csv")
    sel = np.ones(len(df), bool)
    for col, val in ref.where:
        sel &= df[col].astype(str).to_numpy() == str(val)
    if sel.sum() != 1:
        raise KeyError(f"paper value {ref}: {int(sel.sum())} matching rows in {ref.table}.csv")
    return float(df.loc[sel, ref.column].iloc[0])


@dataclass(frozen=True)
class ClaimSpec:
    """One claim: the statement, the paper's side (``paper_text`` formatted with ``paper_refs``),
    the test, preconditions, and where the evidence comes from (for the reader)."""
    key: str
    paper: str
    statement: str
    test: AtLeast | AtMost | Greater | Within | RatioAtLeast
    paper_text: str = ""
    paper_refs: tuple[PaperRef, ...] = ()
    preconditions: tuple[Precondition, ...] = ()
    evidence_note: str = ""
    # criteria declared before this one (label, test on the same quantities), judged on the same
    # interval and shown beside it, with the reason the criterion was revised (from the paper's text)
    earlier: tuple[tuple[str, Any], ...] = ()
    revision: str = ""
    # (no per-claim exclusion: whether a profile's world was calibrated to a claim's quantities or
    # makes them true by construction is a fact of the world, keyed by quantity in .world_facts, and
    # every other reason a claim is not counted is a rule of .exclusions applied to every claim)
    # a question of this project's, no paper's claim (why); judged like the claims, shown apart
    own_question: str = ""


def _fmt_for(evs: Sequence[Evidence]) -> Callable[[float], str]:
    pct = any(statistic(e.stat).percent for e in evs)
    return (lambda v: f"{100 * v:.1f}%") if pct else (lambda v: f"{v:.3f}")


def evaluate_claim(spec: ClaimSpec, evidence: Mapping[str, Evidence], rng: np.random.Generator,
                   n_boot: int = CLAIM_REPLICATES, ci: float = 0.95, profile: str = "",
                   paper_folder: Path | None = None, pair_seeds: bool = True) -> dict:
    """One row of a claims table (see the module docstring for the verdicts). ``pair_seeds=False``
    draws each side's seed term on its own even where :func:`seeds_paired` (an earlier interval of
    this project's; docs/mini.md compares the two)."""
    try:
        vals = [paper_value(r, paper_folder) for r in spec.paper_refs]
        paper = spec.paper_text.format(*vals) if spec.paper_text else ""
    except (KeyError, FileNotFoundError, IndexError, ValueError) as err:
        paper = f"{spec.paper_text} (paper value unavailable: {err})"
    row = {"key": spec.key, "paper_name": spec.paper, "claim": spec.statement, "paper": paper,
           "profile": profile, "evidence": spec.evidence_note,
           "calibrated": calibration_target(profile, spec.test.quantities),
           "by_construction": construction_reasons(profile, spec.test.quantities), "own_question": spec.own_question}
    qs = spec.test.quantities
    missing = [q for q in qs if q not in evidence]
    if missing:
        return {**row, "ours": "–", "verdict": "not testable", "criterion": "",
                "detail": f"no evidence in this profile for {', '.join(missing)}"}
    evs = [evidence[q] for q in qs]
    fmt = _fmt_for(evs)
    row["criterion"] = spec.test.criterion(fmt)
    points = {q: evidence[q].point() for q in set(qs) | {p.q for p in spec.preconditions if p.q in evidence}}
    for pre in spec.preconditions:
        if pre.q not in evidence or not pre.ok(points[pre.q]):
            pfmt = _fmt_for([evidence[pre.q]]) if pre.q in evidence else fmt     # the precondition's own units
            got = pfmt(points[pre.q]) if pre.q in points else "no evidence"
            why = (f"precondition {pre.q} {pre.op} {pfmt(pre.threshold)} fails ({got})"
                   + (f": {pre.why}" if pre.why else ""))
            if spec.earlier:
                # a precondition declared after a result: the interval is still computed, so the
                # verdict the claim had without it stays beside "not testable" (its history)
                judged = evaluate_claim(replace(spec, preconditions=()), evidence, rng, n_boot, ci, profile,
                                        paper_folder, pair_seeds)
                return {**judged, "verdict": "not testable", "detail": f"{why}; {judged.get('detail', '')}"}
            return {**row, "ours": ", ".join(f"{q} = {fmt(points[q])}" for q in qs),
                    "verdict": "not testable", "detail": why}
    flags = below_chance(qs, evs, [points[q] for q in qs], fmt)
    row["flags"] = flags
    bound = at_bound(evs, [points[q] for q in qs])
    if bound:
        return {**row, "ours": ", ".join(f"{q} = {fmt(points[q])}" for q in qs), "verdict": "not testable",
                "detail": f"every side sits at the metric's {bound}: the comparison cannot move"}
    paired_seeds = pair_seeds and seeds_paired(evs)
    reps = _replicates(evs, rng, n_boot, seed_noise=not paired_seeds)
    lo_q, hi_q = 100 * (1 - ci) / 2, 100 * (1 + ci) / 2
    if len(qs) == 1:
        est, dist = points[qs[0]], reps[0]
    else:
        comb = getattr(spec.test, "combine", lambda a, b: a - b)      # Greater / Within: a - b
        est, dist = float(comb(points[qs[0]], points[qs[1]])), comb(reps[0], reps[1])
        if paired_seeds:                                              # one t draw on the per-seed contrasts
            with np.errstate(invalid="ignore", divide="ignore"):
                contrast = comb(evs[0].per_seed(), evs[1].per_seed())
            dist = dist + _seed_noise(contrast, rng, n_boot)
    if not np.isfinite(est):
        return {**row, "ours": ", ".join(f"{q} = {fmt(points[q])}" for q in qs), "verdict": "not testable",
                "detail": "the statistic is undefined on this profile's evidence (e.g. a correlation "
                          "over fewer than 3 pairs)"}
    low, high = (float(v) for v in np.nanpercentile(dist, [lo_q, hi_q]))
    low_se, high_se = (quantile_mc_se(dist, q / 100) for q in (lo_q, hi_q))
    seeds = [evidence[q].seeds for q in qs]
    spreads = [np.nanstd(evidence[q].per_seed(), ddof=1) if len(s) > 1 else float("nan")
               for q, s in zip(qs, seeds)]
    parts = []
    for q, s, sd in zip(qs, seeds, spreads):
        seed_txt = f", {len(s)} seeds sd {fmt(sd)}" if len(s) > 1 else ""
        parts.append(f"{q} = {fmt(points[q])}{seed_txt}")
    what = getattr(spec.test, "combined", "difference") if len(qs) > 1 else "estimate"
    efmt = (lambda v: f"{v:.3f}") if what == "ratio" else fmt
    ours = "; ".join(parts) + f"; {what} {efmt(est)} [{efmt(low)}, {efmt(high)}]"
    n_units = [int(evidence[q].table["unit"].nunique()) for q in qs]
    multi = any(len(s) > 1 for s in seeds)
    out = {**row, "ours": ours, "verdict": spec.test.decide(est, low, high), "estimate": est,
           "ci_low": low, "ci_high": high, "ci_level": ci, "n_boot": n_boot, "p_hold": spec.test.p_hold(dist),
           "ci_low_mc_se": low_se, "ci_high_mc_se": high_se,
           "seeds": "/".join(str(len(s)) for s in seeds), "n_units": "/".join(map(str, n_units)),
           "detail": f"{int(ci * 100)}% percentile bootstrap over units"
                     + (" and training seeds (hierarchical: the spread of the per-seed differences as "
                        "Student t, S-1 d.f., seeds paired)" if paired_seeds else
                        " and training seeds (hierarchical: the seeds' spread as Student t, S-1 d.f.)" if multi else "")
                     + (" (paired)" if len(qs) > 1 and len({_units(e) for e in evs}) == 1 else "")}
    if spec.earlier:
        for label, test in spec.earlier:
            if tuple(test.quantities) != tuple(qs):
                raise ValueError(f"claim {spec.key}: earlier criterion {label!r} is on other quantities")
        out = with_earlier(out, [(label, test.criterion(fmt), test.decide(est, low, high))
                                 for label, test in spec.earlier], spec.revision)
    return out


def quantile_mc_se(dist, q: float, h: float = 0.01) -> float:
    """The Monte Carlo standard error of the ``q`` quantile of bootstrap replicates ``dist``: how far
    that interval end would move with another draw of the same number of replicates,
    ``sqrt(q (1 - q) / n) / f(x_q)`` with the density at the quantile from the spacing of the
    quantiles ``q - h`` and ``q + h`` (NaN with fewer than 100 finite replicates)."""
    d = np.asarray(dist, dtype=float)
    d = d[np.isfinite(d)]
    if len(d) < 100:
        return float("nan")
    lo, hi = np.percentile(d, [100 * max(q - h, 0.0), 100 * min(q + h, 1.0)])
    spread = (hi - lo) / (min(q + h, 1.0) - max(q - h, 0.0))       # 1 / density at the quantile
    return float(np.sqrt(q * (1 - q) / len(d)) * spread)


# spawn-key word that sets claim generators apart from rng.spawn() children of the same seed
_CLAIM_WORD = 0xC1A1


def claim_rng(rng: np.random.Generator, key: str) -> np.random.Generator:
    """Claim ``key``'s own generator under ``rng`` (a notebook's claims generator, made from a seed
    as :func:`~nearid_lib.runtime.seeding.make_rng` does): derived from ``rng``'s seed sequence and the
    key, never from its state, so the claim's bootstrap is the same whichever claims are evaluated
    with it and in whatever order (before, the claims of a notebook drew from one stream in turn, and
    a claim added before another moved the other's interval)."""
    ss = getattr(rng.bit_generator, "seed_seq", None)
    if not isinstance(ss, np.random.SeedSequence):
        raise TypeError(f"claim_rng: claim {key!r}: the generator has no numpy SeedSequence to derive "
                        f"from; make it with numpy.random.default_rng(seed) or nearid_lib.runtime.seeding.make_rng")
    word = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little")
    return np.random.default_rng(np.random.SeedSequence(ss.entropy, spawn_key=(*ss.spawn_key, _CLAIM_WORD, word),
                                                        pool_size=ss.pool_size))


def evaluate_claims(specs: Sequence[ClaimSpec], evidence: Mapping[str, Evidence],
                    rng: np.random.Generator, n_boot: int = CLAIM_REPLICATES, ci: float = 0.95,
                    profile: str = "", keys: Sequence[str] | None = None) -> pd.DataFrame:
    """Evaluate every claim in ``specs`` (or those in ``keys``) against ``evidence``, each with
    its own generator under ``rng`` (:func:`claim_rng`)."""
    chosen = [s for s in specs if keys is None or s.key in keys]
    return pd.DataFrame([evaluate_claim(s, evidence, claim_rng(rng, s.key), n_boot, ci, profile) for s in chosen])


# --------------------------------------------------------------------------- rows / files
def claim(claim: str, paper: str, ours: str, holds: bool, detail: str = "", profile: str = "") -> dict:
    """A free-form claims row for checks that are not :class:`ClaimSpec` declarations; ``holds``
    must be computed from numbers by the caller (a comparison), never typed in."""
    return {"claim": claim, "paper": paper, "ours": ours, "holds": bool(holds),
            "verdict": "holds" if holds else "does not hold", "detail": detail, "profile": profile}


def with_earlier(row: dict, earlier: Sequence[tuple[str, str, str]], why: str) -> dict:
    """``row`` with the verdicts of the claim's earlier criteria kept beside the current one.

    ``earlier``: ``(label, criterion, verdict)`` per earlier criterion, each judged on this run's
    numbers; ``why``: the reason for the revision, from the paper's text. A criterion changed after
    a result was seen never hides the verdict of the one declared first."""
    text = "; ".join(f"{label}: {crit} -> {verdict}" for label, crit, verdict in earlier)
    return {**row, "earlier_verdicts": text, "revision": why}


def write_claims(rows: list[dict] | pd.DataFrame, figures: Path, name: str) -> Path:
    """Write ``tables/claims_<name>.csv`` under ``figures`` (atomically); the report collects it.
    Notebooks write theirs with :meth:`nearid_lib.run.Run.write_claims` (same file + provenance)."""
    return write_csv(pd.DataFrame(rows), Path(figures) / "tables" / f"claims_{name}.csv")
