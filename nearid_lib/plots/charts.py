"""The chart figure types: KernelPCA panels, ECDFs, radar, bar comparisons, the bench overview and the
anchor distributions; each returns the matplotlib ``Figure`` (:mod:`nearid_lib.plots`)."""
from __future__ import annotations

from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D

from .style import OKABE_ITO, method_color

__all__ = ["kernel_pca_panels", "ecdf_plot", "radar_plot", "bar_compare", "metric_bars", "bench_overview",
           "anchor_distributions"]


def kernel_pca_panels(panels: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]], kernel: str = "rbf",
                      gamma: float | None = None, seed: int = 0, title: str = ""):
    """NearID Figure 5: one panel per encoder, KernelPCA to 2-D with *the same settings* everywhere.

    ``panels[name] = (emb [M,E], identity [M] labels, is_distractor [M] bool)``; circles are
    positives, crosses the matched-context distractors, one colour per identity. ``gamma`` defaults
    to 1 / (median squared pairwise distance) per panel (the embeddings of different encoders live
    on different scales; the rule, not the number, is what is shared)."""
    from sklearn.decomposition import KernelPCA

    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.4), squeeze=False)
    for ax, (name, (emb, ident, is_dist)) in zip(axes[0], panels.items()):
        x = np.asarray(emb, dtype=np.float64)
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        g = gamma
        if g is None:
            d2 = ((x[:, None] - x[None]) ** 2).sum(-1)
            med = np.median(d2[np.triu_indices(len(x), 1)])
            g = 1.0 / med if med > 0 else 1.0
        z = KernelPCA(n_components=2, kernel=kernel, gamma=g, random_state=seed).fit_transform(x)
        ids = list(dict.fromkeys(np.asarray(ident).tolist()))
        is_dist = np.asarray(is_dist, bool)
        for k, i in enumerate(ids):
            c = OKABE_ITO[k % len(OKABE_ITO)]
            sel = np.asarray(ident) == i
            ax.scatter(z[sel & ~is_dist, 0], z[sel & ~is_dist, 1], marker="o", s=60, color=c,
                       edgecolor="white", linewidth=0.6, label=f"S{k + 1}")
            ax.scatter(z[sel & is_dist, 0], z[sel & is_dist, 1], marker="x", s=55, color=c, linewidth=1.8)
        ax.set_title(name)
        ax.set_xlabel("KPCA 1")
        ax.set_ylabel("KPCA 2")
    h, lab = axes[0, 0].get_legend_handles_labels()
    h += [Line2D([], [], marker="o", ls="", color="grey", label="positive"),
          Line2D([], [], marker="x", ls="", color="grey", label="distractor")]
    fig.legend(handles=h, loc="center right", bbox_to_anchor=(1.08, 0.5))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def ecdf_plot(series: Mapping[str, np.ndarray], title: str = "", xlabel: str = "score",
              panels: Sequence[Sequence[str]] | None = None, panel_titles: Sequence[str] = (),
              notes: Mapping[str, str] | None = None, footnote: str = ""):
    """NearID Figure 9: empirical CDFs of scores. ``series`` name -> values (NaN ignored); a name
    containing "oracle" is drawn black and dashed. ``panels`` groups names into subplots (each
    panel also shows the oracle). ``notes`` (name -> text) follow a series' legend entry, e.g. its
    M-O: the curves compare distributions, not how each pair is ordered; ``footnote`` goes under
    the panels."""
    panels, notes = panels or [list(series)], notes or {}
    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 3.8 + 0.3 * bool(footnote)), squeeze=False,
                             sharey=True)
    oracle = [k for k in series if "oracle" in k.lower()]
    for p, (ax, names) in enumerate(zip(axes[0], panels)):
        for name in list(names) + [o for o in oracle if o not in names]:
            v = np.sort(np.asarray(series[name], dtype=np.float64))
            v = v[np.isfinite(v)]
            if not len(v):
                continue
            y = np.arange(1, len(v) + 1) / len(v)
            is_or = "oracle" in name.lower()
            ax.step(v, y, where="post", label=f"{name}: {notes[name]}" if notes.get(name) else name,
                    color=method_color(name), lw=2.2 if is_or else 1.8, ls="--" if is_or else "-")
        ax.set_xlabel(xlabel)
        ax.set_title(panel_titles[p] if p < len(panel_titles) else "")
        ax.legend(loc="upper left")
    axes[0, 0].set_ylabel("empirical CDF")
    if title:
        fig.suptitle(title)
    if footnote:
        fig.text(0.5, 0.01, footnote, ha="center", va="bottom", fontsize=8, wrap=True)
    fig.tight_layout(rect=(0, 0.07 if footnote else 0, 1, 1))
    return fig


def radar_plot(values: Mapping[str, Mapping[str, float]], title: str = "", reference: str | None = None,
               rlim: tuple[float, float] | None = None):
    """NearID Figure 4: one polygon per metric over categories; ``values[metric][category] = r``.
    ``reference`` (e.g. the NearID head) is drawn dashed on top."""
    cats = list(dict.fromkeys(c for v in values.values() for c in v))
    if len(cats) < 3:
        cats = cats + [""] * (3 - len(cats))       # a radar needs >= 3 axes
    ang = np.linspace(0, 2 * np.pi, len(cats), endpoint=False).tolist()
    fig = plt.figure(figsize=(5.2, 5.0))
    ax = fig.add_subplot(111, polar=True)
    for name, v in values.items():
        r = [float(v.get(c, np.nan)) if c else np.nan for c in cats]
        rr = np.nan_to_num(np.asarray(r + r[:1]), nan=0.0)
        is_ref = name == reference
        ax.plot(ang + ang[:1], rr, lw=2.2 if is_ref else 1.6, ls="--" if is_ref else "-",
                color=method_color(name), label=name)
        if not is_ref:
            ax.fill(ang + ang[:1], rr, alpha=0.12, color=method_color(name))
    ax.set_xticks(ang)
    ax.set_xticklabels(cats)
    if rlim:
        ax.set_ylim(*rlim)
    ax.legend(loc="upper right", bbox_to_anchor=(1.35, 1.1))
    if title:
        ax.set_title(title, pad=18)
    fig.tight_layout()
    return fig


def bar_compare(df, x: str, y: str, hue: str, title: str = "", ylabel: str = "", ref: float | None = None):
    """Grouped bars of ``df[y]`` over ``df[x]`` per ``df[hue]`` (tidy DataFrame); optional horizontal
    reference line (e.g. a claim threshold)."""
    xs = list(dict.fromkeys(df[x]))
    hs = list(dict.fromkeys(df[hue]))
    w = 0.8 / max(1, len(hs))
    fig, ax = plt.subplots(figsize=(max(4.5, 1.0 * len(xs) * max(1, len(hs)) * 0.45 + 2), 3.6))
    for k, h in enumerate(hs):
        sub = df[df[hue] == h].set_index(x)
        vals = [float(sub[y].get(v, np.nan)) if v in sub.index else np.nan for v in xs]
        ax.bar(np.arange(len(xs)) + (k - (len(hs) - 1) / 2) * w, vals, w, label=str(h), color=method_color(str(h)))
    if ref is not None:
        ax.axhline(ref, color="black", ls=":", lw=1)
    ax.set_xticks(np.arange(len(xs)))
    ax.set_xticklabels(xs, rotation=20, ha="right")
    ax.set_ylabel(ylabel or y)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


def metric_bars(df, metric: str, model: str, value: str, labels: Mapping[str, str] | None = None,
                title: str = "", xlabel: str = "score (higher is better)", xlim: tuple[float, float] | None = (0, 1)):
    """Horizontal grouped bars: one group per metric (``labels`` maps a metric id to the name a reader
    knows, e.g. "CUTE Easy Acc"), one bar per model in its own colour, each bar labelled with its
    value, the legend under the plot (never over the bars). Legible with a dozen metrics and five
    models."""
    ms = list(dict.fromkeys(df[metric]))
    hs = list(dict.fromkeys(df[model]))
    h = 0.84 / max(1, len(hs))
    colours = plt.get_cmap("tab10").colors
    fig, ax = plt.subplots(figsize=(8.0, 0.42 * len(ms) * max(1.0, len(hs) / 3) + 1.8))
    for k, name in enumerate(hs):
        sub = df[df[model] == name].set_index(metric)[value]
        vals = np.array([float(sub.get(m, np.nan)) for m in ms])
        y = np.arange(len(ms)) + (k - (len(hs) - 1) / 2) * h
        ax.barh(y, vals, h, label=str(name), color=colours[k % len(colours)])
        for yy, v in zip(y, vals):
            if np.isfinite(v):
                ax.text(v + 0.005, yy, f"{v:.2f}", va="center", fontsize=5.5)
    ax.set_yticks(np.arange(len(ms)))
    ax.set_yticklabels([(labels or {}).get(m, m) for m in ms], fontsize=8)
    ax.set_ylim(len(ms) - 0.5, -0.5)
    if xlim is not None:
        ax.set_xlim(xlim[0], xlim[1] * 1.07)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(axis="x", lw=0.4, alpha=0.5)
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=min(3, len(hs)), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.05 + 0.025 * ((len(hs) - 1) // 3), 1, 1))
    return fig


def _sd(t, col: str) -> list[float]:
    """``t[col]`` (the seeds' sd beside a mean) as floats, NaN where absent (one seed: no error bar)."""
    return list(np.asarray(t[col], dtype=float)) if col in t else [np.nan] * len(t)


def bench_overview(t1, t5, t7, profile: str = ""):
    """NearID-bench at a glance (notebook 04): Table 1's SSR and PA per encoder, Table 5's SSR per source
    (``*``: a training source; the average rows left out), Table 7's full-image vs foreground-only SSR.
    Rows are labelled by what was scored (``ours_label``); trained rows are seed means with the seeds'
    sd (``<metric>_sd``) as error bars; percent axes; one legend under the panels, clear of labels."""
    colours, err = plt.get_cmap("tab10").colors, {"capsize": 2, "error_kw": {"elinewidth": 0.8, "ecolor": "0.15"}}
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.8), gridspec_kw={"width_ratios": [1, 2.2, 1.2]})
    labels = list(dict.fromkeys(t1["ours_label"]))
    w = 0.8 / max(1, len(labels))
    for k, lab in enumerate(labels):
        r = t1[t1["ours_label"] == lab].iloc[:1]
        axes[0].bar(np.arange(2) + (k - (len(labels) - 1) / 2) * w, [r["nearid_ssr"].iloc[0], r["nearid_pa"].iloc[0]],
                    w, yerr=_sd(r, "nearid_ssr_sd") + _sd(r, "nearid_pa_sd"), color=colours[k % 10],
                    label=lab if len(lab) <= 38 else lab[:36] + "…", **err)
    axes[0].set_xticks(np.arange(2), ["SSR", "PA"])
    axes[0].set(ylim=(0, 100), ylabel="percent (test identities)")
    axes[0].set_title("Table 1: main sources", fontsize=9)
    ax = axes[1]
    avg = (t5["group"].astype(str).str.startswith("avg") if "group" in t5
           else t5["source"].astype(str).str.startswith(("Avg", "Reported apart")))
    t5 = t5[~avg]
    srcs, meths = list(dict.fromkeys(t5["source"])), list(dict.fromkeys(t5["ours_label"]))
    w = 0.8 / max(1, len(meths))
    for k, m in enumerate(meths):
        sub = t5[t5["ours_label"] == m].drop_duplicates("source").set_index("source").reindex(srcs)
        ax.bar(np.arange(len(srcs)) + (k - (len(meths) - 1) / 2) * w, sub["ssr"].to_numpy(float), w,
               yerr=_sd(sub, "ssr_sd"), color=colours[labels.index(m) % 10] if m in labels else colours[(k + 3) % 10],
               **err)
    train = (set(t5.loc[t5["training_source"].astype(str).str.lower().isin(["true", "1", "1.0"]), "source"])
             if "training_source" in t5 else set())
    ax.set_xticks(np.arange(len(srcs)), [f"{s}*" if s in train else s for s in srcs], rotation=30, ha="right",
                  fontsize=8)
    ax.set(ylim=(0, 100), ylabel="SSR (%)")
    ax.set_title("Table 5: per distractor source (* = seen in training)", fontsize=9)
    ax = axes[2]
    rows = list(dict.fromkeys(t7["ours_label"]))
    sel = t7.drop_duplicates("ours_label").set_index("ours_label").reindex(rows)
    for k, (col, name) in enumerate((("full_ssr", "full image"), ("fg_ssr", "foreground only"))):
        ax.barh(np.arange(len(rows)) + (k - 0.5) * 0.38, sel[col].to_numpy(float), 0.38, xerr=_sd(sel, f"{col}_sd"),
                label=f"Table 7: {name}", color=("0.55", "tab:purple")[k], **err)
    ax.set_yticks(np.arange(len(rows)), [r if len(r) <= 30 else r[:28] + "…" for r in rows], fontsize=7)
    ax.set(ylim=(len(rows) - 0.5, -0.5), xlim=(0, 100), xlabel="SSR (%)")
    ax.set_title("Table 7: background removed", fontsize=9)
    hs, ls = (sum(x, []) for x in zip(*(a.get_legend_handles_labels() for a in (axes[0], axes[2]))))
    fig.legend(hs, ls, loc="lower center", ncol=min(3, len(ls)), fontsize=7, frameon=False)
    fig.suptitle(f"NearID-bench ({profile}): trained rows are seed means, error bars the seeds' sd", fontsize=10)
    fig.tight_layout(rect=(0, 0.04 + 0.035 * ((len(ls) + 2) // 3), 1, 1))
    return fig


def anchor_distributions(wide, factors: Sequence[str], labels: Mapping[str, str] | None = None, title: str = "",
                         colours: Mapping[str, str] | None = None):
    """Seaborn box + strip plot of per-anchor sensitivities (``wide``: one row per encoder and anchor,
    one column per factor, as :func:`nearid_lib.idsim.sensitivity.per_anchor_sensitivity` returns):
    the spread behind each bootstrap interval, one box per factor and encoder. ``colours`` (label ->
    colour) fixes each encoder's colour exactly (unsaturated), e.g. to match other figures."""
    import seaborn as sns

    factors = [f for f in factors if f in wide.columns]
    long = wide.melt(id_vars=["encoder", "anchor_id"], value_vars=factors, var_name="factor",
                     value_name="sensitivity")
    long["encoder"] = long.encoder.map(lambda e: (labels or {}).get(e, e))
    encs = list(dict.fromkeys(long.encoder))
    palette = {e: (colours or {}).get(e) or method_color(e) for e in encs}
    exact = {"saturation": 1} if colours else {}
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(factors) * max(1, len(encs)) * 0.5 + 2), 3.6))
    sns.boxplot(data=long, x="factor", y="sensitivity", hue="encoder", hue_order=encs, palette=palette,
                showfliers=False, ax=ax, **exact)
    sns.stripplot(data=long, x="factor", y="sensitivity", hue="encoder", hue_order=encs, palette=palette,
                  dodge=True, size=3, alpha=0.6, edgecolor="black", linewidth=0.3, legend=False, ax=ax)
    ax.axhline(0, color="grey", lw=0.8, ls="--")       # chance: a similarity that ignores the change
    # which way is better, under each factor (ID-Sim Fig. 6: sensitive to identity, stable under context)
    ax.set_xticks(range(len(factors)), [f"{f}\n({'higher' if f == 'identity' else 'lower'} is better)"
                                        for f in factors])
    ax.set_xlabel("")
    ax.set_ylabel("sensitivity (-slope), per anchor; 0 = chance")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
