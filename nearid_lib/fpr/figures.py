"""Figures of the FPR notebook (FPR Figures 3, 4, 5, 7), matplotlib only; every function returns the
figure (the notebook shows it and saves it with ``Run.figure``)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from PIL import Image

__all__ = ["plot_main", "plot_gallery_ablation", "plot_background", "plot_retrieval_lists"]


def plot_main(main: pd.DataFrame, profile: str):
    """Fig. 3: pairwise similarity (top) and gallery mAP (bottom) per method, one column per encoder.
    Higher is better for both; mAP's chance level (``map_chance``, the mAP of a random ranking of the
    same galleries) is a dashed tick on each bar. With simulated generators (``drift`` known), a good
    metric falls as the true identity drift t rises."""
    encs = list(dict.fromkeys(main.encoder))
    fig, axes = plt.subplots(2, len(encs), figsize=(4.2 * len(encs), 6), squeeze=False)
    for j, enc in enumerate(encs):
        d = main[main.encoder == enc]
        for i, (col, lab) in enumerate((("sim", "pairwise similarity, higher = closer"),
                                        ("map", "gallery mAP, higher is better"))):
            ax = axes[i, j]
            x = np.arange(len(d))
            ax.bar(x, d[col], color=plt.cm.viridis(np.linspace(0.1, 0.9, len(d))))
            if col == "map" and "map_chance" in d.columns and d["map_chance"].notna().any():
                ax.hlines(d["map_chance"], x - 0.45, x + 0.45, colors="k", linestyles="--", lw=1,
                          label="chance (random ranking)")
                ax.legend(fontsize=7, loc="upper right")
            # real generators (paper) have no known drift: label them by name only
            labels = ([f"{m}\n(t={t:g})" for m, t in zip(d.method, d.drift)] if "drift" in d.columns
                      else list(d.method))
            ax.set_xticks(x, labels, rotation=45, ha="right", fontsize=7)
            ax.set_ylim(0, 1.02)
            ax.set_title(f"{enc}: {lab}", fontsize=9)
    fig.suptitle(f"FPR main comparison (profile {profile})"
                 + ("; t = true identity drift: a good metric falls as t rises" if "drift" in main.columns else ""),
                 fontsize=10)
    fig.tight_layout()
    return fig


def encoder_label(name: str) -> str:
    """A reader's name for an FPR encoder key: ``nearid`` -> "NearID head", ``x@random`` -> "x,
    random init (chance)", a registry name -> "x (frozen)"."""
    if name == "nearid":
        return "NearID head"
    if name.endswith("@random"):
        return f"{name[:-len('@random')]}, random init (chance)"
    return f"{name} (frozen)"


def plot_gallery_ablation(abl: pd.DataFrame, profile: str):
    """Fig. 5: mAP (top) and mean similarity (bottom) vs images per subject (left) and subjects in
    the gallery (right). Colour = encoder, line style = queries (oracle references solid, generated
    images dashed); one compact legend under the panels, none over the lines."""
    from matplotlib.lines import Line2D

    kinds = [k for k in ("images_per_subject", "subjects") if k in set(abl.ablation)]
    encs = list(dict.fromkeys(abl.encoder))
    queries = list(dict.fromkeys(abl.queries))
    colours = dict(zip(encs, plt.get_cmap("tab10").colors))
    styles = {q: ("-" if q == "oracle" else "--") for q in queries}
    fig, axes = plt.subplots(2, len(kinds), figsize=(4.6 * len(kinds), 5.4), squeeze=False, sharex="col")
    xlabels = {"images_per_subject": "gallery images per subject", "subjects": "subjects in the gallery"}
    for j, kind in enumerate(kinds):
        d = abl[abl.ablation == kind]
        for (enc, q), g in d.groupby(["encoder", "queries"], sort=False):
            g = g.sort_values("value")
            axes[0, j].plot(g.value, g["map"], styles[q], marker="o", ms=3, color=colours[enc])
            axes[1, j].plot(g.value, g.sim, styles[q], marker="o", ms=3, color=colours[enc])
        axes[1, j].set_xlabel(xlabels.get(kind, kind.replace("_", " ")))
        axes[0, j].set_ylim(0, 1.02)
        axes[0, j].set_title(xlabels.get(kind, kind), fontsize=9)
    axes[0, 0].set_ylabel("mAP")
    axes[1, 0].set_ylabel("mean similarity (cosine)")
    handles = ([Line2D([], [], color=colours[e], lw=2, label=encoder_label(e)) for e in encs]
               + [Line2D([], [], color="grey", ls=styles[q], label=f"{q} queries") for q in queries])
    fig.legend(handles=handles, loc="lower center", ncol=min(4, len(handles)), fontsize=7, frameon=False)
    fig.suptitle(f"Gallery ablation (profile {profile})", fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def plot_background(bg: pd.DataFrame, profile: str):
    """Fig. 7: oracle sim and mAP with backgrounds kept vs removed (the rows over all queries)."""
    bg = bg[bg.group == "all"] if "group" in bg.columns else bg
    encs = list(dict.fromkeys(bg.encoder))
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    w = 0.38
    for i, col in enumerate(("sim", "map")):
        ax = axes[i]
        for k, b in enumerate(("kept", "removed")):
            v = [float(bg[(bg.encoder == e) & (bg.background == b)][col].mean()) for e in encs]
            ax.bar(np.arange(len(encs)) + (k - 0.5) * w, v, w, label=f"background {b}")
        ax.set_xticks(range(len(encs)), encs, fontsize=8)
        ax.set_ylim(0, 1.02)
        ax.set_title(f"oracle {col}", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f"Background removal (profile {profile})", fontsize=10)
    fig.tight_layout()
    return fig


def plot_retrieval_lists(cases: list[dict], profile: str):
    """Fig. 4: per case (dict with ``reference``, ``generated``, ``title``, ``ranked`` = a
    :func:`top_k_lists` frame and ``name``), the reference, the generated query and its top-k
    gallery list (green frame = right identity)."""
    k = max(len(c["ranked"]) for c in cases)
    fig, axes = plt.subplots(len(cases), k + 2, figsize=(1.6 * (k + 2), 1.9 * len(cases)), squeeze=False)
    for i, c in enumerate(cases):
        ims = [(c["reference"], "reference", None), (c["generated"], "query", None)]
        ims += [(r.file_path, f"#{r.rank} {r.cosine:.2f}", r.name == c["name"]) for r in c["ranked"].itertuples()]
        for j, ax in enumerate(axes[i]):
            ax.axis("off")
            if j >= len(ims):
                continue
            p, t, ok = ims[j]
            with Image.open(p) as im:
                ax.imshow(im.convert("RGB"))
            ax.set_title(t, fontsize=7)
            if ok is not None:
                for s in ax.spines.values():
                    s.set_visible(True)
                    s.set_color("green" if ok else "red")
                    s.set_linewidth(3)
                ax.axis("on")
                ax.set_xticks([])
                ax.set_yticks([])
        axes[i, 0].text(-0.1, 0.5, c["title"], transform=axes[i, 0].transAxes, ha="right", va="center",
                        fontsize=7)
    fig.suptitle(f"Retrieval lists (profile {profile}); green = same identity", fontsize=9)
    fig.tight_layout()
    return fig
