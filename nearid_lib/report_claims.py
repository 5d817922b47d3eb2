"""The claims section of the report (``figures/README.md``): which claims count as tested, the
summary line, the training seeds behind them and the link from a failing claim to its explanation."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .paths import repo_root

__all__ = ["point_claims", "seeds_line", "why_links", "summary_lines", "calibrated_rows"]


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
    def most(v) -> int:
        parts = [int(float(x)) for x in str(v).split("/") if x.strip() not in ("", "nan")]
        return max(parts, default=0)
    per = claims.assign(_n=claims["seeds"].map(most)).groupby("source", sort=True)["_n"].max()
    if per.empty or per.max() <= 0:
        return ""
    top = int(per.max())
    fewer = [f"`{src}` ({n})" for src, n in per.items() if 0 < n < top]
    line = f"Training seeds behind the claims (column `seeds`, per side): up to {top}."
    if fewer:
        line += (" Fewer in " + ", ".join(fewer) + ": the profile trains those models fewer times "
                 "(docs/mini.md, \"Seeds\").")
    return line


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
    if "calibrated" not in claims:
        return pd.Series(False, index=claims.index)
    return claims["calibrated"].fillna("").astype(str).str.len() > 0


def summary_lines(claims: pd.DataFrame) -> list[str]:
    """The claims summary: verdict counts over the **tested** claims only -- judged on an interval,
    not a calibration target of the profile's world (column ``calibrated``), and on no metric where a
    random-init network reaches the frozen encoder (column ``chance``) -- then what was left out."""
    verdicts = ("holds", "does not hold", "inconclusive", "not testable")
    point, cal = point_claims(claims), calibrated_rows(claims)
    chance = claims["chance"].fillna("").astype(str).str.len() > 0 if "chance" in claims else point & False
    tested = ~point & ~cal & ~chance
    counts = claims.loc[tested, "verdict"].value_counts()
    left = [f"{int(n)} {what}" for n, what in ((cal.sum(), "calibrated, not tested (the world was tuned to "
                                               "the criterion)"),
                                              ((chance & ~cal).sum(), "on a metric a random-init network "
                                               "also reaches (column `chance`)"),
                                              ((point & ~cal & ~chance).sum(), "point comparisons without an "
                                               "interval"))
            if n]
    return [f"Summary over the {int(tested.sum())} tested claims: "
            + ", ".join(f"{counts.get(v, 0)} {v}" for v in verdicts) + "."
            + (f" Not counted: {'; '.join(left)}." if left else ""), ""]
