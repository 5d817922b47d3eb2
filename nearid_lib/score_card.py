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

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd

from .report import paper_values_dir, render_markdown_table

if TYPE_CHECKING:
    from .score import Participant, ScoreReport

__all__ = ["assemble_table", "paper_rows", "write_card", "summary_markdown", "CARD_COLUMNS"]

CARD_COLUMNS = ["row", "kind", "source", "nearid_ssr", "nearid_pa", "nearid_fg_ssr", "nearid_fg_pa", "mtg_mo",
                "idsim_identity", "idsim_identity_low", "idsim_identity_high", "idsim_background",
                "idsim_background_low", "idsim_background_high", "fpr_map", "fpr_sim", "fpr_rho_map", "fpr_rho_sim"]
_FACTORS = ("identity", "background", "viewpoint", "lighting")


def _nearid_cols(res: Mapping[str, Any], key: str) -> dict[str, float]:
    if key not in res.get("keys", []):
        return {}
    i = res["keys"].index(key)
    t1 = res["table1"].iloc[i]
    out = {c: float(t1[c]) for c in ("nearid_ssr", "nearid_pa", "mtg_mo", "mtg_mopair", "dbpp_mh_procedural")}
    if res.get("table7") is not None and len(res["table7"]) > i:
        t7 = res["table7"].iloc[i]
        out.update(nearid_fg_ssr=float(t7["fg_ssr"]), nearid_fg_pa=float(t7["fg_pa"]))
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
    out: dict[str, float] = {}
    if "oracle" not in res:
        return out
    o = res["oracle"][res["oracle"].encoder == key]
    if len(o):
        out["fpr_map"], out["fpr_sim"] = float(o["map"].iloc[0]), float(o["sim"].iloc[0])
    a = res["agreement"]
    for metric, col in (("ap", "fpr_rho_map"), ("sim", "fpr_rho_sim")):
        r = a[(a.encoder == key) & (a.metric == metric)]
        if len(r):
            out[col] = float(r["mean_rho"].iloc[0])
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
    """One row per participant (scored in this run) followed by the papers' rows."""
    rows = []
    for p in parts:
        row = {"row": p.label, "kind": p.kind, "source": f"this run ({profile})", "key": p.key}
        row.update(_nearid_cols(results.get("nearid", {}), p.key))
        row.update(_idsim_cols(results.get("idsim", {}), p.key))
        row.update(_fpr_cols(results.get("fpr", {}), p.key))
        rows.append(row)
    table = pd.concat([pd.DataFrame(rows), paper_rows()], ignore_index=True)
    front = [c for c in CARD_COLUMNS if c in table.columns]
    return table[front + [c for c in table.columns if c not in front]]


def summary_markdown(rep: ScoreReport) -> str:
    """The card's table: the columns that were scored, rounded."""
    cols = [c for c in CARD_COLUMNS if c in rep.table.columns and rep.table[c].notna().any() or c == "row"]
    return render_markdown_table(rep.table[cols].round(3))


def _figures(rep: ScoreReport) -> dict[str, Any]:
    """name -> matplotlib figure for each protocol that ran."""
    from . import plots
    from .fpr.figures import plot_main
    from .idsim.sensitivity import plot_sensitivity_bars

    figs: dict[str, Any] = {}
    t = rep.table
    cols = {"nearid_ssr": "SSR", "nearid_pa": "PA", "nearid_fg_ssr": "SSR (fg only)", "nearid_fg_pa": "PA (fg only)"}
    have = [c for c in cols if c in t.columns and t[c].notna().any()]
    if have:
        figs["score_nearid"] = _nearid_bars(t[t[have].notna().any(axis=1)], {c: cols[c] for c in have}, rep.profile)
    idsim = rep.extra.get("idsim", {})
    if "summary" in idsim:
        labels = dict(zip(t.key[t.kind != "paper"], t.row[t.kind != "paper"]))
        figs["score_idsim"] = plot_sensitivity_bars(idsim["summary"], labels, f"Selective sensitivity ({rep.profile})")
        figs["score_idsim_anchors"] = plots.anchor_distributions(idsim["wide"], _FACTORS, labels,
                                                                 title=f"Per-anchor sensitivity ({rep.profile})")
    if rep.fpr is not None and len(rep.fpr) and "drift" in rep.fpr.columns:
        figs["score_fpr"] = plot_main(rep.fpr.sort_values(["encoder", "drift"], kind="stable"), rep.profile)
    return figs


_KIND_COLOURS = {"yours": "#D55E00", "frozen": "#E69F00", "nearid": "#0072B2", "idsim": "#009E73",
                 "paper": "#BBBBBB"}


def _nearid_bars(t: pd.DataFrame, cols: Mapping[str, str], profile: str):
    """Horizontal bars, one panel per NearID metric, one bar per row, coloured by kind (yours,
    frozen baseline, NearID head, ID-Sim, paper)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(cols), figsize=(2.6 * len(cols) + 2.5, 0.32 * len(t) + 1.2), sharey=True,
                             squeeze=False)
    y = np.arange(len(t))[::-1]
    for ax, (c, title) in zip(axes[0], cols.items()):
        ax.barh(y, t[c].to_numpy(float), color=[_KIND_COLOURS.get(k, "#777777") for k in t.kind])
        ax.set_xlim(0, 100)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("percent")
    axes[0, 0].set_yticks(y, list(t.row), fontsize=7)
    fig.suptitle(f"NearID-bench ({profile}): this run (coloured) beside the papers (grey)", fontsize=9)
    fig.tight_layout()
    return fig


def write_card(rep: ScoreReport, out: Path, cfg, seed: int) -> dict[str, Path]:
    """Write ``tables/score_table.csv`` (+ provenance sidecar), the per-protocol tables, the figures
    and ``report.md`` under ``out``; returns ``{name: path}`` (``"card"``: the Markdown)."""
    import torch

    from .io_utils import atomic_write_text
    from .run import Run
    from .runmeta import git_state

    out.mkdir(parents=True, exist_ok=True)
    run = Run(cfg=cfg, notebook="score_encoder", seed=int(seed), params={"encoder": rep.encoder},
              threads=torch.get_num_threads(), results=out, figures=out, meta={"git": git_state()})
    files = {"table": run.write_table(rep.table, "score_table")}
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
             "## Scores", "", summary_markdown(rep), "",
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
