"""The table and the one-page Markdown report card of :func:`nearid_lib.score.score_encoder`.

``table`` has one row per scored encoder (``kind``: ``yours``, ``frozen``, ``nearid``, ``idsim``)
and one per row of the papers (``kind == "paper"``), with the columns

=====================================  ==========================================================
``nearid_ssr``, ``nearid_pa``          NearID SSR / PA (%), full image, pooled over the main sources
``nearid_fg_ssr``, ``nearid_fg_pa``    the same, foreground only (background blacked out)
``mtg_mo``, ``mtg_mopair``             MTG metric-to-oracle Pearson r (Fisher-z mean)
``idsim_<factor>`` (+ ``_low/_high``)  sensitivity (-slope) to identity / background / viewpoint /
                                       lighting change, bootstrap 95% interval over anchors
``fpr_map``, ``fpr_sim``               FPR oracle: gallery mAP and pairwise similarity of the real
                                       references (all groups)
``fpr_rho_map``, ``fpr_rho_sim``       agreement of each metric with the simulated generators' true
                                       identity drift (mean per-identity Spearman rho)
=====================================  ==========================================================

Paper rows come from ``paper_values/`` (NearID Tables 1 and 7, FPR Table 1: the mean over its
three datasets); ID-Sim's Figure 6 states no numbers, so it has no paper row.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from ..fpr.figures import plot_main
from ..idsim.sensitivity import plot_sensitivity_bars
from ..io_utils import atomic_write_text
from ..plots import OKABE_ITO, anchor_distributions, method_color
from ..report import paper_values_dir, render_markdown_table
from ..run import Run
from ..runtime.runmeta import git_state
from .headline import HEADLINE, chance_levels, headline_notes, headline_table
from .participants import Participant

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["ScoreReport", "assemble_table", "paper_rows", "write_card", "summary_markdown", "participant_colours", "CARD_COLUMNS",
           "chance_levels", "headline_table", "HEADLINE"]

CARD_COLUMNS = ["row", "kind", "source", "nearid_ssr", "nearid_pa", "nearid_fg_ssr", "nearid_fg_pa", "mtg_mo",
                "idsim_identity", "idsim_identity_low", "idsim_identity_high", "idsim_background",
                "idsim_background_low", "idsim_background_high", "fpr_map", "fpr_sim", "fpr_rho_map", "fpr_rho_sim"]
_FACTORS = ("identity", "background", "viewpoint", "lighting")


def _nearid_cols(res: Mapping[str, Any], key: str) -> dict[str, float]:
    """NearID-bench columns of ``key``: the mean over its participants (a trained encoder's seeds)."""
    idx = [i for i, k in enumerate(res.get("keys", [])) if k == key]
    if not idx:
        return {}
    t1 = res["table1"].iloc[idx]
    out = {c: float(t1[c].astype(float).mean()) for c in ("nearid_ssr", "nearid_pa", "mtg_mo", "mtg_mopair",
                                                          "dbpp_mh_procedural")}
    if res.get("table7") is not None and len(res["table7"]) > max(idx):
        t7 = res["table7"].iloc[idx]
        out.update(nearid_fg_ssr=float(t7["fg_ssr"].astype(float).mean()),
                   nearid_fg_pa=float(t7["fg_pa"].astype(float).mean()))
    return out


def _idsim_cols(res: Mapping[str, Any], key: str) -> dict[str, float]:
    out: dict[str, float] = {}
    s = res.get("summary")
    if s is None:
        return out
    for _, r in s[s.encoder == key].iterrows():
        f = r["factor"]
        out[f"idsim_{f}"], out[f"idsim_{f}_low"], out[f"idsim_{f}_high"] = r["estimate"], r["low"], r["high"]
    return out


def _fpr_cols(res: Mapping[str, Any], key: str) -> dict[str, float]:
    """FPR columns of ``key``: the mean over its participants (a trained encoder's seeds)."""
    out: dict[str, float] = {}
    if "oracle" not in res:
        return out
    names = [t for t, k in res.get("keys", {key: key}).items() if k == key]
    o = res["oracle"][res["oracle"].encoder.isin(names)]
    if len(o):
        out["fpr_map"], out["fpr_sim"] = float(o["map"].mean()), float(o["sim"].mean())
    a = res["agreement"]
    if a is None:                                       # no generated images to agree on
        return out
    for metric, col in (("ap", "fpr_rho_map"), ("sim", "fpr_rho_sim")):
        r = a[a.encoder.isin(names) & (a.metric == metric)]
        if len(r):
            out[col] = float(r["mean_rho"].mean())
    return out


def paper_rows(folder: Path | None = None) -> pd.DataFrame:
    """The papers' rows in the card's columns: NearID Table 1 (+ Table 7's foreground-only
    columns, joined on the row id) and FPR Table 1 (mean over Re-ID, CUB and Cars)."""
    folder = Path(folder) if folder is not None else paper_values_dir()
    t1 = pd.read_csv(folder / "nearid_table1_main.csv")
    t7 = pd.read_csv(folder / "nearid_table7_fg_only.csv").set_index("method_id")
    rows = []
    for _, r in t1.iterrows():
        row = {"row": f"{r['row']} (NearID paper)", "kind": "paper", "source": "NearID Tables 1, 7",
               "nearid_ssr": r["nearid_ssr"], "nearid_pa": r["nearid_pa"], "mtg_mo": r["mtg_mo"],
               "mtg_mopair": r["mtg_mopair"]}
        if r["row_id"] in t7.index:
            row["nearid_fg_ssr"], row["nearid_fg_pa"] = t7.at[r["row_id"], "fg_ssr"], t7.at[r["row_id"], "fg_pa"]
        rows.append(row)
    fpr = pd.read_csv(folder / "fpr_table1_oracle.csv")
    spec = {"map": ["miewid_map", "bioclip_map", "spcars_map"], "sim": ["miewid_sim", "bioclip_sim", "spcars_sim"]}
    for label, cols in (("CLIP", {"map": ["clip_map"], "sim": ["clip_sim"]}),
                        ("DINO", {"map": ["dino_map"], "sim": ["dino_sim"]}),
                        ("specialised: MiewID / BioCLIP 2 / SP-Cars", spec)):
        rows.append({"row": f"{label} (FPR paper)", "kind": "paper",
                     "source": "FPR Table 1, mean of Re-ID, CUB, Cars",
                     "fpr_map": float(np.nanmean(fpr[cols["map"]].to_numpy(float))),
                     "fpr_sim": float(np.nanmean(fpr[cols["sim"]].to_numpy(float)))})
    return pd.DataFrame(rows)


def assemble_table(parts: Sequence[Participant], results: Mapping[str, Any], profile: str) -> pd.DataFrame:
    """One row per participant key (scored in this run; a trained encoder's seeds averaged, their
    count in ``n_seeds``) followed by the papers' rows."""
    rows = []
    first: dict[str, Participant] = {}
    for q in parts:
        first.setdefault(q.key, q)
    for p in first.values():
        row = {"row": p.label, "kind": p.kind, "source": f"this run ({profile})", "key": p.key,
               "n_seeds": sum(q.key == p.key for q in parts)}
        row.update(_nearid_cols(results.get("nearid", {}), p.key))
        row.update(_idsim_cols(results.get("idsim", {}), p.key))
        row.update(_fpr_cols(results.get("fpr", {}), p.key))
        rows.append(row)
    ours = pd.DataFrame(rows)
    if (ours["n_seeds"] <= 1).all():
        ours = ours.drop(columns="n_seeds")             # no encoder with several seeds: nothing to say
    table = pd.concat([ours, paper_rows()], ignore_index=True)
    front = [c for c in CARD_COLUMNS if c in table.columns]
    return table[front + [c for c in table.columns if c not in front]]


@dataclass
class ScoreReport:
    """What :func:`score_encoder` returns: ``table`` (one row per encoder and per paper row),
    the per-protocol tables (``nearid``: per source, ``idsim``: bootstrap summary, ``fpr``: per
    method), ``notes``, the files written (``files["card"]`` is the Markdown report card)."""

    encoder: str
    profile: str
    table: pd.DataFrame
    nearid: pd.DataFrame | None = None
    idsim: pd.DataFrame | None = None
    fpr: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)
    data: NearIDData | None = field(default=None, repr=False)
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def row(self) -> dict[str, Any]:
        """The scored encoder's row of ``table`` as a dict."""
        return self.table[self.table.kind == "yours"].iloc[0].to_dict()

    def _repr_markdown_(self) -> str:
        return summary_markdown(self)

    def __repr__(self) -> str:
        cols = [c for c in ("row", "source", "nearid_ssr", "nearid_pa", "nearid_fg_ssr", "idsim_identity",
                            "idsim_background", "fpr_map", "fpr_sim") if c in self.table.columns]
        return f"ScoreReport({self.encoder!r}, profile={self.profile!r})\n" + \
            self.table[cols].round(3).to_string(index=False)


def summary_markdown(rep: ScoreReport) -> str:
    """The card's table: the columns that were scored, rounded."""
    cols = [c for c in CARD_COLUMNS if c in rep.table.columns and rep.table[c].notna().any() or c == "row"]
    return render_markdown_table(rep.table[cols].round(3))


def _figures(rep: ScoreReport) -> dict[str, Any]:
    """name -> matplotlib figure for each protocol that ran."""
    figs: dict[str, Any] = {}
    t = rep.table
    colours = participant_colours(t)
    cols = {"nearid_ssr": "SSR", "nearid_pa": "PA", "nearid_fg_ssr": "SSR (fg only)", "nearid_fg_pa": "PA (fg only)"}
    have = [c for c in cols if c in t.columns and t[c].notna().any()]
    if have:
        chance = chance_levels(rep.data, getattr(rep, "split", "test"))
        chance.setdefault("nearid_fg_pa", chance.get("nearid_pa", (np.nan, "")))
        figs["score_nearid"] = _nearid_bars(t[t[have].notna().any(axis=1)], {c: cols[c] for c in have}, rep.profile,
                                            colours, {c: chance[c][0] for c in have if c in chance})
    idsim = rep.extra.get("idsim", {})
    if "summary" in idsim:
        labels = dict(zip(t.key[t.kind != "paper"], t.row[t.kind != "paper"]))
        figs["score_idsim"] = _recolour_bars(
            plot_sensitivity_bars(idsim["summary"], labels, f"Selective sensitivity ({rep.profile})"),
            [colours.get(labels.get(k, k), PAPER_COLOUR) for k in dict.fromkeys(idsim["summary"].encoder)])
        figs["score_idsim_anchors"] = _anchor_figure(idsim["wide"], labels, colours,
                                                     f"Per-anchor sensitivity ({rep.profile})")
    if rep.fpr is not None and len(rep.fpr) and "drift" in rep.fpr.columns:
        figs["score_fpr"] = plot_main(rep.fpr.sort_values(["encoder", "drift"], kind="stable"), rep.profile)
    return figs


PAPER_COLOUR = "#BBBBBB"
YOURS_COLOUR = "#D55E00"


def participant_colours(t: pd.DataFrame) -> dict[str, str]:
    """``{row label: colour}``, one distinct colour per participant of this run, used by every figure
    of the card: a baseline keeps the project's colour of its family
    (:func:`nearid_lib.plots.method_color`, as in the notebooks' figures), the scored encoder gets
    vermillion; a colour already taken passes to the next free Okabe-Ito colour."""
    rows = t[t.kind != "paper"]
    order = list(rows[rows.kind == "yours"].row) + list(rows[rows.kind != "yours"].row)
    out: dict[str, str] = {}
    for label in dict.fromkeys(order):
        want = YOURS_COLOUR if label in set(rows[rows.kind == "yours"].row) else method_color(label)
        free = [c for c in [want, *OKABE_ITO] if c.lower() not in {v.lower() for v in out.values()}]
        out[label] = free[0] if free else want
    return out


def _anchor_figure(wide: pd.DataFrame, labels: Mapping[str, str], colours: Mapping[str, str], title: str):
    """Per-anchor sensitivities (:func:`nearid_lib.plots.anchor_distributions`) in the card's
    participant colours."""
    encs = {labels.get(e, e) for e in wide.encoder}
    return anchor_distributions(wide, [f for f in _FACTORS if f in wide.columns], labels, title,
                                colours={e: colours.get(e, PAPER_COLOUR) for e in encs})


def _recolour_bars(fig, colours: Sequence[str]):
    """Give the i-th bar of every panel the i-th participant's colour (the library figure colours
    bars by position)."""
    for ax in fig.axes:
        bars = [p for p in ax.patches if type(p).__name__ == "Rectangle"]
        if len(bars) == len(colours):
            for b, c in zip(bars, colours):
                b.set_facecolor(c)
    return fig


def _nearid_bars(t: pd.DataFrame, cols: Mapping[str, str], profile: str, colours: Mapping[str, str] | None = None,
                 chance: Mapping[str, float] | None = None):
    """Horizontal bars, one panel per NearID metric, one bar per row: this run's participants in
    their own colours, the papers' rows grey. Every bar carries its value, and a zero (a frozen
    encoder fooled on every identity) is drawn as a tick at 0 so it is not mistaken for a missing bar;
    ``chance`` (column -> level) draws each panel's chance level as a dashed line."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(cols), figsize=(2.6 * len(cols) + 2.5, 0.32 * len(t) + 1.2), sharey=True,
                             squeeze=False)
    y = np.arange(len(t))[::-1]
    own = dict(colours) if colours is not None else participant_colours(t)
    colours = [PAPER_COLOUR if k == "paper" else own.get(r, PAPER_COLOUR) for k, r in zip(t.kind, t.row)]
    for ax, (c, title) in zip(axes[0], cols.items()):
        v = t[c].to_numpy(float)
        ax.barh(y, v, color=colours)
        for yi, vi, col in zip(y, v, colours):
            if np.isnan(vi):
                continue
            if vi == 0:
                ax.plot([0], [yi], marker="|", markersize=9, markeredgewidth=2.5, color=col, clip_on=False)
            ax.text(vi + 1.5, yi, f"{vi:.1f}", va="center", fontsize=6)
        level = (chance or {}).get(c)
        has_chance = level is not None and np.isfinite(level)
        if has_chance:
            ax.axvline(level, color="k", ls="--", lw=0.9)
        ax.set_xlim(0, 100)
        ax.set_title(f"{title}: higher is better", fontsize=9)
        ax.set_xlabel(f"percent; dashed: chance {level:.1f}" if has_chance else "percent", fontsize=8)
    axes[0, 0].set_yticks(y, list(t.row), fontsize=7)
    fig.suptitle(f"NearID-bench ({profile}): this run (coloured) beside the papers (grey); dashed: chance",
                 fontsize=9)
    fig.tight_layout()
    return fig


def write_card(rep: ScoreReport, out: Path, cfg, seed: int) -> dict[str, Path]:
    """Write ``tables/score_table.csv`` (+ provenance sidecar), the per-protocol tables, the figures
    and ``report.md`` under ``out``; returns ``{name: path}`` (``"card"``: the Markdown)."""

    out.mkdir(parents=True, exist_ok=True)
    run = Run(cfg=cfg, notebook="score_encoder", seed=int(seed), params={"encoder": rep.encoder},
              threads=torch.get_num_threads(), results=out, figures=out, meta={"git": git_state()})
    head = headline_table(rep)
    files = {"table": run.write_table(rep.table, "score_table"), "headline": run.write_table(head, "score_headline")}
    for name, df in (("nearid_per_source", rep.nearid), ("idsim_sensitivity", rep.idsim), ("fpr_methods", rep.fpr)):
        if df is not None and len(df):
            files[name] = run.write_table(df, f"score_{name}")
    for name, fig in _figures(rep).items():
        run.figure(fig, name)
        files[name] = out / f"{name}.png"
    prov = run.provenance()
    commit = f"{(prov['commit'] or 'no git')[:12]}{' (dirty)' if prov['dirty'] else ''}"
    lines = [f"# Report card: {rep.encoder}", "",
             f"Profile **{rep.profile}**, seed {seed}, commit `{commit}`, {prov['date']}. "
             f"Data: `{rep.data.root if rep.data is not None else '-'}`.", "",
             "Rows *this run* were scored now, on the same images; *paper* rows are the papers' numbers "
             "(their encoders and data). `mini` reproduces the papers' claims at small scale on a procedural "
             "world, not their absolute numbers: compare your row with the rows of this run first.", "",
             "## At a glance", "", render_markdown_table(head.round(3)) if len(head) else "(nothing scored)", "",
             "*better*: which way is better; *frozen reference*: the profile's frozen encoder, scored now on the "
             "same images; *chance*: the level of an encoder whose similarities carry no information (a random "
             "ranking), computed analytically on this dataset (`nearid_lib.score.headline.chance_levels`), not "
             "measured with a random-init network; *note*: see below. The long tables follow.", "",
             *(["### What the noted numbers mean", "", *[f"- {n}" for n in headline_notes(rep)], ""]
               if headline_notes(rep) else []),
             "## All scores", "", summary_markdown(rep), "",
             "NearID SSR/PA in %, pooled over the main distractor sources (higher is better); MTG M-O: Pearson r; "
             "ID-Sim: sensitivity = -slope of similarity vs change (identity: higher is better, background: "
             "lower), 95% bootstrap interval over anchors; FPR: gallery mAP and pairwise similarity of the "
             "real references; rho: agreement with the true identity drift of simulated generators.", ""]
    for name in ("score_nearid", "score_idsim", "score_idsim_anchors", "score_fpr"):
        if name in files:
            lines += [f"![{name}]({name}.png)", ""]
    if rep.notes:
        lines += ["## Notes", "", *[f"- {n}" for n in rep.notes], ""]
    lines += ["Tables: " + ", ".join(f"`tables/{p.name}`" for k, p in files.items() if p.suffix == ".csv"), ""]
    files["card"] = atomic_write_text(out / "report.md", "\n".join(lines))
    return files
