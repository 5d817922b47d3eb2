"""The claims section of the report (``figures/README.md``): which claims are tests of the papers'
claims and which are not counted (and why: the rules of :mod:`.exclusions`, each outcome shown per
claim), when each criterion was declared (:mod:`.history`), the project's own questions apart, how
firm each verdict is (**leaning** verdicts), the summary line, the training seeds behind them and the
link from a failing claim to its explanation.

:func:`claims_section` returns the section as Markdown lines and tables (DataFrames), which
:func:`nearid_lib.report.render_report` renders.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from .criteria import criterion_from_text, edges
from .exclusions import RULES, TIE_SE, RuleContext, excluded, history_cell, rule_outcomes, rules_cell, tie_detail
from ..paths import repo_root
from ..stats import holm_reject

__all__ = ["point_claims", "seeds_line", "why_links", "summary_lines", "calibrated_rows", "FLOAT_ROUNDING_MARGIN",
           "trained", "leaning", "leaning_detail", "not_counted", "own_questions", "firmness_lines",
           "claims_section", "VERDICTS", "NOT_COUNTED", "TIE_SE", "ties", "history_line", "outcomes_of"]

VERDICTS = ("holds", "does not hold", "inconclusive", "not testable")

# How far a float-rounding rerun moved an interval end of a trained claim, as a share of the
# interval's width in the run read: the largest share over the float-rounding twins recorded so far,
# rounded up (benchmarks/float_rounding_margin.py, benchmarks/results/float_rounding_margin.md names
# the twin and the claim). A verdict that such a move would change is "leaning".
FLOAT_ROUNDING_MARGIN = 0.59
FLOAT_ROUNDING_RESULTS = "benchmarks/results/float_rounding_margin.md"

# why a claim row is not counted among the tests of the papers' claims: the rules of .exclusions,
# in the order the report lists them
NOT_COUNTED = tuple((r.name, r.label) for r in RULES)


def outcomes_of(claims: pd.DataFrame, context: RuleContext | None = None) -> pd.DataFrame:
    """Every rule's outcome on every claims row (:func:`~nearid_lib.claims.exclusions.rule_outcomes`);
    ``context`` None: no run tables (the rules that read them say "unknown"), the committed history."""
    return rule_outcomes(claims, context if context is not None else RuleContext())


def ties(claims: pd.DataFrame) -> pd.Series:
    """True for a claim whose interval has an end within :data:`TIE_SE` Monte Carlo standard errors
    of an edge of its criterion (:func:`~nearid_lib.claims.exclusions.tie_detail`): its verdict is
    decided by noise. Tables without the standard-error columns have no ties."""
    if not len(claims):
        return pd.Series([], dtype=bool)
    return claims.apply(lambda r: bool(tie_detail(r)), axis=1).astype(bool)


def _text(frame: pd.DataFrame, col: str) -> pd.Series:
    """A text column as strings, "" where absent or empty."""
    if col not in frame:
        return pd.Series([""] * len(frame), index=frame.index, dtype=object)
    vals = frame[col].astype(object)
    return vals.where(vals.notna(), "").astype(str)


def point_claims(claims: pd.DataFrame) -> pd.Series:
    """True for a claim judged on point values: it has a verdict of holds / does not hold but no
    interval (``ci_low`` empty). Claims files without the interval columns count as interval-judged."""
    if "ci_low" not in claims:
        return pd.Series(False, index=claims.index)
    decided = claims["verdict"].isin(["holds", "does not hold"])
    return decided & pd.to_numeric(claims["ci_low"], errors="coerce").isna()


def seeds_line(claims: pd.DataFrame) -> str:
    """One sentence: the most training seeds behind any claim of each claims file (column ``seeds``,
    one count per side, e.g. ``3/1``: a trained head of 3 seeds against a frozen encoder), naming the
    files whose claims rest on fewer seeds than the most any file has. "" without the column."""
    if "seeds" not in claims or "source" not in claims:
        return ""
    per = claims.assign(_n=claims["seeds"].map(_most_seeds)).groupby("source", sort=True)["_n"].max()
    if per.empty or per.max() <= 0:
        return ""
    top = int(per.max())
    fewer = [f"`{src}` ({n})" for src, n in per.items() if 0 < n < top]
    line = f"Training seeds behind the claims (column `seeds`, per side): up to {top}."
    if fewer:
        line += (" Fewer in " + ", ".join(fewer) + ": the profile trains those models fewer times "
                 "(docs/mini.md, \"Seeds\").")
    return line


def _most_seeds(v) -> int:
    parts = [int(float(x)) for x in str(v).split("/") if x.strip() not in ("", "nan", "None")]
    return max(parts, default=0)


def trained(seeds) -> bool:
    """Whether a claim's ``seeds`` cell (one count per side, e.g. ``"3/1"``) has a trained side:
    more than one training seed, the part of an interval a float-rounding rerun draws anew."""
    return _most_seeds(seeds) > 1


def why_links(claims: pd.DataFrame, docs: Path | None = None) -> pd.Series:
    """Per claim row that does not hold or is inconclusive, a Markdown link to the paragraph of
    ``docs/<profile>.md`` that explains it (an anchor ``id="claim-<key>"``); "" elsewhere."""
    docs = Path(docs) if docs is not None else repo_root() / "docs"
    out = pd.Series([""] * len(claims), index=claims.index, dtype=object)
    if "key" not in claims or "profile" not in claims:
        return out
    texts: dict[str, str] = {}
    for i, r in claims.iterrows():
        doc = docs / f"{r['profile']}.md"
        if r.get("verdict") not in ("does not hold", "inconclusive") or not doc.is_file():
            continue
        text = texts.setdefault(doc.name, doc.read_text())
        if f'id="claim-{r["key"]}"' in text:
            out[i] = f"[why](../docs/{doc.name}#claim-{r['key']})"
    return out


def calibrated_rows(claims: pd.DataFrame, outcomes: pd.DataFrame | None = None) -> pd.Series:
    """True for a claim whose every quantity is a calibration target of the profile's world (rule
    ``calibrated``): listed as "calibrated, not tested", never counted."""
    outcomes = outcomes if outcomes is not None else outcomes_of(claims)
    return outcomes["calibrated"].map(lambda o: o.state == "yes").astype(bool) if len(claims) else \
        pd.Series([], dtype=bool)


# --------------------------------------------------------------------------- how firm a verdict is
def _interval(row) -> tuple[float, float, float] | None:
    try:
        est, low, high = (float(row.get(c)) for c in ("estimate", "ci_low", "ci_high"))
    except (TypeError, ValueError):
        return None
    return (est, low, high) if all(map(math.isfinite, (est, low, high))) and high >= low else None


def _moved(test, est: float, low: float, high: float, m: float) -> set[str]:
    """The verdicts of the interval with each end moved by -m, 0 or +m (independently, never crossing)."""
    return {test.decide(est, low + dl, high + dh) for dl in (-m, 0.0, m) for dh in (-m, 0.0, m)
            if low + dl <= high + dh}


def leaning(row, share: float = FLOAT_ROUNDING_MARGIN) -> str:
    """``"leaning holds"`` / ``"leaning does not hold"`` for a verdict on a trained quantity
    (:func:`trained`) that would change if an end of its interval moved by ``share`` of the
    interval's width (:data:`FLOAT_ROUNDING_MARGIN`: what a float-rounding rerun moved); "" for a
    firm verdict, an untrained one, one without an interval or criterion, and "not testable".

    The direction is the verdict's for holds / does not hold; for an inconclusive verdict it is the
    side the moved interval can reach (the estimate's side when it can reach both)."""
    verdict = row.get("verdict")
    if verdict not in ("holds", "does not hold", "inconclusive") or not trained(row.get("seeds")):
        return ""
    iv = _interval(row)
    try:
        test = criterion_from_text(row.get("criterion", ""))
    except ValueError:
        return ""
    if iv is None:
        return ""
    est, low, high = iv
    reach = _moved(test, est, low, high, share * (high - low)) - {verdict}
    if not reach:
        return ""
    if verdict != "inconclusive":
        return f"leaning {verdict}"
    side = reach.pop() if len(reach) == 1 else test.decide(est, est, est)
    return f"leaning {side}" if side in ("holds", "does not hold") else ""


def leaning_detail(row, share: float = FLOAT_ROUNDING_MARGIN) -> str:
    """For a leaning verdict (:func:`leaning`): which end lies how near the criterion, against the
    margin, e.g. ``"lower end 1.0% is 1.0% from the criterion 0.0%; margin 9.5% (0.59 x the width
    16.0%)"``; "" for a firm one."""
    lean = leaning(row, share)
    if not lean:
        return ""
    est, low, high = _interval(row)          # type: ignore[misc]
    text = str(row.get("criterion", ""))
    test = criterion_from_text(text)
    fmt = (lambda v: f"{100 * v:.1f}%") if text.rstrip().endswith("%") else (lambda v: f"{v:.3f}")
    m = share * (high - low)
    near = []
    for name, v in (("lower", low), ("upper", high)):
        edge = min(edges(test), key=lambda e: abs(v - e))
        if abs(v - edge) <= m:
            near.append(f"{name} end {fmt(v)} is {fmt(abs(v - edge))} from the criterion {fmt(edge)}")
    return "; ".join(near) + f"; margin {fmt(m)} ({share:.2f} x the width {fmt(high - low)})"


def firmness_lines(frame: pd.DataFrame, share: float = FLOAT_ROUNDING_MARGIN) -> list[str]:
    """The paragraph on how firm a verdict is: the float-rounding margin, how it was measured, and
    the leaning verdicts of this run by key."""
    lean = frame.apply(lambda r: leaning(r, share), axis=1) if len(frame) else pd.Series(dtype=object)
    names = [f"{r.get('key') if isinstance(r.get('key'), str) else r.get('claim')} ({lab})"
             for (_, r), lab in zip(frame.iterrows(), lean) if lab]
    return ["**How firm a verdict is.** A run that differs from this one only in float rounding "
            "(`NEARID_FOLD_BATCHNORM` switched: the frozen CNN's BatchNorms folded where this run leaves them "
            "unfolded, or the reverse; another processor's kernels do the same) trains every head anew, a new draw of each seed's training, and with a few seeds "
            "the seed term of an interval moves with it. In the float-rounding twins recorded so far an end "
            f"of a trained claim's interval moved by up to **{share:.2f} of the interval's width** "
            f"(`{FLOAT_ROUNDING_RESULTS}`, measured by `benchmarks/float_rounding_margin.py`; docs/mini.md, "
            "\"Verdicts under float rounding\"); claims on frozen encoders alone kept their intervals to the "
            "printed digit. A verdict on a trained quantity that a move of its interval's ends by that share "
            "would change is marked **leaning**, with the side it leans to (verdict cell and column "
            "`leaning`): read it as a direction that a rerun may not keep, not as a finding. "
            + ("The margin exceeds half a width, so every inconclusive verdict on a trained quantity leans (its "
               "nearer end is at most half a width from the criterion): its mark names the side a rerun could "
               "tip it to. " if share >= 0.5 else "")
            + (f"Leaning in this run: {', '.join(names)}." if names else "No verdict of this run is leaning.")
            + " `scripts/compare_runs.py --verdicts` lists a twin's flips among the leaning verdicts apart "
            "from the others.", ""]


# --------------------------------------------------------------------------- what counts as a test
def own_questions(claims: pd.DataFrame) -> pd.Series:
    """True for a claim the project asks itself (column ``own_question``: why it is no paper's
    claim, e.g. ID-Sim 2c / 2d: NearID is not in ID-Sim's Fig. 6): shown apart, never counted."""
    return _text(claims, "own_question").str.len() > 0


def not_counted(claims: pd.DataFrame, outcomes: pd.DataFrame | None = None) -> pd.Series:
    """Per claim row, why it is not counted among the tests of the papers' claims: the names of the
    rules (:data:`NOT_COUNTED`) whose outcome is "yes", "; "-joined; "" for a test. ``outcomes``:
    :func:`outcomes_of` the rows (computed without run tables when not given)."""
    if not len(claims):
        return pd.Series([], dtype=object)
    outcomes = outcomes if outcomes is not None else outcomes_of(claims)
    return excluded(outcomes).astype(object)


def history_line(claims: pd.DataFrame, outcomes: pd.DataFrame) -> str:
    """What git says of the criteria judged here (rule ``post hoc``, ``docs/claims_history.csv``):
    how many were declared before their claim's first committed result in this profile, and which
    after."""
    ph = list(outcomes["post hoc"]) if len(claims) else []
    keys = list(_text(claims, "key"))
    line = ("**When each criterion was declared.** Each claim is declared once, in `nearid_lib/*/claims.py`; "
            "when its criterion was declared and when the claim first had a committed result in this profile are "
            "read from git (`docs/claims_history.csv`, written by `python -m nearid_lib.claims.history`; column "
            "`history`). ")
    judged = [(k, o.tag) for k, o in zip(keys, ph) if o.tag in ("before", "after")]
    before = [k for k, t in judged if t == "before"]
    after = [k for k, t in judged if t == "after"]
    fresh = [k for k, o in zip(keys, ph) if o.tag == "no result"]
    if judged:
        line += (f"Of the {len(judged)} criteria judged here whose claim has a committed result, {len(before)} were "
                 "declared before the claim's first committed result"
                 + (f"; {len(after)} after it, post hoc and not counted: {', '.join(after)}." if after else "."))
    if fresh:
        line += (f"{' ' if judged else ''}{len(fresh)} claim(s) have no committed result in this profile: nothing was seen before their "
                 "criteria, none is post hoc here.")
    unknown = [k or "(no key)" for k, o in zip(keys, ph) if o.state == "unknown"]
    if unknown:
        line += (f" {len(unknown)} row(s) have no declared criterion (comparisons built in code, or a criterion no "
                 "declaration names): " + ", ".join(unknown) + ".")
    line += (" A result is a claims table committed under `figures/` that holds the claim's key; the point claims "
             "without keys committed before the keyed criteria (cf4bb66 to b27e3a5), and the tables holding the "
             "quantities' point values, are not read as results.")
    return line


# "holds" is one side of a 95% two-sided interval: a one-sided test at 2.5%
ONE_SIDED_ALPHA = 0.025


def holm_column(claims: pd.DataFrame, tested: pd.Series) -> pd.Series:
    """Per claim, its verdict after Holm's correction over the counted tests (``tested``): "holds" for
    a "holds" whose ``p_hold`` (:mod:`.criteria`) survives at family-wise :data:`ONE_SIDED_ALPHA`,
    "not after Holm" for one that does not; "" for every other row (not a "holds", not counted, or a
    table written before p-values were kept)."""
    out = pd.Series("", index=claims.index, dtype=object)
    if "p_hold" not in claims or not tested.any():
        return out
    rows = claims.index[tested]
    keep = holm_reject(pd.to_numeric(claims.loc[rows, "p_hold"], errors="coerce").to_numpy(), ONE_SIDED_ALPHA)
    for i, ok in zip(rows, keep):
        if str(claims.at[i, "verdict"]) == "holds":
            out[i] = "holds" if ok else "not after Holm"
    return out


def chance_holds_line(claims: pd.DataFrame, tested: pd.Series) -> str:
    """How many of the counted tests would read "holds" by chance alone, and how many of this run's
    survive Holm's correction over them."""
    m = int(tested.sum())
    holds = int((claims.loc[tested, "verdict"] == "holds").sum()) if m else 0
    line = (f"**Multiple tests.** Each \"holds\" is a one-sided test at {ONE_SIDED_ALPHA:.1%}: if none of the "
            f"{m} counted effects were present here, about {m * ONE_SIDED_ALPHA:.1f} \"holds\" would be expected by "
            "chance alone.")
    holm = holm_column(claims, tested)
    if (holm != "").any():
        kept = int((holm == "holds").sum())
        line += (f" After Holm's correction over the {m} (family-wise {ONE_SIDED_ALPHA:.1%}, bootstrap p-values "
                 f"in `p_hold`), {kept} of the {holds} \"holds\" remain (column `Holm`).")
    return line


def summary_lines(claims: pd.DataFrame, share: float = FLOAT_ROUNDING_MARGIN,
                  outcomes: pd.DataFrame | None = None) -> list[str]:
    """The claims summary: verdict counts over the **tests of the papers' claims** only (no rule of
    :func:`not_counted` applies, not one of :func:`own_questions`), with the leaning ones among them;
    then what was not counted and why (a claim may have several reasons), rule outcomes that could
    not be decided, and the own questions."""
    outcomes = outcomes if outcomes is not None else outcomes_of(claims)
    own = own_questions(claims)
    why_not = not_counted(claims, outcomes)
    tested = ~own & (why_not == "")
    t = claims[tested]
    counts = t["verdict"].value_counts()
    lean = t.apply(lambda r: leaning(r, share), axis=1) if len(t) else pd.Series(dtype=object)
    parts = []
    for v in VERDICTS[:3]:
        n = int(counts.get(v, 0))
        lv = lean[t["verdict"] == v] if len(t) else lean
        sub = [f"{int((lv == f'leaning {d}').sum())} leaning {d}" for d in ("holds", "does not hold")
               if (lv == f"leaning {d}").any()]
        parts.append(f"{n} {v}" + (f" ({', '.join(sub)})" if sub else ""))
    out = [f"Summary over the {int(tested.sum())} tests of the papers' claims: " + ", ".join(parts) + "."]
    rest = claims[~own & ~tested]
    if len(rest):
        reasons = [(label, int(why_not[~own].str.split("; ").map(lambda r, n=name: n in r).sum()))
                   for name, label in NOT_COUNTED]
        out.append(f"Not counted as tests: {len(rest)} claim(s) (column `not counted`, each rule's outcome in "
                   "column `rules`; a claim may have more than one reason): "
                   + "; ".join(f"{n} {label}" for label, n in reasons if n) + ".")
    unknown = [(name, int((tested & outcomes[name].map(lambda o: o.state == "unknown")).sum()))
               for name, _ in NOT_COUNTED] if len(claims) else []
    if any(n for _, n in unknown):
        out.append("Rules that could not be decided (the claim stays counted; column `rules` says what is "
                   "missing): " + "; ".join(f"{name} on {n} claim(s)" for name, n in unknown if n) + ".")
    if own.any():
        out.append(f"Our own questions, not the papers' claims: {int(own.sum())} (section \"Our own questions\").")
    return [" ".join(out), "", chance_holds_line(claims, tested), ""]


def _verdict_cells(frame: pd.DataFrame, share: float, outcomes: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    lean = frame.apply(lambda r: leaning(r, share), axis=1) if len(frame) else pd.Series(dtype=object)
    frame["leaning"] = frame.apply(lambda r: leaning_detail(r, share), axis=1) if len(frame) else lean
    frame["leaning"] = [f"{lab}: {d}" if lab else "" for lab, d in zip(lean, frame["leaning"])]
    cal = calibrated_rows(frame, outcomes)
    frame.loc[cal, "verdict"] = "calibrated, not tested (" + frame.loc[cal, "verdict"].astype(str) + ")"
    has = lean.astype(bool) & ~cal
    frame.loc[has, "verdict"] = frame.loc[has, "verdict"].astype(str) + " (**" + lean[has] + "**)"
    tie = (outcomes["tie"].map(lambda o: o.state == "yes").astype(bool) & ~cal) if len(frame) else cal
    frame.loc[tie, "verdict"] = "tie (" + frame.loc[tie, "verdict"].astype(str) + ")"
    return frame


_COLUMNS = ("claim", "paper", "ours", "evidence", "verdict", "Holm", "leaning", "why", "not counted", "rules",
            "own_question", "flags", "chance", "history", "earlier_verdicts", "criterion", "detail", "revision",
            "profile", "source")


def claims_section(frame: pd.DataFrame, intro: Sequence[str] = (), share: float = FLOAT_ROUNDING_MARGIN,
                   context: RuleContext | None = None) -> list[str | pd.DataFrame]:
    """The "Claims checked" section: ``intro``, when the criteria were declared, the summary, the
    firmness paragraph, the tests of the papers' claims, the claims not counted (with every rule's
    outcome), the point comparisons and the own questions. ``frame``: every claims table, with
    ``chance`` and ``why`` filled; ``context``: what the rules read (the run's tables, the paper's
    values, the history). Items are Markdown lines or tables to render."""
    context = context if context is not None else RuleContext()
    outcomes = outcomes_of(frame, context)
    own, why_not = own_questions(frame), not_counted(frame, outcomes)
    point = outcomes["point"].map(lambda o: o.state == "yes").astype(bool) if len(frame) else own
    hist = frame.apply(lambda r: history_cell(r, context), axis=1) if len(frame) else own
    shown = _verdict_cells(frame, share, outcomes).assign(**{
        "not counted": why_not, "rules": rules_cell(outcomes), "history": hist,
        "Holm": holm_column(frame, ~own & (why_not == ""))})

    def cols(rows: pd.DataFrame, drop: Sequence[str]) -> pd.DataFrame:
        """The columns of :data:`_COLUMNS` that some row of ``rows`` fills, less ``drop``."""
        return rows[[c for c in _COLUMNS if c in rows and c not in drop and _text(rows, c).str.len().gt(0).any()]]

    out: list[str | pd.DataFrame] = ["## Claims checked", "", *intro, history_line(frame, outcomes), "",
                                     *summary_lines(frame, share, outcomes)]
    seeds = seeds_line(frame)
    if seeds:
        out += [seeds, ""]
    out += firmness_lines(frame[~own], share)
    flagged = _text(frame, "flags").str.len() > 0
    if flagged.any():
        out += [f"{int(flagged.sum())} claim(s) compare a quantity that lies below its metric's chance level "
                "(column `flags`): such a number measures what the benchmark rewards, not identity.", ""]
    reached = _text(frame, "chance").str.len() > 0
    if reached.any():
        out += [f"{int(reached.sum())} claim(s) compare a metric on which a network at random init reaches the "
                "pretrained frozen encoder (column `chance`, from the chance references below): their numbers say "
                "what the analogue rewards in pixels, not what the encoder knows about identity.", ""]
    tested = ~own & (why_not == "")
    out += ["### Tests of the papers' claims", "", cols(shown[tested], ("not counted", "own_question")), ""]
    rest = ~own & ~tested & ~point
    if rest.any():
        out += ["### Not counted as tests", "",
                "Each row says which rules apply (column `not counted`) and every rule's outcome (column `rules`); "
                "the rules are code (`nearid_lib.claims.exclusions`), applied to every claim alike: **calibrated** "
                "(every quantity of the criterion is a calibration target of the world), **by construction** (the "
                "criterion reads a quantity the data decides by how it is made), **post hoc** (the criterion was "
                "declared after the claim's first committed result; its versions in `history`, the verdicts of "
                "earlier criteria in `earlier_verdicts`), **not testable**, **chance floor** (on a metric the "
                "criterion reads, a network at random init reaches the pretrained frozen encoder, or the frozen "
                "encoder lies within 2% of the metric's range of the random-init value), **regime** (a comparison "
                "between trained heads the paper reports all at >= 99% SSR while one of ours is below 90%), or "
                "**tie** (an end of its interval within two Monte Carlo standard errors of the criterion: another "
                "draw of the bootstrap could move it).", "",
                cols(shown[rest], ("own_question",)), ""]
    if (point & ~own).any():
        out += ["### Point comparisons", "",
                f"{int((point & ~own).sum())} claim(s) are judged on point values, without an interval (a rank "
                "correlation over a handful of methods, a count of metrics won, the best of a few rows): their "
                "verdict describes this run, it does not test the claim.", "",
                cols(shown[point & ~own], ("own_question", "leaning")), ""]
    if own.any():
        out += ["### Our own questions", "",
                "Questions this project asks of the papers' models that no paper claims (column `own_question`): "
                "judged as the claims are, never counted with them.", "",
                cols(shown[own], ("not counted",)), ""]
    return out
