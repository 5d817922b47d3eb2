"""FPR's gallery ablations (Fig. 5, Table 2) drawn by the authors' rules where their galleries are
(``retrieval.gallery_rule = "authors"``: the Re-ID species' ablation pools of
:mod:`.authors_splits`), else by ours (:mod:`.ablations`). One entry point per notebook table:
:func:`gallery_ablation` (Fig. 5, both panels) and :func:`sampling_table` (Table 2).

As the authors run them (``evaluation/get_ablation.py``, ``get_ablation_sample_gallery.py``, config
``metric: miewID``): on the Re-ID galleries only, each setting a gallery of ``n`` subjects x ``k``
images drawn from the pool -- the reference subjects, plus (``n`` larger than their number) other
identities of the species (which ones: ours, seeded; the authors' draw is unseeded), each subject's
rows sampled to ``k`` with a fresh ``RandomState(101)``; Fig. 5 (left) varies ``k`` at ten
subjects (every reference subject), Fig. 5 (right) ``n`` at ``gallery_per_id`` images. Table 2:
Random / k-means (in ``embed_with``'s space, the authors' MiewID) galleries of ``gallery_per_id``
images per reference subject from its pool images, and "Ours" = the main gallery.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from ..runtime.seeding import make_rng
from .ablations import SAMPLING_LABELS, ablation_rows, gallery_size_ablation, sampling_ablation, \
    subject_count_ablation
from .authors_splits import ablation_pool, kmeans_gallery, per_subject_gallery, random_galleries

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["gallery_ablation", "sampling_table", "authors_subjects"]


def _reid(df: pd.DataFrame, pool: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``df`` of the datasets that have a pool (the Re-ID species)."""
    return df[df["dataset"].isin(set(pool["dataset"]))].reset_index(drop=True) if "dataset" in df else df


def authors_subjects(pool: pd.DataFrame, train: pd.DataFrame, n: int, seed: int, group_by: str = "species"
                     ) -> list[str]:
    """The subjects of an ``n``-subject gallery per species: every reference subject, and when
    ``n`` exceeds their number, ``n - len`` other identities of the species' pool (seeded: ours)."""
    names: list[str] = []
    for grp, q in train.groupby(group_by, sort=True):
        qn = sorted(q["name"].unique())
        names += qn
        others = sorted(set(pool[pool[group_by] == grp]["name"]) - set(qn))
        extra = max(0, min(int(n) - len(qn), len(others)))
        if extra:
            pick = make_rng(seed, "authors_subjects", str(grp), int(n)).choice(len(others), size=extra, replace=False)
            names += [others[i] for i in sorted(pick)]
    return names


def gallery_ablation(models, train, gallery, generated, cfg: Profile, cache, seed: int = 0,
                     pool: pd.DataFrame | None = None) -> pd.DataFrame:
    """FPR Fig. 5: images per subject (``retrieval.gallery_sizes``) and subjects per gallery
    (``retrieval.subject_counts``). With the authors' ``pool``: their rule on the Re-ID galleries
    (module docstring); without: :func:`~.ablations.gallery_size_ablation` and
    :func:`~.ablations.subject_count_ablation` on every gallery."""
    rc = cfg.retrieval
    if pool is None:
        return pd.concat([gallery_size_ablation(models, train, gallery, generated, cfg, cache, seed),
                          subject_count_ablation(models, train, gallery, generated, cfg, cache, seed)],
                         ignore_index=True)
    tr, ge = _reid(train, pool), _reid(generated, pool)
    k_default = rc.gallery_per_id
    base = ablation_pool(pool, tr)
    sizes = [(k, per_subject_gallery(base, k)) for k in rc.gallery_sizes]
    counts = [(n, per_subject_gallery(pool[pool["name"].isin(authors_subjects(pool, tr, n, seed, rc.group_by))],
                                      k_default)) for n in rc.subject_counts]
    return pd.concat([ablation_rows(models, tr, pool, ge, cfg, cache, sizes, seed, "images_per_subject"),
                      ablation_rows(models, tr, pool, ge, cfg, cache, counts, seed, "subjects")],
                     ignore_index=True).assign(rule="authors (Re-ID pools)")


def sampling_table(models, train, gallery, generated, cfg: Profile, cache, embed_with: str, n_per_id: int,
                   seed: int = 0, pool: pd.DataFrame | None = None) -> pd.DataFrame:
    """FPR Table 2 (percent). With the authors' ``pool``: Random (``random.seed(101)``), k-means
    (``KMeans(k, random_state=42)`` on ``embed_with``'s unnormalised embeddings, nearest image to
    each centroid) and Ours (the main gallery), ``retrieval.gallery_per_id`` images per reference
    subject, Re-ID only; without: :func:`~.ablations.sampling_ablation`."""
    if pool is None:
        return sampling_ablation(models, train, gallery, generated, cfg, cache, embed_with, n_per_id, seed)
    rc = cfg.retrieval
    tr, ge, main = _reid(train, pool), _reid(generated, pool), _reid(gallery, pool)
    base = ablation_pool(pool, tr).reset_index(drop=True)
    k = rc.gallery_per_id
    variants = []
    for method in rc.sampling:
        if method == "random":
            sub = random_galleries(base, list(dict.fromkeys(tr["name"])), k)
        elif method == "kmeans":
            emb = _raw_embeddings(models[embed_with], base, rc.batch_size)
            parts = []
            for name in dict.fromkeys(tr["name"]):
                rows = base.index[base["name"] == name].to_numpy()
                parts.append(base.loc[rows[kmeans_gallery(emb[rows], min(len(rows), k))]])
            sub = pd.concat(parts)
        elif method == "curated":
            sub = base[base["file_path"].isin(set(main["file_path"]))]
        else:
            raise ValueError(f"retrieval.sampling: unknown method {method!r}; valid: random, kmeans, curated")
        variants.append((SAMPLING_LABELS.get(method, method), sub))
    t = ablation_rows(models, tr, pool, ge, cfg, cache, variants, seed, "sampling")
    wide = t.pivot_table(index=["encoder", "value"], columns="queries", values=["map", "sim"]).reset_index()
    wide.columns = ["encoder", "sampling"] + [f"{q}_{m}" for m, q in wide.columns[2:]]
    for c in [c for c in ("oracle_map", "oracle_sim", "generated_map", "generated_sim") if c in wide]:
        wide[c] = 100 * wide[c]
    wide["embed_with"] = embed_with
    wide["ours_label"] = [f"scored by {e}; authors' rule (Re-ID pools), k-means in {embed_with}'s space; "
                          f"'Ours' = the authors' gallery rule before their manual filtering" for e in wide.encoder]
    order = {v: i for i, v in enumerate(SAMPLING_LABELS.values())}
    return wide.sort_values(["encoder", "sampling"], key=lambda s: s.map(order) if s.name == "sampling" else s
                            ).reset_index(drop=True)


def _raw_embeddings(model, df: pd.DataFrame, batch_size: int) -> np.ndarray:
    """``model``'s pooled outputs of ``df``'s images *before* L2 normalisation (what the authors
    cluster; the library's feature store keeps normalised rows, so these are computed here)."""
    out = []
    with torch.no_grad():
        for i in range(0, len(df), batch_size):
            pix = model.preprocess.batch(list(df["file_path"].iloc[i:i + batch_size]))
            out.append(model(pix).pooled.float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, 0))
