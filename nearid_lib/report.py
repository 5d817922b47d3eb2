"""Tables with the paper's numbers beside ours, and the ``figures/README.md`` report.

Every table in the report is rendered from files: the paper's values come from
``paper_values/<key>.csv`` (transcribed from ``../shared/papers``, described by
``<key>.meta.json``) and ours from the CSV a notebook wrote under ``figures/`` (named by the
meta's ``"ours"`` field). Nothing is typed in here. Claims come from ``tables/claims_*.csv``
(columns ``claim, paper, ours, holds, detail``, :mod:`nearid_lib.claims`), written by the notebooks
that test them.
"""
from __future__ import annotations

import json
import math
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Iterable

import pandas as pd
from PIL import Image

from .io_utils import read_table_meta, skip_reason
from .paper_specs import TableSpec, load_specs, paper_values_dir
from .claims.exclusions import RuleContext, chance_table, quantities_of
from .claims.report_section import (  # noqa: F401  (re-exported: the report's claims API)
    FLOAT_ROUNDING_MARGIN,
    claims_section,
    leaning,
    leaning_detail,
    not_counted,
    point_claims,
    seeds_line,
    summary_lines,
    why_links,
)

__all__ = ["TableSpec", "load_specs", "side_by_side", "render_markdown_table", "render_report", "paper_values_dir",
           "profile_note", "png_caption"]

MISSING = "–"
# a column of ours that stands in for a paper metric the profile cannot measure (mini: M-H against the
# procedural DreamBench++ stand-in, not human ratings), and its label beside the metric's columns
STANDIN = ("_procedural", "(ours, stand-in)")
STANDIN_NOTE = ("`(ours, stand-in)`: the procedural stand-in of the metric (column `<metric>_procedural`; "
                "M-H of the edit grids against 1 - identity change, not human ratings), the number the claims on "
                "it use; the paper's metric itself needs data this profile does not have (human ratings).")


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return MISSING
    if isinstance(v, float):
        # fractions (correlations, rates in 0..1) get 3 decimals, percentages 2, big numbers 1
        if abs(v) < 1:
            return f"{v:.3f}"
        return f"{v:.2f}" if abs(v) < 100 else f"{v:.1f}"
    return str(v)


def side_by_side(paper: pd.DataFrame, ours: pd.DataFrame | None, key_columns: Iterable[str],
                 metrics: Iterable[str]) -> pd.DataFrame:
    """One row per key (paper rows first, then rows only we have); for every metric a
    ``<metric> (paper)`` and ``<metric> (ours)`` column. Metrics absent on one side are blank.
    Where our table also has the metric's stand-in (``<metric>_procedural``, e.g. the M-H of the
    procedural DreamBench++ stand-in that the claims use), it follows as ``<metric> (ours, stand-in)``
    (:data:`STANDIN`), in place of an ``(ours)`` column that no row fills."""
    keys = list(key_columns)
    metrics = list(metrics)
    for k in keys:
        if k not in paper.columns:
            raise KeyError(f"paper table lacks key column {k!r}; has {list(paper.columns)}")
    p = paper[keys + [m for m in metrics if m in paper.columns]].copy()
    p = p.rename(columns={m: f"{m} (paper)" for m in metrics})
    if ours is None or ours.empty:
        merged = p
    else:
        missing = [k for k in keys if k not in ours.columns]
        if missing:
            raise KeyError(f"our table lacks key column(s) {missing}; has {list(ours.columns)}")
        # ``ours_label`` says what *our* row is when it stands in for a paper row (e.g. our frozen
        # EfficientNet-Lite0 beside the paper's frozen SigLIP2); it is shown, never joined on.
        label = ["ours_label"] if "ours_label" in ours.columns else []
        stand = [m + STANDIN[0] for m in metrics if m + STANDIN[0] in ours.columns and ours[m + STANDIN[0]].notna().any()]
        o = ours[keys + label + [m for m in metrics if m in ours.columns] + stand].copy()
        for m in [*metrics, *stand]:   # trained rows: the mean over seeds +- their spread (``<metric>_sd``)
            if m in o.columns and f"{m}_sd" in ours.columns:
                sd = ours[f"{m}_sd"]
                o[m] = [(f"{_fmt(v)} ± {_fmt(e)}" if pd.notna(e) and pd.notna(v) else v)
                        for v, e in zip(o[m], sd)]
        o = o.rename(columns={**{m: f"{m} (ours)" for m in metrics},
                              **{m + STANDIN[0]: f"{m} {STANDIN[1]}" for m in metrics}})
        for k in keys:  # join on strings: CSV readers may type the same key differently
            p[k] = p[k].astype(str)
            o[k] = o[k].astype(str)
        merged = p.merge(o, on=keys, how="outer", sort=False)
        # keep the paper's row order, then ours-only rows in our order
        order = {tuple(r): i for i, r in enumerate(p[keys].itertuples(index=False))}
        extra = {tuple(r): len(order) + i for i, r in enumerate(o[keys].itertuples(index=False))}
        merged["_o"] = [order.get(tuple(r), extra.get(tuple(r), 10**6))
                        for r in merged[keys].itertuples(index=False)]
        merged = merged.sort_values("_o", kind="stable").drop(columns="_o")
    cols = list(keys) + (["ours_label"] if "ours_label" in merged.columns else [])
    for m in metrics:
        for side in ("paper", "ours"):
            c = f"{m} ({side})"
            if c not in merged.columns:
                merged[c] = float("nan")
            cols.append(c)
        if f"{m} {STANDIN[1]}" in merged.columns:    # the stand-in replaces an (ours) column we cannot fill
            if merged[f"{m} (ours)"].isna().all():
                cols.remove(f"{m} (ours)")
            cols.append(f"{m} {STANDIN[1]}")
    return merged[cols].reset_index(drop=True)


def render_markdown_table(df: pd.DataFrame) -> str:
    """A GitHub markdown table; floats formatted, NaN shown as an en dash."""
    header = "| " + " | ".join(str(c) for c in df.columns) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(_fmt(v) for v in r) + " |" for r in df.itertuples(index=False)]
    return "\n".join([header, sep, *rows])


def _read_profile(ours: pd.DataFrame | None, path: Path | None = None) -> str:
    """The profile that produced a table: its provenance sidecar (``Run.write_table``), else its
    ``profile`` column."""
    meta = read_table_meta(path) if path is not None else None
    if meta and meta.get("profile"):
        return str(meta["profile"])
    if ours is None or "profile" not in ours.columns or ours.empty:
        return "unknown"
    return ", ".join(sorted(set(map(str, ours["profile"].dropna()))))


def _joinable(paper: pd.DataFrame, ours: pd.DataFrame, spec: TableSpec) -> bool:
    """True when our table shares the key columns, at least one key value and one metric column."""
    keys = list(spec.key_columns)
    if any(k not in ours.columns for k in keys):
        return False
    if not any(m in ours.columns for m in spec.metrics):
        return False
    pk = set(map(tuple, paper[keys].astype(str).itertuples(index=False)))
    ok = set(map(tuple, ours[keys].astype(str).itertuples(index=False)))
    return bool(pk & ok)


def _shown(paper: pd.DataFrame, spec: TableSpec) -> list[str]:
    """The paper columns shown: keys and metrics; every column of a table without metrics (the
    paper's claims transcribed as text, e.g. ID-Sim Figure 6: the reader needs the text, not ids)."""
    if not spec.metrics:
        return list(paper.columns)
    return [c for c in paper.columns if c in spec.key_columns or c in spec.metrics]


def provenance_summary(tables: Path) -> str:
    """One paragraph from the tables' provenance sidecars: profile(s), commit(s) (``+dirty`` when
    the tree had uncommitted edits), training seeds and the dates of the notebooks that wrote them."""
    metas = [json.loads(p.read_text()) for p in sorted(Path(tables).glob("*.meta.json"))]
    if not metas:
        return ""
    commits = sorted({str(m.get("commit") or "unknown")[:10] + ("+dirty" if m.get("dirty") else "")
                      for m in metas})
    seeds = sorted({int(s) for m in metas for s in (m.get("seeds") or [m.get("seed")]) if s is not None})
    dates = sorted(str(m.get("date", ""))[:16].replace("T", " ") for m in metas if m.get("date"))
    profiles = sorted({str(m.get("profile")) for m in metas})
    return (f"Provenance ({len(metas)} tables, from their `tables/*.meta.json` sidecars): profile "
            f"{', '.join(profiles)}; commit {', '.join(commits)}; seeds {', '.join(map(str, seeds))}; "
            f"written {dates[0]} to {dates[-1]} UTC." if dates else "")


def _reached(chance: pd.DataFrame) -> pd.Series:
    """``random_reaches_frozen`` as booleans, however the CSV reader typed it."""
    return chance["random_reaches_frozen"].astype(str).str.lower() == "true"


def chance_notes(claims: pd.DataFrame, tables: Path) -> pd.Series:
    """Per claim row, the metrics its ``criterion`` reads on which the random-init network reaches the
    pretrained frozen encoder in a chance table (``tables/*_chance.csv``; which quantities a metric
    covers: :data:`nearid_lib.claims.exclusions.CHANCE_METRICS`, e.g. ``mtg_mo`` -> ``<row>.mtg.mo``),
    with both values; "" for every other claim (and without the tables)."""
    notes = pd.Series([""] * len(claims), index=claims.index, dtype=object)
    if "criterion" not in claims:
        return notes
    ch = chance_table(tables)
    ch = ch[ch["reaches"]]
    for i, row in claims.iterrows():
        qs = quantities_of(row)
        notes[i] = "; ".join(f"random init reaches the frozen encoder on {c['metric']} ({c['random_init']:.3g} vs "
                             f"{c['frozen']:.3g})" for _, c in ch.iterrows()
                             if any(fnmatchcase(q, c["pattern"]) for q in qs))
    return notes


def _chance_section(tables: Path) -> list[str]:
    """The chance references (``*_chance.csv`` of :func:`nearid_lib.chance.chance_check`): every
    metric where a random-init network reaches the pretrained encoder first, then all of them."""
    files = sorted(tables.glob("*_chance.csv"))
    if not files:
        return []
    frame = pd.concat([pd.read_csv(f).assign(source=f"tables/{f.name}") for f in files], ignore_index=True)
    if frame.empty:
        return []
    reach = _reached(frame)
    out = ["## Chance references", "",
           "Every benchmark also scores the backbone's class at a fixed random init (never trained). Where "
           "that network reaches the pretrained frozen encoder (`random_reaches_frozen`), the analogue "
           "rewards something a random network reads off the pixels: such a row is not evidence about "
           "identity.", "",
           f"The random-init network reaches the pretrained one on {int(reach.sum())} of {len(frame)} metrics"
           + (":" if reach.any() else "."), ""]
    if reach.any():
        out += [render_markdown_table(frame[reach]), ""]
    out += ["<details><summary>All chance references</summary>", "", render_markdown_table(frame), "",
            "</details>", ""]
    return out


def _cross_section(tables: Path) -> list[str]:
    """Notebook 12's table (``12_cross_paper.csv``): every identity encoder on every paper's
    benchmark, a table no release has, so there is no paper column beside it."""
    f = tables / "12_cross_paper.csv"
    if not f.exists():
        return []
    t = pd.read_csv(f).drop(columns=["key", "profile"], errors="ignore")
    notes = (read_table_meta(f) or {}).get("notes") or []
    return (["## Every identity encoder on every paper's benchmark", "",
             "NearID's head and ID-Sim beside their frozen backbones on NearID-bench, ID-Sim's benchmark and the "
             "FPR galleries, each scored by the code of the notebook that owns the benchmark "
             "(`tables/12_cross_paper.csv`, figure `12_cross_paper.png`). No paper reports this table.", "",
             render_markdown_table(t), ""] + [f"- {n}" for n in notes] + ([""] if notes else []))


def _fpr_sources_section(tables: Path) -> list[str]:
    """Where each FPR method's images came from (``11_fpr_method_sources.csv``, paper runs): the
    user's folder or the generation step, per method, with the datasets and image counts."""
    f = tables / "11_fpr_method_sources.csv"
    if not f.exists():
        return []
    t = pd.read_csv(f)
    t = (t.groupby(["method", "source"], sort=True)
          .agg(datasets=("dataset", lambda d: ", ".join(sorted(map(str, d)))), subjects=("subjects", "sum"),
               images=("images", "sum")).reset_index())
    return ["## FPR: where each method's images come from", "",
            "A method's images are the user's folder when it has one, else the generation step's "
            "(`nearid_lib.fpr.generation`, the diffusers pipelines of FPR Sec. 4; Emu2 and OminiControl "
            "only from a user folder). Per dataset: `tables/11_fpr_method_sources.csv`.", "",
            render_markdown_table(t), ""]


def _placement_section(tables: Path) -> list[str]:
    """ID-Sim's LoRA placement chosen on val (``09_idsim_lora_placement.csv``, notebook 09 with
    ``idsim.adapt_stages_choices``): every candidate's validation scores and the one chosen."""
    f = tables / "09_idsim_lora_placement.csv"
    if not f.exists():
        return []
    t = pd.read_csv(f)
    rule = str(t["rule"].iloc[0]) if "rule" in t and len(t) else ""
    cols = [c for c in ("lora_placement", "identity_val_roc_auc", "anchor_auc", "anchor_auc_low", "anchor_auc_high",
                        "real_instance_val_acc", "n_seeds", "chosen") if c in t]
    return ["## ID-Sim: the LoRA placement, chosen on val", "",
            "Each candidate placement trained once per seed and scored on the val split's validation sets "
            f"(ID-Sim Supp. B.1) before the model is trained; rule: {rule}. The chosen one is the recipe of "
            "every ID-Sim row below (`tables/09_idsim_lora_placement.csv`).", "",
            render_markdown_table(t[cols]), ""]


# the first paragraph of "Claims checked": how a claim is judged and what its verdicts mean
_CLAIMS_INTRO = (
    "Each claim is declared once with its criterion (`nearid_lib/*/claims.py`; when each criterion was declared, "
    "before or after its claim's first committed result, is read from git below) and judged "
    "on a 95% percentile bootstrap interval over test units (identities, MTG pairs, anchors; paired when both "
    "sides are scored on the same units), with every training-dependent quantity averaged over the training "
    "seeds (their spread is shown, and enters the interval as a Student t term with S - 1 degrees of freedom: "
    "with 3 seeds the spread is itself poorly known; where both sides were trained with the same seeds, the "
    "term is drawn once on the per-seed differences, a paired t). Verdicts: **holds** (the interval lies on the "
    "claim's side), **does not hold** (it lies on the other side), **inconclusive** (it straddles the "
    "criterion), **not testable** (no evidence in this profile, a statistic undefined on it, or every side of a "
    "comparison at the metric's floor or ceiling, within 2% of its range). Only tests of the papers' claims are "
    "counted: every reason a claim is not counted is a rule applied by code to every claim "
    "(`nearid_lib.claims.exclusions`; calibrated, by construction, post hoc, not testable, chance floor, regime, "
    "point, tie), and each claim's row shows every rule's outcome (column `rules`); the project's own questions "
    "are apart. A quantity below its metric's chance level (PA 50%, a correlation 0, a triplet accuracy 50%) is "
    "named in the column `flags`.")


# what a profile's numbers are, under the report's title (paper: the papers' own scale, nothing to add)
_PROFILE_SCOPE = {
    "mini": "`mini` reproduces the papers' claims at small scale on a procedural world, not their absolute numbers.",
    "smoke": "`smoke` runs every step on tiny random-init models: it proves the path; its numbers mean nothing.",
}


def profile_note(name: str, backbone: str, source: str) -> str:
    """The line under the report's title naming the profile, its backbone and data, and, for the
    offline profiles, what their numbers are (notebook 99 and ``nearid report`` print the same)."""
    scope = _PROFILE_SCOPE.get(name, "")
    return f"Profile: **{name}** (backbone `{backbone}`, data `{source}`)." + (f" {scope}" if scope else "")


def png_caption(path: Path) -> str:
    """The caption line of a figure the notebooks saved (:meth:`nearid_lib.run.Run.figure`): its
    ``Comment`` chunk (the figure's titles) in italics, then where it comes from (``Description``,
    ``Source``); "" for a PNG without them."""
    try:
        with Image.open(path) as im:
            text = dict(getattr(im, "text", {}) or {})
    except OSError:
        return ""
    where = "; ".join(v for v in (text.get("Description", ""), text.get("Source", "")) if v)
    caption = text.get("Comment", "")
    return ((f"*{caption}*" if caption else "") + (f" ({where})" if where else "")).strip()


def render_report(figures: Path, specs: list[TableSpec] | None = None, title: str = "Reproduced results",
                  profile_note: str = "") -> str:
    """Markdown for ``figures/README.md``: claims, every table beside the paper's, every figure."""
    figures = Path(figures)
    specs = load_specs() if specs is None else specs
    out = [f"# {title}", "",
           "Regenerated by `make reproduce` (notebook `99_report.py`); do not edit by hand. "
           "Each table shows the paper's value beside ours; every number of ours was computed by a "
           "notebook and read from the CSV named under the table.", ""]
    if profile_note:
        out += [profile_note, ""]
    prov = provenance_summary(figures / "tables")
    if prov:
        out += [prov, ""]

    claims = sorted((figures / "tables").glob("claims_*.csv"))
    if claims:
        frame = pd.concat([pd.read_csv(c).assign(source=f"tables/{c.name}") for c in claims],
                          ignore_index=True)
        if "verdict" not in frame and "holds" in frame:
            frame["verdict"] = frame["holds"].map({True: "holds", False: "does not hold"})
        elif "holds" in frame:
            legacy = frame["verdict"].isna() & frame["holds"].notna()
            frame.loc[legacy, "verdict"] = frame.loc[legacy, "holds"].map({True: "holds", False: "does not hold"})
        frame["chance"] = chance_notes(frame, figures / "tables")
        frame["why"] = why_links(frame)
        context = RuleContext(tables=figures / "tables")
        out += [render_markdown_table(x) if isinstance(x, pd.DataFrame) else x
                for x in claims_section(frame, [_CLAIMS_INTRO, ""], context=context)]

    out += _chance_section(figures / "tables")
    out += _cross_section(figures / "tables")
    out += _fpr_sources_section(figures / "tables")
    out += _placement_section(figures / "tables")
    with_ours = [s for s in specs if s.ours]
    descriptive = [s for s in specs if not s.ours]
    out += ["## Tables", ""]
    for s in with_ours:
        paper = pd.read_csv(s.paper_csv) if s.paper_csv and s.paper_csv.exists() else pd.DataFrame()
        ours_path = figures / s.ours
        ours = pd.read_csv(ours_path) if ours_path.exists() else None
        out += [f"### {s.paper} {s.table}: {s.title}", ""]
        skipped = skip_reason(ours_path) if ours is None else None
        if skipped:
            out += [f"_Ours: skipped in this run (`{s.ours}`): {skipped}_", ""]
        elif ours is None:
            why = f" {s.not_reproduced}." if s.not_reproduced else ""
            out += [f"_Ours: not produced in this run (expected `{s.ours}`).{why}_", ""]
        else:
            out += [f"_Ours: `{s.ours}`, profile: {_read_profile(ours, ours_path)}._", ""]
            cal = dict(s.calibrated).get(_read_profile(ours, ours_path))
            if cal:
                out += [f"_**Calibrated, not reproduced:** {cal}_", ""]
            split = (read_table_meta(ours_path) or {}).get("split") or {}
            if split and not split.get("official", True):
                out += [f"_**Split:** {split.get('note') or 'not the authors official partition'}._", ""]
            if s.partial:
                out += [f"_Rows not produced: {s.partial}_", ""]
        if paper.empty:
            out += ["_No paper values transcribed._", ""]
            continue
        if ours is not None and not _joinable(paper, ours, s):
            # our table has another shape (e.g. long form, or rows with no paper counterpart):
            # show both as they are rather than a misleading join
            out += ["Paper:", "", render_markdown_table(paper[_shown(paper, s)]), "",
                    "Ours:", "", render_markdown_table(ours.drop(columns=["profile"], errors="ignore")), ""]
        else:
            table = side_by_side(paper, ours, s.key_columns, list(s.metrics))
            out += [render_markdown_table(table), ""]
            if any(str(c).endswith(STANDIN[1]) for c in table.columns):
                out += [STANDIN_NOTE, ""]
        for path, what in s.also:
            extra = figures / path
            if extra.exists():
                other = pd.read_csv(extra)
                out += [f"Also `{path}`: {what}.", ""]
                if _joinable(paper, other, s):
                    out += [render_markdown_table(side_by_side(paper, other, s.key_columns, list(s.metrics))), ""]
                else:
                    out += [render_markdown_table(other.drop(columns=["profile"], errors="ignore")), ""]
            else:
                why = skip_reason(extra)
                out += [f"_Also `{path}` ({what}): {'skipped: ' + why if why else 'not produced in this run'}._", ""]
        if s.notes:
            out += [f"Notes: {s.notes}", ""]
    if descriptive:
        out += ["## Paper tables without a counterpart here", "",
                "Descriptive tables (hyper-parameters, dataset pools) transcribed in `paper_values/` "
                "for reference; nothing of ours stands beside them.", ""]
        out += [f"- {s.paper} {s.table}: {s.title} (`paper_values/{s.key}.csv`)" for s in descriptive]
        out += [""]

    pngs = sorted(figures.glob("*.png"))
    if pngs:
        out += ["## Figures", ""]
        for p in pngs:
            out += [f"### {p.stem}", "", f"![{p.stem}]({p.name})", ""]
            caption = png_caption(p)
            if caption:
                out += [caption, ""]
    return "\n".join(out).rstrip() + "\n"
