"""Scoring of the Finer-Personalization Rank protocol: gallery mAP beside pairwise similarity.

For each generated image (query) and an evaluation encoder:

- **mAP** (the protocol): the query ranks the gallery by cosine similarity; AP over the full
  ranking with the query identity's gallery images as the relevant set
  (:func:`nearid_lib.metrics.retrieval_map` with ``ties="expected"``: the AP expected over every
  order of gallery images tied in similarity, so no score depends on the gallery's order; a query
  whose identity has no gallery image is an error). With ``group_by="species"`` each query ranks only
  the gallery of its own group, as the paper's per-species / per-dataset galleries do (each of its
  Tables 5-13 is one gallery of ~10 similar subjects).
- **pairwise similarity** (CLIP-I / DINO score): cosine between the generated image and its
  reference, ``ref_path`` of the generated row (the paper's generated_data.csv carries the
  reference of each generation). ``sim_to="references"`` averages over all reference images of the
  identity instead; ``sim_to="gallery"`` over the identity's gallery images (the Fig. 5 / Table 2
  definition: "the similarity between all the corresponding gallery and generated images").
- **ROC-AUC** of same-identity vs other (query, gallery) pairs and **nDCG** of the ranking
  (:func:`nearid_lib.metrics.verification_auc`, :func:`nearid_lib.metrics.ndcg`), both within the
  same gallery scope as mAP.
- **CLIP-T** needs a CLIP text tower and the prompts (``prompt`` column); ``mini`` has no text
  encoder (the EfficientNet backbone is image-only), so CLIP-T is reported only when a text
  encoder is given (:func:`clip_t`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from ..data.fpr_layout import FPRLayoutError, load_fpr_split, read_fpr_table, read_generated, resolve_paths
from ..metrics import cosine_similarity_matrix, ndcg, random_ranking_ap, retrieval_map, verification_auc
from ..models import load_encoder
from .encoders import FeatureStore, embed_images

__all__ = ["score_embeddings", "rank_generator", "RankResult", "oracle_scores", "top_k_lists",
           "summarise", "clip_t", "load_gallery", "chance_ap"]


def score_embeddings(q_emb: np.ndarray, q_names: Sequence, g_emb: np.ndarray, g_names: Sequence,
                     q_groups: Sequence | None = None, g_groups: Sequence | None = None,
                     sim_emb: np.ndarray | None = None) -> pd.DataFrame:
    """Per-query scores: ``ap`` (retrieval AP in the query's gallery scope), ``top1`` (the best
    gallery image is of the right identity), ``sim`` (cosine to ``sim_emb`` row-aligned with the
    queries, e.g. each query's reference; NaN without it), ``n_gallery`` (scope size).

    With groups, a query ranks only gallery images of its own group."""
    q_names, g_names = np.asarray(q_names), np.asarray(g_names)
    if q_groups is None or g_groups is None:
        q_groups = np.zeros(len(q_names), int)
        g_groups = np.zeros(len(g_names), int)
    q_groups, g_groups = np.asarray(q_groups), np.asarray(g_groups)
    ap = np.full(len(q_names), np.nan)
    top1 = np.zeros(len(q_names), bool)
    ngal = np.zeros(len(q_names), int)
    for grp in pd.unique(q_groups):
        qi = np.flatnonzero(q_groups == grp)
        gi = np.flatnonzero(g_groups == grp)
        if len(gi) == 0:
            raise FPRLayoutError(f"group {grp!r}: queries {len(qi)} but no gallery image")
        _, aps = retrieval_map(q_emb[qi], q_names[qi], g_emb[gi], g_names[gi], return_per_query=True,
                               ties="expected")
        ap[qi] = aps
        sims = cosine_similarity_matrix(q_emb[qi], g_emb[gi])                     # [q, g]
        best = np.argsort(-sims, axis=1, kind="stable")[:, 0]
        top1[qi] = g_names[gi][best] == q_names[qi]
        ngal[qi] = len(gi)
    sim = np.full(len(q_names), np.nan)
    if sim_emb is not None:
        a = q_emb / np.linalg.norm(q_emb, axis=1, keepdims=True)
        b = sim_emb / np.linalg.norm(sim_emb, axis=1, keepdims=True)
        sim = (a * b).sum(1)
    return pd.DataFrame({"ap": ap, "top1": top1, "sim": sim, "n_gallery": ngal})


def chance_ap(q_names: Sequence, g_names: Sequence, q_groups: Sequence | None = None,
              g_groups: Sequence | None = None) -> np.ndarray:
    """Per query, the AP a random ranking of its gallery scope would score in expectation
    (:func:`nearid_lib.metrics.random_ranking_ap`: the scope's size and how many of its images show
    the query's identity): mAP's chance level on exactly these queries and galleries."""
    q_names, g_names = np.asarray(q_names), np.asarray(g_names)
    if q_groups is None or g_groups is None:
        q_groups, g_groups = np.zeros(len(q_names), int), np.zeros(len(g_names), int)
    q_groups, g_groups = np.asarray(q_groups), np.asarray(g_groups)
    out = np.empty(len(q_names))
    for i, (name, grp) in enumerate(zip(q_names, q_groups)):
        scope = g_names[g_groups == grp]
        out[i] = random_ranking_ap(len(scope), int((scope == name).sum()))
    return out


def _auc_ndcg(q_emb, q_names, g_emb, g_names, q_groups, g_groups) -> tuple[float, float]:
    """Pooled ROC-AUC over all in-scope (query, gallery) pairs and mean nDCG over queries."""
    scores, labels, nd, w = [], [], [], []
    for grp in pd.unique(q_groups):
        qi, gi = np.flatnonzero(q_groups == grp), np.flatnonzero(g_groups == grp)
        s = cosine_similarity_matrix(q_emb[qi], g_emb[gi])                        # [q, g]
        rel = (np.asarray(g_names)[gi][None, :] == np.asarray(q_names)[qi][:, None]).astype(float)
        scores.append(s.ravel())
        labels.append(rel.ravel())
        if len(gi) > 1:
            nd.append(ndcg(rel, s))
            w.append(len(qi))
    s, y = np.concatenate(scores), np.concatenate(labels)
    auc = verification_auc(s, y) if 0 < y.sum() < len(y) else float("nan")
    return auc, float(np.average(nd, weights=w)) if nd else float("nan")


def summarise(per_query: pd.DataFrame, by: Sequence[str] = ("method",)) -> pd.DataFrame:
    """Mean AP (= mAP), mean similarity, top-1 accuracy and counts per ``by`` group."""
    by = [b for b in by if b in per_query.columns]
    g = per_query.groupby(by, sort=False) if by else per_query.assign(_all=0).groupby("_all")
    out = g.agg(map=("ap", "mean"), sim=("sim", "mean"), top1=("top1", "mean"),
                n_queries=("ap", "size"), n_gallery=("n_gallery", "mean")).reset_index()
    return out.drop(columns=["_all"], errors="ignore")


@dataclass
class RankResult:
    """Output of :func:`rank_generator`: ``summary`` (one row per method: mAP, sim, top1, AUC,
    nDCG, counts) and ``per_query`` (one row per generated image with its AP and similarity)."""

    summary: pd.DataFrame
    per_query: pd.DataFrame
    encoder: str
    extra: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:  # what a user sees in a notebook
        return f"RankResult(encoder={self.encoder!r})\n{self.summary.to_string(index=False)}"


def load_gallery(gallery: str | os.PathLike | pd.DataFrame, check_files: bool = True) -> pd.DataFrame:
    """A gallery table with absolute paths from a ``gallery_data.csv``, the folder holding it
    (with ``train_data.csv``: disjointness is checked), or a DataFrame."""
    if isinstance(gallery, pd.DataFrame):
        return gallery
    p = Path(gallery)
    if p.is_dir():
        return load_fpr_split(p, check_files=check_files).gallery
    return resolve_paths(read_fpr_table(p, "gallery", check_files=check_files))


def _references(references, gallery_src) -> pd.DataFrame | None:
    if isinstance(references, pd.DataFrame):
        return references
    if references is not None:
        return resolve_paths(read_fpr_table(references, "train"))
    if not isinstance(gallery_src, pd.DataFrame):
        p = Path(gallery_src)
        cand = (p if p.is_dir() else p.parent) / "train_data.csv"
        if cand.exists():
            return load_fpr_split(cand.parent).train
    return None


def rank_generator(generated, gallery, encoder: str | Any = "efficientnet-lite0", *,
                   references=None, method: str | None = None, group_by: str | None = "species",
                   sim_to: str = "ref_path", background: str = "kept", cache_dir=None,
                   batch_size: int = 32, tiny: bool = False, device: str = "cpu",
                   encoder_kw: dict | None = None, with_auc: bool = True, progress: bool = True) -> RankResult:
    """Score generated images against a gallery with the Finer-Personalization Rank protocol.

    Args:
        generated: ``generated_data.csv`` (columns name, species, file_path, ref_path, method), a
            DataFrame in that layout, or a folder of images named ``<identity>/<file>`` or
            ``<identity>__<k>.png`` (then ``references`` supplies species and ref_path).
        gallery: ``gallery_data.csv``, the folder holding it (and ``train_data.csv``), or a DataFrame.
        encoder: a registry name (``efficientnet-lite0``, ``clip-vit-b32``, ``dinov2-base``,
            ``bioclip2``, ``miewid`` (needs ``encoder_kw={"allow_remote_code": True}``),
            ``nearid`` (``encoder_kw={"checkpoint": ...}``), ...) or an already loaded encoder.
        references: ``train_data.csv`` / DataFrame; default: ``train_data.csv`` beside the gallery.
        method: keep only this method's rows.
        group_by: ``"species"`` ranks each query against its own group's gallery; None: the whole file.
        sim_to: ``"ref_path"`` | ``"references"`` | ``"gallery"`` (see the module docstring).
        background: ``"kept"`` or ``"removed"`` (needs ``mask_path`` in both tables).
        cache_dir: the feature store folder of the embeddings (or a :class:`FeatureStore`; None: in memory).
        progress: progress bars while images are embedded (:mod:`nearid_lib.imageio` reads them).

    Returns:
        :class:`RankResult` with ``summary`` (per method: ``map``, ``sim``, ``top1``, ``auc``,
        ``ndcg``, ``n_queries``, ``n_gallery`` and ``map_chance``, the mAP a random ranking of the
        same galleries scores: :func:`chance_ap`) and ``per_query`` (with ``ap_chance``).
    """
    gal = load_gallery(gallery)
    refs = _references(references, gallery)
    gen = read_generated(generated, method=method, train=refs)
    if method is not None and "method" in gen.columns:
        gen = gen[gen.method == method].reset_index(drop=True)
    if len(gen) == 0:
        raise FPRLayoutError(f"no generated images{' for method ' + repr(method) if method else ''}")
    missing = sorted(set(gen.name) - set(gal.name))
    if missing:
        raise FPRLayoutError(f"generated identities {missing[:8]} have no image in the gallery "
                             f"(mAP undefined for them)")
    _check_group_by(group_by, gen, gal)
    if isinstance(encoder, str):
        model, _ = load_encoder(encoder, tiny=tiny, device=device, cache=True, **(encoder_kw or {}))
        enc_name = encoder
    else:
        model, enc_name = encoder, getattr(encoder, "name", "encoder")
    cache = cache_dir if isinstance(cache_dir, FeatureStore) else FeatureStore(cache_dir)

    def emb(df):
        masks = list(df.mask_path) if (background == "removed" and "mask_path" in df.columns) else None
        if background == "removed" and masks is None:
            raise FPRLayoutError(f"{df.attrs.get('source', 'table')}: background='removed' needs mask_path")
        return embed_images(model, list(df.file_path), cache, batch_size, masks=masks, background=background,
                            progress=progress)

    g_emb, q_emb = emb(gal), emb(gen)
    qg = gen[group_by].to_numpy() if group_by else None
    gg = gal[group_by].to_numpy() if group_by else None
    sim = _similarity(model, gen, q_emb, gal, g_emb, refs, sim_to, cache, batch_size, background)
    pq = score_embeddings(q_emb, gen.name.to_numpy(), g_emb, gal.name.to_numpy(), qg, gg)
    pq["sim"] = sim
    pq["ap_chance"] = chance_ap(gen.name.to_numpy(), gal.name.to_numpy(), qg, gg)
    pq = pd.concat([gen.reset_index(drop=True), pq], axis=1)
    summary = summarise(pq, ("method",))
    summary.insert(int(summary.columns.get_loc("map")) + 1, "map_chance",
                   pq.groupby("method", sort=False)["ap_chance"].mean().reindex(summary.method).to_numpy())
    if with_auc:
        rows = []
        for m in summary.method:
            k = (pq.method == m).to_numpy()
            auc, nd = _auc_ndcg(q_emb[k], gen.name.to_numpy()[k], g_emb, gal.name.to_numpy(),
                                qg[k] if group_by else np.zeros(k.sum(), int),
                                gg if group_by else np.zeros(len(gal), int))
            rows.append((auc, nd))
        summary["auc"], summary["ndcg"] = [r[0] for r in rows], [r[1] for r in rows]
    summary.insert(1, "encoder", enc_name)
    return RankResult(summary, pq, enc_name, {"q_emb": q_emb, "g_emb": g_emb, "gallery": gal})


def _similarity(model, gen, q_emb, gal, g_emb, refs, sim_to, cache, batch_size, background):
    """Pairwise similarity of each generated image (see the module docstring)."""
    if sim_to == "ref_path":
        ref_paths = list(gen.ref_path)
        masks = None
        if background == "removed":
            # the reference's mask: look it up in the reference/gallery tables
            lut = {}
            for t in (refs, gal):
                if t is not None and "mask_path" in t.columns:
                    lut.update(dict(zip(t.file_path, t.mask_path)))
            masks = [lut.get(p, "") for p in ref_paths]
        uniq = list(dict.fromkeys(ref_paths))
        um = None if masks is None else [dict(zip(ref_paths, masks))[p] for p in uniq]
        e = embed_images(model, uniq, cache, batch_size, masks=um, background=background)
        pos = {p: i for i, p in enumerate(uniq)}
        r = e[[pos[p] for p in ref_paths]]
        return (q_emb * r).sum(1) / (np.linalg.norm(q_emb, axis=1) * np.linalg.norm(r, axis=1))
    if sim_to == "gallery":
        table, emb = gal, g_emb
    elif sim_to == "references":
        if refs is None:
            raise FPRLayoutError("sim_to='references' needs the reference table (references=...)")
        masks = list(refs.mask_path) if background == "removed" else None
        table = refs
        emb = embed_images(model, list(refs.file_path), cache, batch_size, masks=masks, background=background)
    else:
        raise ValueError(f"sim_to must be 'ref_path', 'references' or 'gallery', got {sim_to!r}")
    s = cosine_similarity_matrix(q_emb, emb)                                       # [Q, R]
    names = table.name.to_numpy()
    out = np.empty(len(gen))
    for i, n in enumerate(gen.name.to_numpy()):
        out[i] = s[i, names == n].mean()
    return out


def oracle_scores(model, train: pd.DataFrame, gallery: pd.DataFrame, group_by: str | None = "species",
                  cache: FeatureStore | None = None, batch_size: int = 32,
                  background: str = "kept", return_per_query: bool = False):
    """Paper Table 1: the real reference images as queries. ``sim`` = mean cosine between each
    reference and the gallery images of its identity ("similarity between real images");
    ``map`` = mAP of the references probing the gallery. One row per group + ``"all"``
    (``return_per_query``: also the per-reference rows, ``name``, ``ap``, ``sim``, ``group``)."""
    def masks(df):
        return list(df.mask_path) if background == "removed" else None

    q = embed_images(model, list(train.file_path), cache, batch_size, masks(train), background)
    g = embed_images(model, list(gallery.file_path), cache, batch_size, masks(gallery), background)
    qg = train[group_by].to_numpy() if group_by else None
    gg = gallery[group_by].to_numpy() if group_by else None
    pq = score_embeddings(q, train.name.to_numpy(), g, gallery.name.to_numpy(), qg, gg)
    s = cosine_similarity_matrix(q, g)
    gn = gallery.name.to_numpy()
    pq["sim"] = [s[i, gn == n].mean() for i, n in enumerate(train.name.to_numpy())]
    pq["group"] = qg if group_by else "all"
    pq["name"] = train.name.to_numpy()
    per = summarise(pq, ("group",))
    tot = summarise(pq.assign(group="all"), ("group",))
    table = pd.concat([per, tot], ignore_index=True) if group_by else tot
    return (table, pq) if return_per_query else table


def top_k_lists(q_emb: np.ndarray, g_emb: np.ndarray, gallery: pd.DataFrame, k: int = 5,
                q_groups: Sequence | None = None, group_by: str | None = "species") -> list[pd.DataFrame]:
    """Paper Fig. 4: for each query, its top-``k`` gallery images (rank, file_path, name, cosine),
    in the query's gallery scope, with the stable tie order of :func:`retrieval_map`."""
    out = []
    s = cosine_similarity_matrix(q_emb, g_emb)
    for i in range(len(q_emb)):
        idx = np.arange(len(gallery))
        if q_groups is not None and group_by:
            idx = np.flatnonzero(gallery[group_by].to_numpy() == q_groups[i])
        order = idx[np.argsort(-s[i, idx], kind="stable")][:k]
        out.append(pd.DataFrame({"rank": np.arange(1, len(order) + 1),
                                 "file_path": gallery.file_path.to_numpy()[order],
                                 "name": gallery.name.to_numpy()[order], "cosine": s[i, order]}))
    return out


def clip_t(images: Sequence, prompts: Sequence[str], model_name: str = "openai/clip-vit-base-patch32",
           model=None, processor=None) -> np.ndarray:
    """CLIP-T: cosine between CLIP image and text embeddings of each (generated image, prompt).

    Needs a CLIP model with its text tower (``transformers.CLIPModel``); pass ``model`` and
    ``processor`` to reuse loaded ones. Not available offline in ``mini`` (no text encoder ships
    in a wheel), so notebooks report it only in the paper profile."""
    from transformers import CLIPModel, CLIPProcessor

    model = model or CLIPModel.from_pretrained(model_name)
    processor = processor or CLIPProcessor.from_pretrained(model_name)
    if len(images) != len(prompts):
        raise ValueError(f"clip_t: {len(images)} images vs {len(prompts)} prompts")
    with torch.no_grad():
        inp = processor(text=list(prompts), images=list(images), return_tensors="pt", padding=True)
        i = torch.nn.functional.normalize(model.get_image_features(pixel_values=inp["pixel_values"]), dim=-1)
        t = torch.nn.functional.normalize(model.get_text_features(input_ids=inp["input_ids"],
                                                                  attention_mask=inp["attention_mask"]), dim=-1)
    return (i * t).sum(-1).numpy()


def _check_group_by(group_by: str | None, gen: pd.DataFrame, gal: pd.DataFrame) -> None:
    """``group_by`` must be None or a column of both the generated and the gallery tables."""
    if group_by is None:
        return
    for label, df in (("generated", gen), ("gallery", gal)):
        if group_by not in df.columns:
            shared = [c for c in gal.columns if c in set(gen.columns) and c not in ("file_path", "ref_path")]
            raise FPRLayoutError(f"group_by={group_by!r} is not a column of the {label} table; use None "
                                 f"(one gallery for all queries) or one of {shared}")
