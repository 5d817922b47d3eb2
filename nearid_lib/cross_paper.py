"""One table no release has: every identity encoder on every paper's benchmark (notebook 12).

The three papers each score their own model on their own benchmark. Here the identity models of
both (NearID's MAP head and ID-Sim) and their frozen backbones are scored on all three protocols,
each through the library code of the notebook that owns it (:mod:`nearid_lib.score.protocols`):

* **NearID-bench** (notebook 04's :func:`~nearid_lib.nearid.bench.run_bench`): SSR / PA pooled over
  the main sources, full image and foreground only, MTG M-O;
* **ID-Sim**: the selective sensitivity on the edit grids (notebook 10) where the data has them
  (``mini``); ID-Sim's public benchmarks (notebook 09's Subjects2k AP and DreamBench++ Spearman,
  :mod:`nearid_lib.idsim.public_eval`) in ``paper``, which has no grids;
* **FPR** (notebook 11's :func:`~nearid_lib.fpr.experiments.run_fpr`): gallery mAP of the real
  references and each metric's agreement with the generators' true drift.

The encoders (:func:`participants`): ``paper`` -- the released NearID model (``nearid-release``)
and the released ID-Sim (``idsim-release``), our trained NearID head when there is one, and the
frozen backbones of both papers (SigLIP2 through its MAP head, DINOv3 ViT-L/16); ``mini`` -- our
trained NearID head and ID-Sim, and their frozen backbone. An encoder that cannot be loaded (not in
the mirror, not trained yet) is left out with its reason in ``notes``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .features import Embedder, profile_embedders
from .features.profile_encoders import IDSIM_RELEASE, idsim_frozen_row, idsim_release_row
from .models import checkpoint_seeds, encoder_available, encoder_info, list_encoders, load_encoder, \
    resolve_device, resolve_name
from .models.published import published_seeds
from .paths import checkpoint_dir, seed_checkpoint_dir
from .score import Participant
from .score.card import assemble_table
from .score.protocols import run_fpr, run_idsim, run_idsim_public, run_nearid

if TYPE_CHECKING:
    from .config import Profile
    from .data import NearIDData

__all__ = ["CROSS_COLUMNS", "CrossPaper", "participants", "cross_paper", "plot_cross_paper", "owner_disagreements"]

# (column, paper, what, better)
CROSS_COLUMNS = (
    ("nearid_ssr", "NearID", "NearID-bench SSR %", "higher"),
    ("nearid_pa", "NearID", "NearID-bench PA %", "higher"),
    ("nearid_fg_ssr", "NearID", "SSR %, foreground only", "higher"),
    ("mtg_mo", "NearID", "MTG M-O (r)", "higher"),
    ("idsim_identity", "ID-Sim", "sensitivity to identity", "higher"),
    ("idsim_background", "ID-Sim", "sensitivity to background", "lower"),
    ("idsim_viewpoint", "ID-Sim", "sensitivity to viewpoint", "lower"),
    ("idsim_subjects2k_ap", "ID-Sim", "Subjects2k AP", "higher"),
    ("idsim_dreambench_spearman", "ID-Sim", "DreamBench++ Spearman", "higher"),
    ("fpr_map", "FPR", "gallery mAP, real references", "higher"),
    ("fpr_rho_map", "FPR", "mAP's agreement with true drift (rho)", "higher"),
)


@dataclass
class CrossPaper:
    """``table``: one row per encoder (``row`` label, ``kind``, ``key``) with the columns of
    :data:`CROSS_COLUMNS` that were scored; ``notes``: encoders or benchmarks left out, and why, and
    ``seed_note`` (also among the notes): which training seed the trained rows are."""

    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    seed_note: str = ""


def seed_note(cfg: Profile) -> str:
    """Which training seeds each trained row of the table averages: every seed of its checkpoint, as
    the claims and the notebooks that own each benchmark do (said on the figure). "" when no trained
    model is published."""
    ck, parts = checkpoint_dir(cfg.name), []
    for name, what in (("nearid", "the NearID head"), ("idsim", "ID-Sim")):
        if (ck / name).exists():     # each trained encoder reads its own checkpoint's seed list
            _, seeds = checkpoint_seeds(name, ck / name)
            parts.append(f"{what}: seeds {', '.join(map(str, seeds))}")
    if not parts:
        return ""
    return ("Trained rows are the mean over their training seeds (" + "; ".join(parts) + "), as NearID Tables 1 "
            "and 7, the Fig. 6 regression and the claims average them.")


def participants(cfg: Profile, data: NearIDData, progress: bool = False) -> tuple[list[Participant], list[str]]:
    """The identity encoders of the table and the frozen backbones beside them (module docstring);
    ``(participants, notes)``."""
    notes: list[str] = []
    ck = checkpoint_dir(cfg.name)
    names = [cfg.backbone.name]
    if cfg.world.source != "procedural":
        names.append("nearid-release")
    if (ck / "nearid").exists():
        names.append("nearid")
    else:
        notes.append(f"NearID head: not trained for {cfg.name!r} ({ck / 'nearid'} absent; notebook 03)")
    sub = replace(cfg, eval=replace(cfg.eval, encoders=tuple(names)))
    parts: list[Participant] = []
    # every training seed of the NearID head (one embedder each), averaged into its row
    heads = list(published_seeds(ck / "nearid").items()) if (ck / "nearid").exists() else None
    for e in profile_embedders(sub, data, progress=progress, checkpoints=heads):
        kind = {"nearid": "nearid", "nearid-release": "nearid"}.get(e.name, "frozen")
        label = e.label if e.name != "nearid-release" else "NearID, released weights"
        parts.append(Participant(e.name, label, kind, e, e.encoder, seed=e.seed if e.name == "nearid" else None))
    if cfg.world.source != "procedural" and names.count("nearid-release") and \
            not any(p.key == "nearid-release" for p in parts):
        notes.append("NearID released weights: not loaded (Aleksandar/nearid-siglip2 not in the mirror)")
    # (key, label, kind, loader): ID-Sim's rows through the registry, loaded the way notebook 09 loads them
    extra: list[tuple[str, str, str, Any]] = []
    if cfg.world.source != "procedural":
        extra.append((IDSIM_RELEASE, "ID-Sim, released weights", "idsim", lambda: idsim_release_row(cfg)))
        # the authors' other three released backbones (rows of their own; only those in the mirror)
        extra += [(n, f"{encoder_info(n).label}, released weights", "idsim", lambda n=n: idsim_release_row(cfg, n))
                  for n in list_encoders(group=IDSIM_RELEASE) if n != IDSIM_RELEASE and encoder_available(n) is None]
        if resolve_name(cfg.idsim.backbone) != resolve_name(cfg.backbone.name):
            extra.append((cfg.idsim.backbone, f"{cfg.idsim.backbone} (frozen, ID-Sim's backbone)", "frozen",
                          lambda: idsim_frozen_row(cfg, cfg.idsim.backbone)))
    elif (ck / "idsim").exists():
        # every training seed of ID-Sim (its checkpoint's own first), averaged into its row
        own, seeds = checkpoint_seeds("idsim", ck / "idsim")
        for s in [own, *(x for x in seeds if x != own)]:
            folder = ck / "idsim" if s == own else seed_checkpoint_dir(ck / "idsim", s)
            extra.append(("idsim", f"ID-Sim ({cfg.idsim.backbone} + LoRA, {cfg.name})", "idsim",
                          lambda f=folder: load_encoder("idsim", device=resolve_device(cfg.device),
                                                        checkpoint=str(f))[0], s))
    else:
        notes.append(f"ID-Sim: not trained for {cfg.name!r} ({ck / 'idsim'} absent; notebook 09)")
    for key, label, kind, load, *seed in extra:
        try:
            model = load()
        except (OSError, ValueError, KeyError) as err:     # not in the mirror, gated, ...
            notes.append(f"{label}: not loaded ({' '.join(str(err).split())[:300]})")
            continue
        # pooled outputs only (the test images of every source): no token grids kept
        emb = Embedder(model, data, profile=cfg, progress=progress, store_tokens=False, name=key, label=label)
        parts.append(Participant(key, label, kind, emb, model, seed=seed[0] if seed else None))
    return parts, notes


def cross_paper(cfg: Profile, data: NearIDData, seed: int = 0, progress: bool = False) -> CrossPaper:
    """Score every participant (:func:`participants`) on the three protocols; see the module
    docstring."""
    parts, notes = participants(cfg, data, progress)
    results: dict[str, Any] = {"nearid": run_nearid(parts, cfg, data)}
    if data.grids is not None and len(data.grids):
        results["idsim"] = run_idsim(parts, cfg, data, seed, notes)
    results["fpr"] = run_fpr(parts, cfg, data, cfg.retrieval.batch_size, progress, True, notes)
    table = assemble_table(parts, results, cfg.name)
    table = table[table["kind"] != "paper"].reset_index(drop=True)
    if not (data.grids is not None and len(data.grids)):
        pub = run_idsim_public(parts, cfg, notes)
        for col in ("idsim_subjects2k_ap", "idsim_dreambench_spearman"):
            table[col] = [pub.get(k, {}).get(col, np.nan) for k in table["key"]]
    keep = ["row", "kind", "key"] + [c for c, *_ in CROSS_COLUMNS if c in table.columns and table[c].notna().any()] \
        + [c for c in ("n_seeds",) if c in table.columns]
    seeds = seed_note(cfg)
    return CrossPaper(table[keep].assign(profile=cfg.name), notes + ([seeds] if seeds else []), seeds)


def plot_cross_paper(table: pd.DataFrame, title: str = "", footnote: str = ""):
    """A heatmap: encoders as rows, the benchmarks of all three papers as columns (grouped by paper),
    each cell coloured by its place between its column's worst (0) and best (1) value, lower-is-better
    columns reversed, with a colour bar saying so, and printed with its value; ``footnote`` (e.g.
    :attr:`CrossPaper.seed_note`) under the axes."""
    import matplotlib.pyplot as plt

    cols = [(c, paper, what, better) for c, paper, what, better in CROSS_COLUMNS if c in table.columns]
    vals = table[[c for c, *_ in cols]].to_numpy(float)
    score = np.full_like(vals, np.nan)
    for j, (_, _, _, better) in enumerate(cols):
        v = vals[:, j]
        ok = np.isfinite(v)
        if ok.sum() > 1:
            lo, hi = np.nanmin(v), np.nanmax(v)
            s = (v - lo) / (hi - lo) if hi > lo else np.full_like(v, 0.5)
            score[:, j] = s if better == "higher" else 1 - s
    fig, ax = plt.subplots(figsize=(1.15 * len(cols) + 4.5, 0.55 * len(table) + 2.2 + 0.4 * bool(footnote)))
    im = ax.imshow(np.ma.masked_invalid(score), cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    ax.grid(False)
    bar = fig.colorbar(im, ax=ax, fraction=0.03, pad=0.01, ticks=[0, 0.5, 1])
    bar.ax.set_yticklabels(["worst", "", "best"], fontsize=7)
    bar.set_label("place in its column\n(min to max; lower-better reversed)", fontsize=7)
    for i in range(vals.shape[0]):
        for j in range(vals.shape[1]):
            if np.isfinite(vals[i, j]):
                ax.text(j, i, f"{vals[i, j]:.3g}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels([f"{paper}\n{what}" + (" (lower better)" if better == "lower" else "")
                        for _, paper, what, better in cols], rotation=35, ha="right", fontsize=8)
    ax.set_yticks(range(len(table)))
    ax.set_yticklabels(table["row"].tolist(), fontsize=8)
    ax.set_title(title or "Every identity encoder on every paper's benchmark", fontsize=10)
    if footnote:
        fig.text(0.01, 0.01, footnote, ha="left", va="bottom", fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.06 if footnote else 0, 1, 1))
    return fig


# How far a cell of this table may sit from the same quantity in the notebook that owns its benchmark:
# both average the same seeds through the same protocol code, and differ only in where the embeddings
# were cached (float16 rows here, a float16 prefix store in notebook 10): 1e-3 on a sensitivity
# (a regression slope of cosines; 5e-6 measured on the smoke world), 0.01 points on SSR / PA.
OWNER_ATOL = {"sensitivity": 1e-3, "percent": 0.01}


def owner_disagreements(tables: str | os.PathLike) -> list[str]:
    """Where a trained row of ``12_cross_paper.csv`` (a run's ``tables`` folder) differs from the same
    quantity in the table of the notebook that owns the benchmark: the ID-Sim and NearID rows'
    sensitivities against ``10_sensitivity.csv`` (``estimate``), the NearID head's SSR and PA against
    ``04_table1_main.csv`` ("NearID (Ours)"), beyond :data:`OWNER_ATOL`. Empty when they agree or a
    table is absent (a profile without edit grids)."""
    tables = Path(tables)
    cp = tables / "12_cross_paper.csv"
    if not cp.exists():
        return []
    t12, out = pd.read_csv(cp), []

    def check(key: str, col: str, ref: float, atol: float, where: str) -> None:
        row = t12[t12["key"] == key]
        if row.empty or col not in row or not np.isfinite(ref):
            return
        val = float(row[col].iloc[0])
        if not abs(val - ref) <= atol:
            out.append(f"12_cross_paper {key}.{col} = {val:.6g}, {where} = {ref:.6g} (|difference| > {atol:g})")

    sens = tables / "10_sensitivity.csv"
    if sens.exists():
        t10 = pd.read_csv(sens)
        for key in ("idsim", "nearid"):
            for _, r in t10[t10["encoder"] == key].iterrows():
                check(key, f"idsim_{r['factor']}", float(r["estimate"]), OWNER_ATOL["sensitivity"],
                      f"10_sensitivity {r['model']}/{r['factor']}")
    t1 = tables / "04_table1_main.csv"
    if t1.exists():
        ours = pd.read_csv(t1).set_index("row")
        if "NearID (Ours)" in ours.index:
            for col in ("nearid_ssr", "nearid_pa"):
                check("nearid", col, float(ours.at["NearID (Ours)", col]), OWNER_ATOL["percent"],
                      f"04_table1_main NearID (Ours).{col}")
    return out
