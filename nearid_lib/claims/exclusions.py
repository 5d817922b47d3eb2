"""Why a claim is not counted as a test: named rules, each a predicate over the claim's row, the run's
tables, the paper's values and the claim's history, applied to every claim the same way.

No claim carries an exclusion of its own (``tests/test_claims_exclusions.py`` fails on one). Each
rule of :data:`RULES` gives every claims row an :class:`Outcome`: ``yes`` (the rule applies: the
claim is listed with the reason and not counted), ``no``, or ``unknown`` (the data the rule needs is
missing: the claim stays counted and the cell says what is missing).

* **calibrated**: every quantity of the criterion is a calibration target of the profile's world
  (:data:`~nearid_lib.claims.world_facts.CALIBRATED`).
* **by construction**: the criterion reads a quantity that the profile's data decides by how it is
  made (:data:`~nearid_lib.claims.world_facts.BY_CONSTRUCTION`).
* **post hoc**: the claim's criterion was first declared after the claim's first committed result in
  the same profile (``docs/claims_history.csv``, :mod:`.history`, from git).
* **not testable**: the verdict is "not testable" (no evidence in the profile, an undefined statistic,
  every side at the metric's floor or ceiling).
* **chance floor**: on a metric the criterion reads, a network at random init reaches the pretrained
  frozen encoder, or the frozen encoder lies within :data:`~nearid_lib.claims.FLOOR_TOL` of the
  metric's range of the random-init value (the chance tables ``tables/*_chance.csv``,
  :data:`CHANCE_METRICS`): such a metric does not tell what the encoder knows about identity.
* **regime**: a comparison between two or more different trained NearID heads that the paper reports
  all at or above :data:`PAPER_CEILING` SSR (near-perfect discrimination, where the paper's effect
  lives) while one of ours stands below :data:`OURS_FAR_BELOW` (:mod:`.heads`). A comparison with the
  frozen encoder, or of one head on two sets of units, is not a comparison between heads.
* **point**: a verdict on point values without an interval.
* **tie**: an interval end within :data:`TIE_SE` Monte Carlo standard errors of the criterion
  (:func:`tie_detail`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Callable, Mapping

import pandas as pd

from . import FLOOR_TOL
from ..paper_specs import paper_values_dir
from .criteria import criterion_from_text, edges
from .heads import head_of, our_ssr, paper_ssr
from .history import load_history
from .world_facts import calibration_target, construction_reasons

__all__ = ["Outcome", "Rule", "RuleContext", "RULES", "CHANCE_METRICS", "PAPER_CEILING", "OURS_FAR_BELOW",
           "FLOOR_TOL", "TIE_SE", "tie_detail", "rule_outcomes", "excluded", "rules_cell", "chance_table", "chance_hits", "quantities_of",
           "history_cell"]

# the regime rule: the paper's heads all at or above this SSR (percent) ...
PAPER_CEILING = 99.0
# ... and one of ours below this one
OURS_FAR_BELOW = 90.0
# the share of a metric's range within which the frozen encoder sits at the random-init floor: FLOOR_TOL,
# the share within which every side of a comparison sits at the metric's floor (nearid_lib.claims.at_bound)

# chance table -> {metric (or, for a table whose metric column is "value", its group): the quantities
# of the claims that read it, as fnmatch patterns}. The NearID chance table is in percent for SSR/PA.
CHANCE_METRICS: dict[str, dict[str, str]] = {
    "04_chance.csv": {"nearid_ssr": "*.full.main.ssr", "nearid_pa": "*.full.main.pa", "fg_ssr": "*.fg.main.ssr",
                      "fg_pa": "*.fg.main.pa", "mtg_ssr": "*.mtg.ssr", "mtg_pa": "*.mtg.pa", "mtg_mo": "*.mtg.mo",
                      "mtg_mopair": "*.mtg.mopair", "dbpp_mh_procedural": "*.dbpp_proc.mh"},
    "09_chance.csv": {"PODS / pods_ap": "*.pods.ap", "CUTE / cute_hard_acc": "*.cute_hard.acc",
                      "CUTE / cute_easy_acc": "*.cute_easy.acc"},
    "11_chance.csv": {"all / map": "*.oracle.map", "ap / mean_rho": "*.agree"},
}


def _range(metric: str) -> tuple[float, float]:
    """A chance metric's range: SSR and PA in percent, correlations in [-1, 1], the rest in [0, 1]."""
    m = metric.split("/")[-1].strip()
    if m.endswith(("_ssr", "_pa")):
        return (0.0, 100.0)
    if m.endswith(("_mo", "_mopair", "_mh", "_procedural", "rho", "spearman", "kendall")):
        return (-1.0, 1.0)
    return (0.0, 1.0)


@dataclass(frozen=True)
class Outcome:
    """One rule's outcome on one claim: ``state`` "yes" / "no" / "unknown", why (``detail``) and, where
    a rule tells cases apart, which (``tag``; post hoc: "before", "after", "no result")."""
    state: str
    detail: str = ""
    tag: str = ""

    def text(self, name: str) -> str:
        return f"{name}: {self.state}" + (f" ({self.detail})" if self.detail and self.state != "no" else "")


@dataclass
class RuleContext:
    """What the rules read besides the row: the run's ``tables`` folder (chance tables, our ablation
    tables; None: none), the paper's values and the claims' history (:func:`.history.load_history`)."""
    tables: Path | None = None
    paper_folder: Path = field(default_factory=paper_values_dir)
    history: pd.DataFrame = field(default_factory=load_history)
    _chance: pd.DataFrame | None = field(default=None, init=False, repr=False)

    @property
    def chance(self) -> pd.DataFrame:
        if self._chance is None:
            self._chance = chance_table(self.tables)
        return self._chance


@dataclass(frozen=True)
class Rule:
    """A named rule: ``name`` (the row's ``not counted`` cell), ``label`` (the summary) and the
    predicate ``test(row, context) -> Outcome``."""
    name: str
    label: str
    test: Callable[[Mapping, RuleContext], Outcome]


def quantities_of(row: Mapping) -> tuple[str, ...]:
    """The quantities the row's ``criterion`` reads (none when it has no criterion this layer writes)."""
    try:
        return tuple(criterion_from_text(str(row.get("criterion", "") or "")).quantities)
    except ValueError:
        return ()


def _cell(row: Mapping, col: str) -> str:
    v = row.get(col, "")
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


# --------------------------------------------------------------------------- the rules
def _calibrated(row: Mapping, ctx: RuleContext) -> Outcome:
    target = calibration_target(_cell(row, "profile"), quantities_of(row))
    return Outcome("yes", target) if target else Outcome("no")


def _by_construction(row: Mapping, ctx: RuleContext) -> Outcome:
    why = construction_reasons(_cell(row, "profile"), quantities_of(row))
    return Outcome("yes", why) if why else Outcome("no")


def _history_rows(row: Mapping, ctx: RuleContext) -> pd.DataFrame:
    h = ctx.history
    key = _cell(row, "key")
    if not key or h.empty:
        return h.iloc[0:0]
    return h[h["key"] == key]


def _same_criterion(a: str, b: str) -> bool:
    try:
        return criterion_from_text(a) == criterion_from_text(b)
    except ValueError:
        return False


def _post_hoc(row: Mapping, ctx: RuleContext) -> Outcome:
    rows = _history_rows(row, ctx)
    crit = _cell(row, "criterion")
    declared = rows[rows["version"] != ""] if len(rows) else rows
    if declared.empty:
        return Outcome("unknown", "no declared criterion: a comparison built in code" if not crit else
                       "no declaration of this criterion in docs/claims_history.csv")
    if crit:
        mine = declared[[_same_criterion(c, crit) for c in declared["criterion"]]]
    else:                      # a row without evidence prints no criterion: the one declared now
        mine = declared[declared["current"] == "True"]
    if mine.empty:
        return Outcome("unknown", "no declaration of this criterion in docs/claims_history.csv")
    profile = _cell(row, "profile")
    res = mine[mine["profile"] == profile]
    when = mine["criterion_declared"].iloc[0]
    if res.empty or not res["first_result"].iloc[0]:
        return Outcome("no", f"declared {when}; no committed {profile or 'profile'} result", "no result")
    first = res["first_result"].iloc[0]
    if str(res["declared_before_result"].iloc[0]) == "True":
        return Outcome("no", f"declared {when}, before the first result {first}", "before")
    return Outcome("yes", f"criterion declared {when}, after the first committed result {first}", "after")


def _not_testable(row: Mapping, ctx: RuleContext) -> Outcome:
    return Outcome("yes", _cell(row, "detail")) if _cell(row, "verdict") == "not testable" else Outcome("no")


def chance_table(tables: Path | None) -> pd.DataFrame:
    """Every chance reference of the run (``tables/*_chance.csv`` named in :data:`CHANCE_METRICS`)
    with the quantity pattern it covers (``pattern``), the metric's range and whether the frozen
    encoder sits at the random-init floor (``at_floor``)."""
    cols = ["source", "metric", "pattern", "frozen", "random_init", "reaches", "at_floor"]
    if tables is None:
        return pd.DataFrame(columns=cols)
    rows = []
    for name, patterns in CHANCE_METRICS.items():
        path = Path(tables) / name
        if not path.is_file():
            continue
        t = pd.read_csv(path)
        for _, c in t.iterrows():
            metric = str(c["metric"])
            if metric == "value" or metric not in patterns:
                metric = f"{c['group']} / {metric}" if metric != "value" else str(c["group"])
            if metric not in patterns:
                continue
            lo, hi = _range(metric)
            frozen, rand = float(c["frozen"]), float(c["random_init"])
            rows.append({"source": name, "metric": metric, "pattern": patterns[metric], "frozen": frozen,
                         "random_init": rand,
                         "reaches": str(c["random_reaches_frozen"]).lower() == "true",
                         "at_floor": abs(frozen - rand) <= FLOOR_TOL * (hi - lo)})
    return pd.DataFrame(rows, columns=cols)


def chance_hits(quantities, chance: pd.DataFrame) -> list[str]:
    """The chance references that exclude a claim reading ``quantities``: one phrase per metric on
    which random init reaches the frozen encoder or the frozen encoder sits at its floor."""
    out = []
    for _, c in chance.iterrows():
        if not any(fnmatchcase(q, c["pattern"]) for q in quantities):
            continue
        if c["reaches"]:
            out.append(f"{c['metric']}: random init {c['random_init']:.3g} reaches frozen {c['frozen']:.3g}")
        elif c["at_floor"]:
            lo, hi = _range(c["metric"])
            out.append(f"{c['metric']}: frozen {c['frozen']:.3g} lies within {FLOOR_TOL * (hi - lo):.3g} "
                       f"({FLOOR_TOL:.0%} of the range {lo:g} to {hi:g}) of random init {c['random_init']:.3g}")
    return out


def _chance_floor(row: Mapping, ctx: RuleContext) -> Outcome:
    qs = quantities_of(row)
    hits = chance_hits(qs, ctx.chance)
    if hits:
        return Outcome("yes", "; ".join(hits))
    if ctx.chance.empty and qs:
        return Outcome("unknown", "no chance table in this run")
    return Outcome("no")


def _regime(row: Mapping, ctx: RuleContext) -> Outcome:
    qs = quantities_of(row)
    heads = [head_of(q) for q in qs]
    if len(qs) < 2 or any(h is None for h in heads):
        return Outcome("no")                                    # no comparison, or a side is no trained head
    names = list(dict.fromkeys(h.name for h in heads))          # type: ignore[union-attr]
    if len(names) < 2:
        return Outcome("no")                                    # one head on two sets of units
    uniq = {h.name: h for h in heads}                           # type: ignore[union-attr]
    paper = {n: paper_ssr(uniq[n], ctx.paper_folder) for n in names}
    missing = [n for n, v in paper.items() if v is None]
    if missing:
        return Outcome("unknown", f"no paper SSR for {', '.join(missing)}")
    if min(paper.values()) < PAPER_CEILING:                     # type: ignore[type-var]
        return Outcome("no")
    ours = {n: our_ssr(uniq[n], ctx.tables, ctx.paper_folder) if ctx.tables is not None else None for n in names}
    lacking = [n for n, v in ours.items() if v is None]
    if lacking:
        return Outcome("unknown", f"the paper's heads are all >= {PAPER_CEILING:g}% SSR; our SSR of "
                                  f"{', '.join(lacking)} is not in this run's tables")
    text = (f"paper SSR {', '.join(f'{n} {paper[n]:.2f}%' for n in names)}; ours "
            f"{', '.join(f'{n} {ours[n]:.1f}%' for n in names)}")
    if min(ours.values()) < OURS_FAR_BELOW:                     # type: ignore[type-var]
        return Outcome("yes", text)
    return Outcome("no", text)


def _point(row: Mapping, ctx: RuleContext) -> Outcome:
    if "ci_low" not in row or _cell(row, "verdict") not in ("holds", "does not hold"):
        return Outcome("no")                 # a table without interval columns counts as interval-judged
    return Outcome("yes") if pd.isna(pd.to_numeric(row.get("ci_low"), errors="coerce")) else Outcome("no")


def _tie(row: Mapping, ctx: RuleContext) -> Outcome:
    why = tie_detail(row)
    return Outcome("yes", why) if why else Outcome("no")


# an interval end this many Monte Carlo standard errors from its criterion, or nearer, is a tie
TIE_SE = 2.0


def tie_detail(row: Mapping) -> str:
    """Which end of ``row``'s interval lies within :data:`TIE_SE` Monte Carlo standard errors
    (``ci_low_mc_se`` / ``ci_high_mc_se``, :func:`~nearid_lib.claims.quantile_mc_se`) of an edge of
    its criterion: another draw of the same bootstrap could put it on the other side. "" when none
    (or without those columns)."""
    if _cell(row, "verdict") not in ("holds", "does not hold", "inconclusive"):
        return ""
    try:
        test = criterion_from_text(_cell(row, "criterion"))
        low, high = float(row.get("ci_low")), float(row.get("ci_high"))          # type: ignore[arg-type]
    except (ValueError, TypeError):
        return ""
    if not (math.isfinite(low) and math.isfinite(high)) or high < low:
        return ""
    for name, end, col in (("lower", low, "ci_low_mc_se"), ("upper", high, "ci_high_mc_se")):
        se = pd.to_numeric(row.get(col), errors="coerce")
        if pd.isna(se):
            continue
        for e in edges(test):
            if abs(end - e) <= TIE_SE * float(se):
                return f"{name} end {end:.4g} is {abs(end - e):.2g} from {e:g}; Monte Carlo s.e. {float(se):.2g}"
    return ""


RULES: tuple[Rule, ...] = (
    Rule("calibrated", "calibrated, not tested (the world was tuned to every quantity of the criterion)", _calibrated),
    Rule("by construction", "true by construction in this profile", _by_construction),
    Rule("post hoc", "post hoc (the criterion was declared after the claim's first committed result)", _post_hoc),
    Rule("not testable", "not testable in this profile", _not_testable),
    Rule("chance floor", "on a metric a random-init network reaches or where the frozen encoder sits at the "
                         "random-init floor", _chance_floor),
    Rule("regime", "a comparison between heads the paper reports near the ceiling, ours far below it", _regime),
    Rule("point", "a point comparison without an interval", _point),
    Rule("tie", "a tie: an interval end within the bootstrap's Monte Carlo noise of the criterion", _tie),
)


def rule_outcomes(claims: pd.DataFrame, ctx: RuleContext | None = None) -> pd.DataFrame:
    """Every rule's :class:`Outcome` on every claims row (one column per rule name, same index)."""
    ctx = ctx if ctx is not None else RuleContext()
    records = [{r.name: r.test(row, ctx) for r in RULES} for _, row in claims.iterrows()]
    return pd.DataFrame(records, index=claims.index, columns=[r.name for r in RULES])


def excluded(outcomes: pd.DataFrame) -> pd.Series:
    """Per row, the names of the rules that apply ("; "-joined, in :data:`RULES` order), "" for a test."""
    return outcomes.apply(lambda r: "; ".join(n for n in outcomes.columns if r[n].state == "yes"), axis=1) \
        if len(outcomes) else pd.Series([], dtype=object)


def rules_cell(outcomes: pd.DataFrame) -> pd.Series:
    """Per row, every rule's outcome in one compact cell ("calibrated: no; ...; regime: yes (...)")."""
    return outcomes.apply(lambda r: "; ".join(r[n].text(n) for n in outcomes.columns), axis=1) \
        if len(outcomes) else pd.Series([], dtype=object)


def _precondition_state(text: str, ctx: RuleContext) -> str:
    """"q = 89.0%: fails" for a precondition ``q >= 90.0%`` on a head's SSR that our tables hold."""
    parts = text.split()
    if len(parts) != 3 or not parts[0].endswith(".full.main.ssr"):
        return f"{text}: not judged here"
    head = head_of(parts[0])
    v = our_ssr(head, ctx.tables, ctx.paper_folder) if head is not None and ctx.tables is not None else None
    if v is None:
        return f"{text}: not judged here"
    thr = float(parts[2].rstrip("%"))
    ok = v >= thr if parts[1] == ">=" else v <= thr
    return f"{text}: {v:.1f}%, {'met' if ok else 'fails'}"


def history_cell(row: Mapping, ctx: RuleContext) -> str:
    """The claim's versions from git in one cell: each version's commit, its criterion where it
    differs from the row's, its preconditions judged on this run's tables, and the first result."""
    rows = _history_rows(row, ctx)
    if rows.empty:
        return ""
    profile = _cell(row, "profile")
    res = rows[rows["profile"] == profile]
    versions = rows.drop_duplicates("version")
    crit = _cell(row, "criterion")
    parts = []
    for _, v in versions.iterrows():
        if not v["version"]:
            continue
        bits = [f"{v['version']} {v['declared']}"]
        if crit and not _same_criterion(v["criterion"], crit):
            bits.append(f"criterion {v['criterion']}")
        if v["preconditions"]:
            bits.append("preconditions " + "; ".join(_precondition_state(p, ctx) for p in v["preconditions"].split("; ")))
        if str(v["current"]) == "True":
            bits.append("current")
        parts.append(", ".join(bits))
    first = res["first_result"].iloc[0] if len(res) and res["first_result"].iloc[0] else ""
    return "; ".join(parts) + (f"; first {profile} result {first}" if first else "")
