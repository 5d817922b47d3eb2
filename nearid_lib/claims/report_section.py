"""The claims section of the report (``figures/README.md``): which claims are tests of the papers'
claims and which are not counted (and why), the project's own questions apart, how firm each
verdict is (**leaning** verdicts), the summary line, the training seeds behind them and the link
from a failing claim to its explanation.

:func:`claims_section` returns the section as Markdown lines and tables (DataFrames), which
:func:`nearid_lib.report.render_report` renders.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from .criteria import AtLeast, AtMost, Greater, RatioAtLeast, Within, criterion_from_text
from ..paths import repo_root
from ..stats import holm_reject

__all__ = ["point_claims", "seeds_line", "why_links", "summary_lines", "calibrated_rows", "FLOAT_ROUNDING_MARGIN",
           "trained", "leaning", "leaning_detail", "not_counted", "own_questions", "firmness_lines",
           "claims_section", "VERDICTS", "NOT_COUNTED"]

VERDICTS = ("holds", "does not hold", "inconclusive", "not testable")

# How far a float-rounding rerun moved an interval end of a trained claim, as a share of the
# interval's width in the run read: the largest share over the float-rounding twins recorded so far,
# rounded up (benchmarks/float_rounding_margin.py, benchmarks/results/float_rounding_margin.md names
# the twin and the claim). A verdict that such a move would change is "leaning".
FLOAT_ROUNDING_MARGIN = 0.59
FLOAT_ROUNDING_RESULTS = "benchmarks/results/float_rounding_margin.md"

# why a claim row is not counted among the tests of the papers' claims, in the order the report lists them
NOT_COUNTED = (
    ("calibrated", "calibrated, not tested (the world was tuned to the criterion)"),
    ("by construction", "true by construction in this profile"),
    ("revised", "criterion revised after a result was seen (its history beside it)"),
    ("not testable", "not testable in this profile"),
    ("chance", "on a metric a random-init network also reaches"),
    ("point", "a point comparison without an interval"),
    ("tie", "a tie: an interval end within the bootstrap's Monte Carlo noise of the criterion"),
)
# an interval end this many Monte Carlo standard errors from its criterion, or nearer, is a tie
TIE_SE = 2.0


def ties(claims: pd.DataFrame) -> pd.Series:
    """True for a claim whose interval has an end within :data:`TIE_SE` Monte Carlo standard errors
    (``ci_low_mc_se`` / ``ci_high_mc_se``, :func:`~nearid_lib.claims.quantile_mc_se`) of an edge of its
    criterion: another draw of the same bootstrap could put that end on the other side, so its
    verdict is decided by noise. Tables without those columns have no ties."""
    out = pd.Series(False, index=claims.index)
    if "ci_low_mc_se" not in claims:
        return out
    for i, row in claims.iterrows():
        iv = _interval(row)
        try:
            test = criterion_from_text(str(row.get("criterion", "")))
        except ValueError:
            continue
        if iv is None or row.get("verdict") not in ("holds", "does not hold", "inconclusive"):
            continue
        _, low, high = iv
        for end, se in ((low, row.get("ci_low_mc_se")), (high, row.get("ci_high_mc_se"))):
            se = pd.to_numeric(se, errors="coerce")
            if pd.notna(se) and any(abs(end - e) <= TIE_SE * float(se) for e in _edges(test)):
                out[i] = True
    return out


def _text(frame: pd.DataFrame, col: str) -> pd.Series:
    """A text column as strings, "" where absent or empty."""
    if col not in frame:
        return pd.Series([""] * len(frame), index=frame.index, dtype=object)
    return frame[col].fillna("").astype(str)


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


def calibrated_rows(claims: pd.DataFrame) -> pd.Series:
    """True for a claim whose criterion is a calibration target of the profile's world (column
    ``calibrated``): listed as "calibrated, not tested", never counted."""
    return _text(claims, "calibrated").str.len() > 0


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


def _edges(test) -> tuple[float, ...]:
    if isinstance(test, Within):
        return (-test.tol, test.tol)
    if isinstance(test, Greater):
        return (test.margin,)
    if isinstance(test, RatioAtLeast):
        return (test.ratio,)
    assert isinstance(test, (AtLeast, AtMost))
    return (test.threshold,)


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
        edge = min(_edges(test), key=lambda e: abs(v - e))
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


def not_counted(claims: pd.DataFrame) -> pd.Series:
    """Per claim row, why it is not counted among the tests of the papers' claims ("; "-joined
    names of :data:`NOT_COUNTED`), "" for a test. Column ``chance`` must be filled
    (:func:`nearid_lib.report.chance_notes`)."""
    flags = {"calibrated": calibrated_rows(claims),
             "by construction": _text(claims, "by_construction").str.len() > 0,
             "revised": _text(claims, "earlier_verdicts").str.len() > 0,
             "not testable": claims["verdict"].eq("not testable") if "verdict" in claims else False,
             "chance": _text(claims, "chance").str.len() > 0,
             "point": point_claims(claims),
             "tie": ties(claims)}
    out = pd.Series([""] * len(claims), index=claims.index, dtype=object)
    for name, _ in NOT_COUNTED:
        hit = pd.Series(flags[name], index=claims.index).astype(bool)
        out[hit] = [f"{o}; {name}" if o else name for o in out[hit]]
    return out


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


def summary_lines(claims: pd.DataFrame, share: float = FLOAT_ROUNDING_MARGIN) -> list[str]:
    """The claims summary: verdict counts over the **tests of the papers' claims** only (no reason of
    :func:`not_counted`, not one of :func:`own_questions`), with the leaning ones among them; then
    what was not counted and why (a claim may have several reasons), and the own questions."""
    own = own_questions(claims)
    why_not = not_counted(claims)
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
        out.append(f"Not counted as tests: {len(rest)} claim(s) (column `not counted`; a claim may have more "
                   "than one reason): " + "; ".join(f"{n} {label}" for label, n in reasons if n) + ".")
    if own.any():
        out.append(f"Our own questions, not the papers' claims: {int(own.sum())} (section \"Our own questions\").")
    return [" ".join(out), "", chance_holds_line(claims, tested), ""]


def _verdict_cells(frame: pd.DataFrame, share: float) -> pd.DataFrame:
    frame = frame.copy()
    lean = frame.apply(lambda r: leaning(r, share), axis=1) if len(frame) else pd.Series(dtype=object)
    frame["leaning"] = frame.apply(lambda r: leaning_detail(r, share), axis=1) if len(frame) else lean
    frame["leaning"] = [f"{lab}: {d}" if lab else "" for lab, d in zip(lean, frame["leaning"])]
    cal = calibrated_rows(frame)
    frame.loc[cal, "verdict"] = "calibrated, not tested (" + frame.loc[cal, "verdict"].astype(str) + ")"
    has = lean.astype(bool) & ~cal
    frame.loc[has, "verdict"] = frame.loc[has, "verdict"].astype(str) + " (**" + lean[has] + "**)"
    tie = ties(frame) & ~cal
    frame.loc[tie, "verdict"] = "tie (" + frame.loc[tie, "verdict"].astype(str) + ")"
    return frame


_COLUMNS = ("claim", "paper", "ours", "evidence", "verdict", "Holm", "leaning", "why", "not counted", "own_question", "flags", "chance",
            "calibrated", "by_construction", "earlier_verdicts", "criterion", "detail", "revision", "profile", "source")


def claims_section(frame: pd.DataFrame, intro: Sequence[str] = (), share: float = FLOAT_ROUNDING_MARGIN
                   ) -> list[str | pd.DataFrame]:
    """The "Claims checked" section: ``intro``, the summary, the firmness paragraph, the tests of the
    papers' claims, the claims not counted (with why), the point comparisons and the own questions.
    ``frame``: every claims table, with ``chance`` and ``why`` filled. Items are Markdown lines or
    tables to render."""
    own, why_not = own_questions(frame), not_counted(frame)
    point = point_claims(frame)
    shown = _verdict_cells(frame, share).assign(**{"not counted": why_not,
                                                    "Holm": holm_column(frame, ~own & (why_not == ""))})

    def cols(rows: pd.DataFrame, drop: Sequence[str]) -> pd.DataFrame:
        """The columns of :data:`_COLUMNS` that some row of ``rows`` fills, less ``drop``."""
        return rows[[c for c in _COLUMNS if c in rows and c not in drop and _text(rows, c).str.len().gt(0).any()]]

    out: list[str | pd.DataFrame] = ["## Claims checked", "", *intro, *summary_lines(frame, share)]
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
                "Each row says why (column `not counted`): the world was calibrated to the criterion; the profile "
                "makes it true by construction (column `by_construction`); its criterion was revised after a "
                "result was seen (the verdict of every earlier criterion, judged on this run's numbers, stays "
                "beside it in `earlier_verdicts`, the reason in `revision`); a declared precondition fails here "
                "(e.g. the paper's effect is between heads near the ceiling and ours are far below it: `detail`); "
                "a network at random init reaches the pretrained frozen encoder on its metric (column "
                "`chance`); or an end of its interval lies within two Monte Carlo standard errors of the "
                "criterion (a tie, its verdict marked so: another draw of the bootstrap could move it).", "",
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

