"""Selective-sensitivity analysis of ID-Sim (paper 001, Sec. 4.4, Figure 6, App. F), for any encoder.

For every anchor and every edit grid (identity change x background | viewpoint | lighting), the
similarity of each grid image back to the grid's unedited anchor image (identity_level 0,
factor_level 0) is regressed over the *whole* grid (``stats.sensitivity_ols``):

    sim = b0 + b1 * factor_change + b2 * identity_change,   sensitivity = -slope, R^2 recorded.

Per anchor: background/viewpoint/lighting sensitivity = -b1 of that grid; identity sensitivity =
the mean of -b2 over the anchor's three grids (Figure 6 shows one identity bar). Then a
percentile bootstrap over anchors (1,000 resamples, explicit seeded rng, all four columns share
the resamples; ``stats.bootstrap_columns``) gives mean, std and the 95% interval per encoder and
factor. Similarities are raw cosine similarities, as in the paper (no per-encoder rescaling); the
``selectivity`` columns (identity minus context sensitivity) are ours.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..stats import bootstrap_columns, sensitivity_ols

__all__ = ["FACTORS", "GRIDS", "SensitivityRun", "run_sensitivity", "grid_similarities", "per_anchor_sensitivity",
           "sensitivity_summary", "similarity_curves", "plot_sensitivity_bars", "plot_similarity_curves"]

GRIDS = ("background", "viewpoint", "lighting")
FACTORS = ("identity",) + GRIDS


def grid_similarities(grids: pd.DataFrame, emb: Mapping[str, Mapping[str, np.ndarray]]) -> pd.DataFrame:
    """Long table: one row per (encoder, grid image) with ``sim`` = cosine to its grid's (0, 0)
    anchor image. ``emb``: encoder -> {path: vector}. Raises naming anchor/grid when the (0, 0)
    image is missing or an embedding is absent."""
    need = ["anchor_id", "grid", "identity_level", "factor_level", "identity_change", "factor_change", "path"]
    miss = [c for c in need if c not in grids.columns]
    if miss:
        raise ValueError(f"grid_similarities: grids table lacks {miss}")
    rows = []
    for (aid, grid), g in grids.groupby(["anchor_id", "grid"], sort=True):
        a = g[(g.identity_level == 0) & (g.factor_level == 0)]
        if len(a) != 1:
            raise ValueError(f"grids.csv: anchor {aid!r} grid {grid!r} needs exactly one (0, 0) image, has {len(a)}")
        ap = a.path.iloc[0]
        for enc, e in emb.items():
            if ap not in e:
                raise KeyError(f"grid_similarities: encoder {enc!r} has no embedding for {ap!r}")
            va = np.asarray(e[ap], dtype=np.float64)
            va = va / np.linalg.norm(va)
            for _, r in g.iterrows():
                v = np.asarray(e[r.path], dtype=np.float64)
                rows.append({"encoder": enc, "anchor_id": aid, "grid": grid,
                             "identity_level": int(r.identity_level), "factor_level": int(r.factor_level),
                             "identity_change": float(r.identity_change),
                             "factor_change": float(r.factor_change),
                             "sim": float(va @ (v / np.linalg.norm(v)))})
    return pd.DataFrame(rows)


def per_anchor_sensitivity(sims: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(fits, wide): ``fits`` = one OLS per (encoder, grid, anchor) with b0, slopes, sens_*, r2;
    ``wide`` = one row per (encoder, anchor) with columns identity, background, viewpoint,
    lighting (sensitivities) and r2_<grid>."""
    fits = sensitivity_ols(sims, by=["encoder", "grid"])
    wide = []
    for (enc, aid), g in fits.groupby(["encoder", "anchor_id"], sort=True):
        row = {"encoder": enc, "anchor_id": aid, "identity": float(g.sens_identity.mean())}
        for grid in GRIDS:
            gg = g[g.grid == grid]
            row[grid] = float(gg.sens_factor.iloc[0]) if len(gg) else np.nan
            row[f"r2_{grid}"] = float(gg.r2.iloc[0]) if len(gg) else np.nan
        wide.append(row)
    wide = pd.DataFrame(wide)
    present = [f for f in GRIDS if wide[f].notna().all()]
    if not present:
        raise ValueError("per_anchor_sensitivity: no grid is complete for every anchor")
    return fits, wide


def sensitivity_summary(wide: pd.DataFrame, n_boot: int, rng: np.random.Generator,
                        factors: Sequence[str] = FACTORS) -> pd.DataFrame:
    """Bootstrap summary per (encoder, factor): estimate (mean over anchors), bootstrap mean, std,
    low, high (95% percentile interval), n anchors, mean R^2 (grid factors)."""
    factors = [f for f in factors if f in wide.columns and wide[f].notna().all()]
    boot = bootstrap_columns(wide, factors, n_boot=n_boot, rng=rng, by=["encoder"])
    boot = boot.rename(columns={"column": "factor"})
    r2 = {(enc, grid): float(g[f"r2_{grid}"].mean()) for enc, g in wide.groupby("encoder")
          for grid in GRIDS if f"r2_{grid}" in g}
    boot["r2_mean"] = [r2.get((e, f), np.nan) if f != "identity" else
                       float(np.nanmean([r2.get((e, gname), np.nan) for gname in GRIDS]))
                       for e, f in zip(boot.encoder, boot.factor)]
    return boot


@dataclass
class SensitivityRun:
    """What :func:`run_sensitivity` returns: the long similarity table, the per-(encoder, grid,
    anchor) OLS fits, the per-(encoder, anchor) sensitivities and their bootstrap summary; for an
    encoder trained with several seeds, ``per_seed`` holds its per-(seed, anchor) sensitivities
    (``seed`` column) while ``sims``, ``wide`` and ``summary`` carry their mean over seeds."""

    sims: pd.DataFrame
    fits: pd.DataFrame
    wide: pd.DataFrame
    summary: pd.DataFrame
    per_seed: pd.DataFrame | None = None


def run_sensitivity(grids: pd.DataFrame, emb: Mapping[str, Mapping[str, np.ndarray]], n_boot: int,
                    rng: np.random.Generator,
                    seeded: Mapping[str, Mapping[int, Mapping[str, np.ndarray]]] | None = None) -> SensitivityRun:
    """The selective-sensitivity protocol for every encoder of ``emb`` (encoder -> {grid image path:
    vector}): similarities to each grid's anchor image (:func:`grid_similarities`), per-anchor OLS
    (:func:`per_anchor_sensitivity`) and the bootstrap over anchors (:func:`sensitivity_summary`,
    ``n_boot`` resamples drawn from ``rng``). Notebook 10 and :func:`nearid_lib.score_encoder`
    both run it.

    ``seeded``: encoders trained with several seeds, {encoder: {seed: embeddings}}. Each seed is
    regressed on its own (``per_seed``, ``fits`` with a ``seed`` column); the encoder's similarities
    and per-anchor sensitivities are then averaged over its seeds, so its bootstrap summary is over
    anchors of the seed-mean (the claims resample the seeds too: :func:`~.claims.sensitivity_evidence`)."""
    sims = grid_similarities(grids, emb) if emb else pd.DataFrame()
    fits, wide = per_anchor_sensitivity(sims) if emb else (pd.DataFrame(), pd.DataFrame())
    per_seed = []
    for enc, by_seed in (seeded or {}).items():
        if enc in emb:
            raise ValueError(f"run_sensitivity: encoder {enc!r} is both in emb and in seeded")
        s_sims, s_fits, s_wide = [], [], []
        for seed, e in sorted(by_seed.items()):
            ss = grid_similarities(grids, {enc: e})
            f, w = per_anchor_sensitivity(ss)
            s_sims.append(ss.assign(seed=int(seed)))
            s_fits.append(f.assign(seed=int(seed)))
            s_wide.append(w.assign(seed=int(seed)))
        keys = [c for c in s_sims[0].columns if c not in ("sim", "seed")]
        sims = pd.concat([sims, pd.concat(s_sims).groupby(keys, sort=False, as_index=False)["sim"].mean()],
                         ignore_index=True)
        fits = pd.concat([fits, *s_fits], ignore_index=True)
        w = pd.concat(s_wide, ignore_index=True)
        per_seed.append(w)
        wide = pd.concat([wide, w.drop(columns="seed").groupby(["encoder", "anchor_id"], sort=True,
                                                               as_index=False).mean()], ignore_index=True)
    wide = wide.sort_values(["encoder", "anchor_id"], kind="stable").reset_index(drop=True)
    return SensitivityRun(sims, fits, wide, sensitivity_summary(wide, n_boot, rng),
                          pd.concat(per_seed, ignore_index=True) if per_seed else None)


def similarity_curves(sims: pd.DataFrame) -> pd.DataFrame:
    """Figure 6 bottom: mean (and std over anchors) similarity vs level of one factor, the other
    at level 0. Identity: over the three grids' factor_level 0 slices. Columns encoder, factor,
    level, change, sim_mean, sim_std, n."""
    rows = []
    for enc, g in sims.groupby("encoder"):
        idg = g[g.factor_level == 0].groupby(["anchor_id", "identity_level", "identity_change"]).sim.mean().reset_index()
        for (lvl, ch), gg in idg.groupby(["identity_level", "identity_change"]):
            rows.append({"encoder": enc, "factor": "identity", "level": lvl, "change": ch,
                         "sim_mean": gg.sim.mean(), "sim_std": gg.sim.std(ddof=1), "n": len(gg)})
        for grid in GRIDS:
            fg = g[(g.grid == grid) & (g.identity_level == 0)]
            for (lvl, ch), gg in fg.groupby(["factor_level", "factor_change"]):
                rows.append({"encoder": enc, "factor": grid, "level": lvl, "change": ch,
                             "sim_mean": gg.sim.mean(), "sim_std": gg.sim.std(ddof=1), "n": len(gg)})
    return pd.DataFrame(rows)


def _factor_panels(factors: Sequence[str], height: float, **kw):
    """One panel per factor, side by side: ``(fig, axes)``."""
    fig, axes = plt.subplots(1, len(factors), figsize=(3.2 * len(factors), height), squeeze=False, **kw)
    return fig, axes[0]


def _finish(fig, ax0, ylabel: str, title: str):
    ax0.set_ylabel(ylabel)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


# which way is better per factor (ID-Sim Sec. 5, Fig. 6: "notably more sensitive to identity differences
# while remaining stable under background, viewpoint, and lighting changes")
BETTER = {"identity": "higher is better", "background": "lower is better", "viewpoint": "lower is better",
          "lighting": "lower is better"}


def plot_sensitivity_bars(summary: pd.DataFrame, labels: Mapping[str, str] | None = None, title: str = ""):
    """Figure 6 top: bars (bootstrap mean) with 95% CI whiskers per factor, one bar per encoder, on
    one y-scale across the panels (sensitivities are comparable slopes); each panel says which way is
    better (identity high, the context factors low) and the dashed line at 0 is chance (a similarity
    that does not depend on the change). Returns the figure."""
    labels = dict(labels or {})
    encs = list(dict.fromkeys(summary.encoder))
    factors = [f for f in FACTORS if f in set(summary.factor)]
    fig, axes = _factor_panels(factors, 3.4, sharey=True)
    for ax, f in zip(axes, factors):
        s = summary[summary.factor == f].set_index("encoder").reindex(encs)
        x = np.arange(len(encs))
        ax.bar(x, s["mean"], color=[f"C{i}" for i in range(len(encs))])
        ax.errorbar(x, s["mean"], yerr=[s["mean"] - s["low"], s["high"] - s["mean"]], fmt="none",
                    ecolor="k", capsize=3)
        ax.set_xticks(x, [labels.get(e, e) for e in encs], rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{f}\n({BETTER.get(f, '')})", fontsize=9)
        ax.axhline(0, color="grey", lw=0.8, ls="--")
    return _finish(fig, axes[0], "sensitivity (-slope), one scale\n(dashed 0: chance)", title)


def plot_similarity_curves(curves: pd.DataFrame, labels: Mapping[str, str] | None = None, title: str = ""):
    """Figure 6 bottom: mean similarity to the anchor vs change level, one panel per factor.
    Returns the figure."""
    labels = dict(labels or {})
    factors = [f for f in FACTORS if f in set(curves.factor)]
    fig, axes = _factor_panels(factors, 3.0, sharey=True)
    for ax, f in zip(axes, factors):
        for i, (enc, g) in enumerate(curves[curves.factor == f].groupby("encoder", sort=False)):
            g = g.sort_values("change")
            ax.plot(g.change, g.sim_mean, "o-", color=f"C{i}", label=labels.get(enc, enc), ms=3)
            ax.fill_between(g.change, g.sim_mean - g.sim_std.fillna(0), g.sim_mean + g.sim_std.fillna(0),
                            color=f"C{i}", alpha=0.15)
        ax.set_title(f"{f}\n(steep: sensitive; {'steeper' if f == 'identity' else 'flatter'} is better)", fontsize=9)
        ax.set_xlabel(f"{f} change")
    axes[-1].legend(fontsize=7)
    return _finish(fig, axes[0], "cosine similarity to anchor", title)
