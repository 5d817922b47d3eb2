"""Gallery ablations of Finer-Personalization Rank: images per subject and subjects per gallery
(FPR Figure 5), how the gallery is sampled (Table 2: random / k-means / curated) and background
removal (Figure 7, Table 14). Every ablation scores the reference images (oracle queries) and the
generated images against each sub-gallery with the same protocol."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..runtime.seeding import derive_seed, make_rng
from .datasets import sample_gallery
from .encoders import embed_images
from .protocol import oracle_scores, score_embeddings, summarise

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["gallery_size_ablation", "subject_count_ablation", "sampling_ablation", "background_ablation",
           "background_note", "SAMPLING_LABELS"]


def _emb(model, df, cache, bs, background="kept"):
    masks = list(df.mask_path) if background == "removed" else None
    return embed_images(model, list(df.file_path), cache, bs, masks=masks, background=background)


def _groups(df, group_by):
    return df[group_by].to_numpy() if group_by else np.zeros(len(df), int)


def _subsample_gallery(gallery, per_id: int | None, subjects: int | None, seed: int, group_by):
    """Seeded sub-gallery: ``per_id`` images per identity, ``subjects`` identities per group."""
    g = gallery
    if subjects is not None:
        keep = []
        for grp, d in g.groupby(group_by if group_by else (lambda _: 0), sort=True):
            names = sorted(d.name.unique())
            k = min(subjects, len(names))
            pick = make_rng(seed, "subjects", str(grp), subjects).choice(len(names), size=k, replace=False)
            keep += [names[i] for i in sorted(pick)]
        g = g[g.name.isin(keep)]
    if per_id is not None:
        parts = []
        for name, d in g.groupby("name", sort=True):
            idx = sample_gallery(d, per_id, "random", seed=derive_seed("per_id", name, per_id, base=seed))
            parts.append(d.iloc[idx])
        g = pd.concat(parts)
    return g.reset_index(drop=True)


def ablation_rows(models, train, gallery, generated, cfg, cache, variants, seed, kind):
    rows = []
    gb = cfg.retrieval.group_by
    bs = cfg.retrieval.batch_size
    for enc, m in models.items():
        full_g = _emb(m, gallery, cache, bs)
        q_real = _emb(m, train, cache, bs)
        q_gen = _emb(m, generated, cache, bs)
        pos = {p: i for i, p in enumerate(gallery.file_path)}
        for value, sub in variants:
            ge = full_g[[pos[p] for p in sub.file_path]]
            names = set(sub.name)
            for qkind, q, qdf in (("oracle", q_real, train), ("generated", q_gen, generated)):
                k = qdf.name.isin(names).to_numpy()
                pq = score_embeddings(q[k], qdf.name.to_numpy()[k], ge, sub.name.to_numpy(),
                                      _groups(qdf[k], gb), _groups(sub, gb))
                # Fig. 5 / Table 2 similarity: mean cosine to the subject's gallery images
                s = q[k] @ ge.T                                                   # [q, g]
                gn = sub.name.to_numpy()
                pq["sim"] = [s[i, gn == n].mean() for i, n in enumerate(qdf.name.to_numpy()[k])]
                if qkind == "generated":
                    pq["method"] = qdf.method.to_numpy()[k]
                    # the paper averages over personalization methods: mean of per-method means
                    per_m = summarise(pq, ("method",))
                    mp, sm = per_m["map"].mean(), per_m["sim"].mean()
                else:
                    mp, sm = pq.ap.mean(), pq.sim.mean()
                rows.append({"ablation": kind, "value": value, "encoder": enc, "queries": qkind,
                             "map": float(mp), "sim": float(sm), "n_gallery": int(len(sub)),
                             "n_subjects": int(sub.name.nunique())})
    return pd.DataFrame(rows)


def gallery_size_ablation(models, train, gallery, generated, cfg: Profile, cache, seed: int = 0) -> pd.DataFrame:
    """Paper Fig. 5 (left): images per subject in ``cfg.retrieval.gallery_sizes``."""
    variants = [(n, _subsample_gallery(gallery, n, None, seed, cfg.retrieval.group_by))
                for n in cfg.retrieval.gallery_sizes]
    return ablation_rows(models, train, gallery, generated, cfg, cache, variants, seed, "images_per_subject")


def subject_count_ablation(models, train, gallery, generated, cfg: Profile, cache, seed: int = 0) -> pd.DataFrame:
    """Paper Fig. 5 (right): subjects per gallery in ``cfg.retrieval.subject_counts`` (per group)."""
    variants = [(n, _subsample_gallery(gallery, None, n, seed, cfg.retrieval.group_by))
                for n in cfg.retrieval.subject_counts]
    return ablation_rows(models, train, gallery, generated, cfg, cache, variants, seed, "subjects")


SAMPLING_LABELS = {"random": "Random", "kmeans": "k-means", "curated": "Ours"}



def sampling_ablation(models, train, gallery, generated, cfg: Profile, cache, embed_with: str, n_per_id: int,
                      seed: int = 0) -> pd.DataFrame:
    """Paper Table 2: galleries of ``n_per_id`` images per subject chosen from the full gallery
    pool by random / k-means (in ``embed_with``'s space, the paper's MiewID role) / curated
    sampling; oracle and generated mAP and similarity in **percent** (the paper's unit). The
    ``sampling`` key uses the paper's labels (``Ours`` = our documented curated rule)."""
    bs = cfg.retrieval.batch_size
    pool_emb = _emb(models[embed_with], gallery, cache, bs)
    variants = []
    for method in cfg.retrieval.sampling:
        parts = []
        for name, d in gallery.groupby("name", sort=True):
            idx = sample_gallery(d, n_per_id, method, seed=derive_seed("sampling", name, base=seed),
                                 embeddings=pool_emb[d.index.to_numpy()])
            parts.append(d.iloc[idx])
        variants.append((SAMPLING_LABELS.get(method, method), pd.concat(parts).reset_index(drop=True)))
    t = ablation_rows(models, train, gallery, generated, cfg, cache, variants, seed, "sampling")
    wide = t.pivot_table(index=["encoder", "value"], columns="queries", values=["map", "sim"]).reset_index()
    wide.columns = ["encoder", "sampling"] + [f"{q}_{m}" for m, q in wide.columns[2:]]
    for c in ("oracle_map", "oracle_sim", "generated_map", "generated_sim"):
        wide[c] = 100 * wide[c]
    wide["embed_with"] = embed_with
    # which of our encoders a row scores (the paper's table is MiewID's alone): shown in the report
    wide["ours_label"] = [f"scored by {e}; k-means in {embed_with}'s space" for e in wide.encoder]
    order = {v: i for i, v in enumerate(SAMPLING_LABELS.values())}
    return wide.sort_values(["encoder", "sampling"], key=lambda s: s.map(order) if s.name == "sampling" else s
                            ).reset_index(drop=True)


def background_ablation(models, train, gallery, cfg: Profile, cache, dataset: str = "NearID-mini",
                        per_query: bool = False, removed: tuple[pd.DataFrame, pd.DataFrame] | None = None):
    """Paper Fig. 7 / Table 14: oracle sim and mAP with backgrounds kept vs removed (``per_query``:
    also the per-reference APs, columns ``encoder``, ``background``, ``name``, ``ap``).

    "removed": ``removed`` = the reference and gallery tables of background-removed copies (the
    paper profile: carvekit at the FPR authors' settings, :func:`~.bg_removal.removed_tables`), or,
    without them, the tables' object masks on grey (the procedural world). One row per encoder over
    all queries (``group`` "all") and, where the tables carry the paper's ``dataset`` keys, per
    dataset family (``reid`` / ``cub`` / ``cars``: the mean of its species' mAPs, as Table 14)."""
    rows, pqs = [], []
    has_masks = all("mask_path" in t.columns and t.mask_path.astype(str).str.len().gt(0).all()
                    for t in (train, gallery))
    for name, m in models.items():
        variants = [("kept", train, gallery, "kept")]
        if removed is not None:
            variants.append(("removed", removed[0], removed[1], "kept"))
        elif has_masks:
            variants.append(("removed", train, gallery, "removed"))
        for bg, tr, ga, mode in variants:
            t, pq = oracle_scores(m, tr, ga, cfg.retrieval.group_by, cache, cfg.retrieval.batch_size,
                                  background=mode, return_per_query=True)
            t = t[t.group == "all"]
            rows.append({"dataset": dataset, "group": "all", "background": bg, "encoder": name,
                         "sim": float(t.sim.iloc[0]), "map": float(t["map"].iloc[0])})
            if "dataset" in tr.columns:
                fam = pd.Series(tr["dataset"].map(_family).to_numpy(), index=pq.index)
                for f, d in pq.groupby(fam, sort=True):
                    per_sp = d.groupby("group").agg(map=("ap", "mean"), sim=("sim", "mean"))
                    rows.append({"dataset": dataset, "group": f, "background": bg, "encoder": name,
                                 "sim": float(per_sp.sim.mean()), "map": float(per_sp["map"].mean())})
            pqs.append(pq.assign(encoder=name, background=bg))
    return (pd.DataFrame(rows), pd.concat(pqs, ignore_index=True)) if per_query else pd.DataFrame(rows)


def _family(key: str) -> str:
    """The paper's dataset family of a gallery key (Table 14's rows): reid, cub or cars."""
    k = str(key)
    return "cub" if k.startswith("cub") else "cars" if "cars" in k else "reid"


def _has_masks(*tables) -> bool:
    return all("mask_path" in t.columns and t.mask_path.astype(str).str.len().gt(0).all() for t in tables)


def background_note(train, gallery, removed_by: str | None = None, why_not: str | None = None) -> dict:
    """Sidecar note of the background table: how the "removed" rows were made (``removed_by``: the
    carvekit weights of the copies), ``{}`` when the tables' own object masks made them, else why
    only the "kept" rows are there (``why_not``, e.g. carvekit's weights absent from the mirror)."""
    if removed_by is not None:
        return {"note": "backgrounds removed with carvekit at the FPR authors' settings (nearid_lib.fpr.bg_removal); "
                        "weights: " + removed_by}
    if _has_masks(train, gallery):
        return {}
    return {"note": "backgrounds kept only: " + (why_not or "these galleries carry no object masks (mask_path) "
                                                           "and no background-removed copies were made")}
