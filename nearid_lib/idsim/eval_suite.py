"""ID-Sim benchmarks (paper 001, Sec. 4.2, App. D/E.2) and their mini-world analogues.

Every benchmark kind of ID-Sim Figure 25 is built from the NearID-schema world (test split only):

=====================  ===========================================  =============================
paper (metric_id)      mini analogue                                metric
=====================  ===========================================  =============================
PODS (pods_ap,         instance retrieval on the FPR galleries:     mAP (metrics.retrieval_map),
pods_auc, pods_ndcg)   references query the gallery (``fpr/``)      ROC-AUC over all pairs, nDCG
PetFace (petface_ap,   verification pairs from test identities:     AP, ROC-AUC
petface_auc)           (view1, view2) same; (view1, near-ID
                       distractor of view2), (view1, other identity
                       of the same class) different
CUTE (cute_easy_acc,   triplets (anchor, positive, negative), the   triplet accuracy
cute_hard_acc)         negative a different instance (a near-ID
                       distractor) shot in the positive's scene.
                       Easy: all three in one scene (anchor = a
                       view re-framed in view 1's scene, positive =
                       view 1, negative = the distractor in view
                       1). Hard: the anchor from another scene
                       whenever the identity has one (paper 001,
                       App. D: "CUTE (Triplet Matching)")
Subjects2k             graded set: edit-grid pairs (anchor, grid    AP at c > 0.8, ROC-AUC
(subjects2k_ap, _auc)  image) with c = 1 - identity_change, on
                       anchors of their own (``graded.csv``, never
                       the Fig. 6 sensitivity anchors of grids.csv)
DreamBench++           the same pairs, graded rating                Spearman, Kendall tau-b
(dreambench_*)         1 - identity_change
DeepFashion2,          no mini analogue (no rows)
AerialCattle
=====================  ===========================================  =============================

Released-benchmark loaders (:func:`load_pairs_csv`, :func:`load_triplets_csv`,
:func:`load_retrieval_csv`, :func:`load_ratings_csv`) read *our* documented CSV layouts, one per
benchmark kind (paths relative to the CSV's folder); converting a released dataset (PetFace pairs,
CUTE triplets, PODS query/gallery splits, Subjects2k votes, DreamBench++ ratings) into them is a
few lines of pandas and is done by the paper-profile data code:

* pairs:     ``img1, img2, label`` (0/1) or ``img1, img2, c`` (continuous vote share, Subjects2k)
* triplets:  ``anchor, positive, negative`` (+ optional ``mode`` easy|hard)
* retrieval: ``path, label, role`` (role = query | gallery)
* ratings:   ``reference, image, rating``
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from .. import metrics as M
from ..data.draws import scene_of
from ..features import FeatureStore, embed, memory_refs
from ..models import resolve_name
from ..runtime.seeding import make_rng
from .eval_files import BenchmarkError, load_pairs_csv, load_ratings_csv, load_retrieval_csv, load_triplets_csv
from .sampling import load_key

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["BENCH_INFO", "METRIC_LABELS", "encoder_labels", "mini_benchmark_sets", "bench_keys", "evaluate_sets", "embed_encoders",
           "PATCH_ROWS", "patch_table", "graded_pairs",
           "load_pairs_csv", "load_triplets_csv", "load_retrieval_csv", "load_ratings_csv",
           "benchmark_table", "seed_mean", "graded_metrics", "BenchmarkError"]


# metric_id -> (paper benchmark, paper metric, mini analogue)
BENCH_INFO = {
    "pods_ap": ("PODS", "AP", "FPR-gallery instance retrieval (mAP)"),
    "pods_auc": ("PODS", "AUC", "FPR-gallery query-gallery pairs (ROC-AUC)"),
    "pods_ndcg": ("PODS", "nDCG", "FPR-gallery retrieval (nDCG, binary relevance)"),
    "petface_ap": ("PetFace", "AP", "test-identity verification pairs incl. near-ID distractors (AP)"),
    "petface_auc": ("PetFace", "AUC", "test-identity verification pairs incl. near-ID distractors (ROC-AUC)"),
    "cute_easy_acc": ("CUTE", "Easy Acc", "triplets in one scene, near-ID distractor negative"),
    "cute_hard_acc": ("CUTE", "Hard Acc", "triplets, near-ID distractor in the positive's scene, anchor elsewhere"),
    "subjects2k_ap": ("Subjects2k", "AP", "graded edit-grid pairs, c = 1 - identity_change > 0.8 (AP)"),
    "subjects2k_auc": ("Subjects2k", "AUC", "graded edit-grid pairs, c = 1 - identity_change > 0.8 (ROC-AUC)"),
    "dreambench_spearman": ("DreamBench++", "Spearman", "graded edit-grid pairs, rating 1 - identity_change"),
    "dreambench_kendall": ("DreamBench++", "Kendall", "graded edit-grid pairs, rating 1 - identity_change"),
}

# the name a reader knows for each metric id (figures)
METRIC_LABELS = {k: f"{bench} {metric}" for k, (bench, metric, _) in BENCH_INFO.items()}


def encoder_labels(cfg: Profile) -> dict[str, tuple[str, str]]:
    """encoder -> (paper model key, ours_label) for the side-by-side tables: our frozen backbone
    stands in for ID-Sim's frozen DINOv3 row; the NearID head and the reference rows of
    :mod:`nearid_lib.idsim.baselines` (colour histogram, random init) have no ID-Sim counterpart."""
    bb = cfg.idsim.backbone
    pooled = "GAP" if resolve_name(bb) == "efficientnet-lite0" else "CLS"
    tiny = " tiny random-init" if cfg.idsim.tiny else ""
    return {"frozen": ("DINOv3", f"{bb}{tiny} {pooled} (frozen)"),
            "idsim": ("ID-Sim", f"ID-Sim ({bb}{tiny} + LoRA r{cfg.idsim.lora_rank}, {cfg.name})"),
            "nearid": ("NearID head", f"NearID MAP head on {cfg.backbone.name} ({cfg.name})"),
            "colour_hist": ("Colour histogram", "RGB 8x8x8 histogram, Bhattacharyya (pixel baseline)"),
            "random": ("Random init", f"{bb}{tiny} {pooled}, random init (chance reference)")}


# ----------------------------------------------------------------------------- mini sets
# CUTE hard: (anchor, positive) views by preference; the first pair in two scenes wins ("whenever possible")
_HARD_ORDER = ((1, 2), (1, 3), (2, 3), (3, 2), (2, 1), (3, 1))


def mini_benchmark_sets(data: NearIDData, cfg: Profile, split: str = "test", seed: int = 0,
                        sources: Sequence[str] | None = None) -> dict[str, pd.DataFrame]:
    """The mini benchmark definitions (image keys = dataset-relative paths):

    ``retrieval`` (path, label, role), ``pairs`` (img1, img2, label, kind), ``triplets`` (anchor,
    positive, negative, mode), ``graded`` (img1=grid anchor, img2, c, rating, grid, anchor_id, from
    ``data.graded``). ``cfg`` is the profile the world was built with: it says which views share a
    scene (:func:`~nearid_lib.data.draws.scene_of`). Sets whose source table is missing are empty.
    Distractor ``sources`` default to all of the dataset's."""
    rng = make_rng(seed, "idsim-bench", split)
    out: dict[str, pd.DataFrame] = {}
    if data.fpr_train is not None and data.fpr_gallery is not None:
        q = pd.DataFrame({"path": data.fpr_train.file_path, "label": data.fpr_train.name, "role": "query"})
        g = pd.DataFrame({"path": data.fpr_gallery.file_path, "label": data.fpr_gallery.name,
                          "role": "gallery"})
        out["retrieval"] = pd.concat([q, g], ignore_index=True)
    else:
        out["retrieval"] = pd.DataFrame(columns=["path", "label", "role"])
    srcs = list(sources or data.sources)
    cls = dict(zip(data.identities.id, data.identities.class_name))
    reshoot = (dict(zip(data.identities.id, data.identities["reshoot"].fillna("").astype(str)))
               if "reshoot" in data.identities else {})
    pos = data.positives[data.positives.split == split]
    pairs, trips = [], []
    ids = pos.id.tolist()
    for i, r in pos.iterrows():
        others_same = [j for j in ids if j != r.id and cls[j] == cls[r.id]]
        src = srcs[int(rng.integers(len(srcs)))] if srcs else None
        dist = data.distractors[src].loc[i] if src else None
        pairs.append({"img1": r.img1, "img2": r.img2, "label": 1, "kind": "same"})
        if src and dist["nimg2"]:
            pairs.append({"img1": r.img1, "img2": dist["nimg2"], "label": 0, "kind": f"distractor:{src}"})
        if others_same:
            o = others_same[int(rng.integers(len(others_same)))]
            pairs.append({"img1": r.img1, "img2": pos.loc[pos.id == o, "img2"].iloc[0], "label": 0,
                          "kind": "same_class"})
        if not src:
            continue
        views = [k for k in (1, 2, 3) if r[f"img{k}"] and dist[f"nimg{k}"]]
        scene = {k: scene_of(cfg, r.id, k) for k in views}
        in_first = [k for k in views if k > 1 and scene[k] == 1]
        shot = reshoot.get(r.id, "")
        if 1 in views and (shot or in_first):
            # the anchor: the identity's re-shoot in view 1's scene (world.scene_reshoots), else a
            # positive view shot there (world.shared_scene_p)
            trips.append({"anchor": shot or r[f"img{in_first[0]}"], "positive": r.img1, "negative": dist["nimg1"],
                          "mode": "easy"})
        cand = [(a, p) for a, p in _HARD_ORDER if a in scene and p in scene]
        if cand:
            a, p = next(((a, p) for a, p in cand if scene[a] != scene[p]), cand[0])
            trips.append({"anchor": r[f"img{a}"], "positive": r[f"img{p}"], "negative": dist[f"nimg{p}"],
                          "mode": "hard"})
    out["pairs"] = pd.DataFrame(pairs, columns=["img1", "img2", "label", "kind"])
    out["triplets"] = pd.DataFrame(trips, columns=["anchor", "positive", "negative", "mode"])
    out["graded"] = graded_pairs(data.graded)
    return out


def graded_pairs(grids: pd.DataFrame | None) -> pd.DataFrame:
    """Every (anchor, grid image) pair of edit grids (``grids.csv`` layout) with its graded label
    ``c = rating = 1 - identity_change``: the Subjects2k / DreamBench++ analogue."""
    gr = []
    for (aid, grid), g in (grids.groupby(["anchor_id", "grid"], sort=True) if grids is not None else ()):
        a = g[(g.identity_level == 0) & (g.factor_level == 0)]
        if a.empty:
            raise BenchmarkError(f"grids: anchor {aid!r} grid {grid!r} has no (0, 0) image")
        apath = a.path.iloc[0]
        for _, r in g.iterrows():
            if r.path == apath:
                continue
            c = 1.0 - float(r.identity_change)
            gr.append({"img1": apath, "img2": r.path, "c": c, "rating": c, "grid": grid, "anchor_id": aid})
    return pd.DataFrame(gr, columns=["img1", "img2", "c", "rating", "grid", "anchor_id"])


def bench_keys(sets: Mapping[str, pd.DataFrame]) -> list[str]:
    """Every image key the benchmark sets use (ordered, unique)."""
    cols = {"retrieval": ["path"], "pairs": ["img1", "img2"], "triplets": ["anchor", "positive", "negative"],
            "graded": ["img1", "img2"]}
    keys: list[str] = []
    for name, df in sets.items():
        for c in cols.get(name, []):
            if c in df.columns:
                keys.extend(df[c].tolist())
    return list(dict.fromkeys(keys))


def pair_cosine(emb: Mapping[str, np.ndarray], a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    A = np.stack([emb[k] for k in a]).astype(np.float64)
    B = np.stack([emb[k] for k in b]).astype(np.float64)
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    B /= np.linalg.norm(B, axis=1, keepdims=True)
    return (A * B).sum(axis=1)


def evaluate_sets(sets: Mapping[str, pd.DataFrame], emb: Mapping[str, np.ndarray]) -> dict[str, float]:
    """All metrics of :data:`BENCH_INFO` that the given sets support, for one encoder's
    embeddings ``emb`` (key -> vector; cosine similarity)."""
    res: dict[str, float] = {}
    r = sets.get("retrieval")
    if r is not None and len(r):
        q, g = r[r.role == "query"], r[r.role == "gallery"]
        Q = np.stack([emb[k] for k in q.path])
        G = np.stack([emb[k] for k in g.path])
        res["pods_ap"] = M.retrieval_map(Q, q.label.to_numpy(), G, g.label.to_numpy(), ties="expected")
        S = M.cosine_similarity_matrix(Q, G)                                   # [Q, G]
        rel = (q.label.to_numpy()[:, None] == g.label.to_numpy()[None, :]).astype(float)
        res["pods_auc"] = M.verification_auc(S.ravel(), rel.ravel())
        res["pods_ndcg"] = M.ndcg(rel, S)
    p = sets.get("pairs")
    if p is not None and len(p) and p.label.nunique() == 2:
        s = pair_cosine(emb, p.img1, p.img2)
        res["petface_ap"] = M.verification_ap(s, p.label.to_numpy())
        res["petface_auc"] = M.verification_auc(s, p.label.to_numpy())
    t = sets.get("triplets")
    if t is not None and len(t):
        for mode in ("easy", "hard"):
            tm = t[t["mode"] == mode] if "mode" in t.columns else (t if mode == "hard" else t.iloc[:0])
            if len(tm):
                res[f"cute_{mode}_acc"] = M.triplet_accuracy(pair_cosine(emb, tm.anchor, tm.positive),
                                                              pair_cosine(emb, tm.anchor, tm.negative))
    gr = sets.get("graded")
    if gr is not None and len(gr):
        res.update(graded_metrics(pair_cosine(emb, gr.img1, gr.img2), gr))
    return res


def graded_metrics(scores, graded: pd.DataFrame) -> dict[str, float]:
    """The Subjects2k and DreamBench++ analogue metrics of pair ``scores`` on the graded pairs
    (columns ``c``, ``rating``): AP and ROC-AUC at c > 0.8 (when both classes occur) and Spearman /
    Kendall with the rating (NaN under 3 pairs). Embeddings and judges share it."""
    s = np.asarray(scores, dtype=float)
    res: dict[str, float] = {}
    c = graded.c.to_numpy(dtype=float) if "c" in graded.columns else np.zeros(0)
    y = (c > 0.8).astype(int)
    if len(c) and 0 < y.sum() < len(y):
        res["subjects2k_ap"] = M.subjects2k_ap(s, c)
        res["subjects2k_auc"] = M.verification_auc(s, y)
    if len(s) >= 3:
        rc = M.rank_correlations(s, graded.rating.to_numpy(dtype=float))
        res["dreambench_spearman"], res["dreambench_kendall"] = rc["spearman"], rc["kendall"]
    else:
        res["dreambench_spearman"] = res["dreambench_kendall"] = float("nan")
    return res


def seed_mean(per_seed: Mapping[int, Mapping[str, float]]) -> tuple[dict[str, float], dict[str, float]]:
    """``(mean, sd)`` over training seeds of :func:`evaluate_sets` results ({seed: {metric_id:
    value}}): per metric, the mean and the sample standard deviation (NaN for one seed)."""
    mids = list(dict.fromkeys(m for r in per_seed.values() for m in r))
    vals = {m: np.array([float(r.get(m, np.nan)) for r in per_seed.values()]) for m in mids}
    return ({m: float(np.mean(v)) for m, v in vals.items()},
            {m: float(np.std(v, ddof=1)) if len(v) > 1 else float("nan") for m, v in vals.items()})


def benchmark_table(results: Mapping[str, Mapping[str, float]], labels: Mapping[str, tuple[str, str]],
                    profile: str, seeds: Mapping[str, tuple[int, Mapping[str, float]]] | None = None) -> pd.DataFrame:
    """Long table beside ``paper_values/idsim_fig25_full_results`` (keys model, metric_id).

    ``results``: encoder -> {metric_id: value}; ``labels``: encoder -> (paper model key,
    ours_label), e.g. ``{"frozen": ("DINOv3", "EfficientNet-Lite0 GAP (frozen)")}``; ``seeds``:
    encoder -> (number of training seeds, {metric_id: sd over them}) for a value that is a mean
    over seeds (:func:`seed_mean`); other encoders have one run (``n_seeds`` 1, ``std`` NaN). ``std``
    is the sd over the training seeds, the quantity of the paper's "std" column (over its 10 seeds)."""
    rows = []
    for enc, res in results.items():
        model, ours_label = labels[enc]
        n, sd = (seeds or {}).get(enc, (1, {}))
        for mid, v in res.items():
            bench, metric, mini = BENCH_INFO[mid]
            rows.append({"model": model, "metric_id": mid, "benchmark": bench, "metric": metric,
                         "value": float(v), "std": float(sd.get(mid, np.nan)), "n_seeds": int(n),
                         "ours_label": ours_label, "mini_benchmark": mini, "profile": profile})
    return pd.DataFrame(rows)


# Table 2b rows: paper dataset -> (paper metric, our mini metric id)
PATCH_ROWS = {"CUTE": ("Acc", "cute_hard_acc"), "DB++": ("Spearman", "dreambench_spearman"),
              "PetFace": ("mAP", "petface_ap"), "PODS": ("mAP", "pods_ap"), "S2k": ("AP", "subjects2k_ap")}


def patch_table(results: Mapping[str, Mapping[str, float]], profile: str) -> pd.DataFrame:
    """ID-Sim Table 2b (similarity of aggregated *patch* embeddings) beside the paper's: one row per
    benchmark of :data:`PATCH_ROWS`, one column per key of ``results`` (``dinov3``: the frozen
    backbone's tokens, ``ours_no_patch``: ID-Sim trained without the patch loss, ``ours``), each
    ``{metric_id: value}`` of :func:`evaluate_sets`; a metric an encoder lacks stays NaN."""
    rows = []
    for ds, (metric, mid) in PATCH_ROWS.items():
        row = {"dataset": ds, "metric": metric, "metric_id": mid, "mini_benchmark": BENCH_INFO[mid][2]}
        row.update({col: float(res.get(mid, np.nan)) for col, res in results.items()})
        rows.append({**row, "profile": profile})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- embeddings
@torch.no_grad()
def embed_encoders(model, store, keys: Sequence[str], nearid=None, batch_size: int = 64,
                   heads: Mapping[str, Any] | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Embeddings of ``keys`` for the frozen backbone, ID-Sim and (optionally) the NearID head,
    sharing one pass of the frozen prefix (``store``: a :class:`~nearid_lib.idsim.prefix.PrefixStore` of ``model``):

    * ``"frozen"``: the backbone's global embedding with the LoRA adapters disabled (for
      EfficientNet-Lite0 the frozen GAP baseline, identical to ``load_encoder(...).embed``);
    * ``"idsim"``: ID-Sim's projected CLS;
    * ``"nearid"``: ``nearid.pool(frozen tokens)`` when a :class:`NearIDEncoder` over the same
      backbone is given;
    * one entry per item of ``heads`` ({name: NearIDEncoder}, e.g. every training seed of a head),
      pooled from the same frozen tokens, so more heads add no backbone pass.

    A head over another backbone, or over a tiny random-init one, embeds on its own.
    Returns {encoder: {key: L2-normalised float32 vector}}."""
    named = {**({"nearid": nearid} if nearid is not None else {}), **dict(heads or {})}
    # Sharing the prefix needs the *same* frozen weights: a tiny random-init backbone has the same
    # cache key as any other tiny one but different weights, so the head then embeds on its own.
    pooled = {n: h for n, h in named.items()
              if h.cache_key() == model.backbone.cache_key() and not model.backbone.tiny}
    res: dict[str, dict[str, np.ndarray]] = {}
    alone = [n for n in named if n not in pooled]
    if alone:
        imgs = [load_key(store.data, k, store.seed) for k in keys]
        for n in alone:
            res[n] = dict(zip(keys, embed(named[n], memory_refs(imgs, keys), "full", FeatureStore(),
                                          batch_size=batch_size, progress=False)))
    model.eval()
    store.ensure(keys, [0])
    out: dict[str, list[torch.Tensor]] = {"frozen": [], "idsim": [], **{n: [] for n in pooled}}
    for i in range(0, len(keys), batch_size):
        f = store.get(keys[i:i + batch_size])
        with model.adapters_disabled():
            cls, tok = model.raw_from_prefix(f)
        out["frozen"].append(F.normalize(cls.float(), dim=-1))
        for n, h in pooled.items():
            out[n].append(F.normalize(h.pool(tok).float(), dim=-1))
        out["idsim"].append(F.normalize(model.from_prefix(f).pooled.float(), dim=-1))
    computed = {name: dict(zip(keys, torch.cat(v).cpu().numpy())) for name, v in out.items()}
    return {**{k: computed[k] for k in ("frozen", "idsim")},
            **{n: computed[n] if n in computed else res[n] for n in named}}
