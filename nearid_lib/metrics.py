"""Evaluation metrics of the three papers: retrieval mAP (FPR, ID-Sim), SSR/PA (NearID),
Fisher-z aggregation of correlations, MTG metric-to-oracle / SSR / PA, DreamBench++ metric-to-human,
and the ID-Sim benchmark metrics (verification AP / ROC-AUC, nDCG, rank correlations, triplet accuracy).

Conventions (shared by every function here):
- Inputs may be numpy arrays, torch tensors or lists; everything is computed in float64 numpy.
- Similarities are cosine similarities; embeddings are L2-normalised here, so callers may pass raw ones.
- Missing data is NaN (never a zero pad): a padded zero image would otherwise look like a real view.
- Bad input raises ``ValueError`` naming the offending index / field; nothing is silently dropped.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

__all__ = [
    "retrieval_map",
    "average_precision",
    "cosine_similarity_matrix",
    "ssr_pa",
    "nearid_similarities",
    "pool_sources",
    "source_breakdown",
    "fisher_z_mean",
    "pearson",
    "mtg_metrics",
    "mtg_ssr_pa",
    "metric_to_human",
    "verification_ap",
    "verification_auc",
    "ndcg",
    "rank_correlations",
    "triplet_accuracy",
    "subjects2k_ap",
]


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------

def _to_np(x, name: str, dtype=np.float64) -> np.ndarray:
    """numpy float64 view of arrays / tensors / lists (torch is optional, never imported here)."""
    if hasattr(x, "detach"):  # torch tensor without importing torch
        x = x.detach().cpu().numpy()
    try:
        return np.asarray(x, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: cannot convert to a {np.dtype(dtype).name} array ({e})") from None


def _l2_normalise(x: np.ndarray, name: str) -> np.ndarray:
    if not np.all(np.isfinite(x)):
        bad = np.argwhere(~np.isfinite(x).all(axis=-1)).ravel()[:5]
        raise ValueError(f"{name}: non-finite values in rows {bad.tolist()}")
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    if np.any(n == 0):
        bad = np.argwhere(n.ravel() == 0).ravel()[:5]
        raise ValueError(f"{name}: zero-norm embedding in rows {bad.tolist()} (cosine undefined)")
    return x / n


def cosine_similarity_matrix(a, b) -> np.ndarray:
    """Cosine similarity [A,B] between rows of ``a`` [A,D] and ``b`` [B,D] (float64)."""
    a = _l2_normalise(_to_np(a, "a"), "a")
    b = _l2_normalise(_to_np(b, "b"), "b")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"cosine_similarity_matrix: need [A,D] and [B,D], got {a.shape} and {b.shape}")
    return a @ b.T


# ----------------------------------------------------------------------------------------------
# retrieval mAP (FPR protocol; ID-Sim retrieval benchmarks)
# ----------------------------------------------------------------------------------------------

def average_precision(scores, relevant) -> float:
    """Non-interpolated average precision of one ranking.

    AP = (1/R) * sum over relevant items at rank k of precision@k, where R = number of relevant
    items and the ranking is by descending ``scores``; ties are broken by item index (stable sort),
    the same convention as :func:`retrieval_map`. Raises if there is no relevant item.
    """
    s = _to_np(scores, "scores").ravel()
    rel = np.asarray(relevant, dtype=bool).ravel()
    if s.shape != rel.shape:
        raise ValueError(f"average_precision: scores {s.shape} and relevant {rel.shape} differ")
    if not rel.any():
        raise ValueError("average_precision: no relevant item, AP undefined")
    order = np.argsort(-s, kind="stable")
    r = rel[order]
    hits = np.cumsum(r)
    prec = hits / np.arange(1, len(r) + 1)
    return float(prec[r].sum() / r.sum())


def retrieval_map(query_emb, query_labels, gallery_emb, gallery_labels,
                  return_per_query: bool = False, chunk_size: int = 1024):
    """Mean average precision of gallery retrieval (Finer-Personalization Rank protocol).

    Each query ranks the *whole* gallery by cosine similarity; its AP is the non-interpolated
    average precision of that ranking, with the gallery images that share the query's label as the
    relevant set: AP = (1/R) * sum_{k: g_k relevant} (#relevant in top k) / k. mAP is the plain
    mean over queries (every query weighs the same).

    Ties: the ranking is a *stable* sort by descending similarity, so equal similarities keep
    ascending gallery index order. That makes the result deterministic and independent of the
    platform; it is neither optimistic nor pessimistic by design (exact ties are rare with float
    embeddings; identical duplicate images are the case where it matters).

    Args:
        query_emb: [Q, D] query embeddings (generated images); normalised here.
        query_labels: [Q] identity labels (any hashable dtype numpy can compare: str or int).
        gallery_emb: [G, D] gallery embeddings.
        gallery_labels: [G] identity labels.
        return_per_query: also return the [Q] array of per-query APs.
        chunk_size: queries per block, bounds memory to chunk_size x G.

    Returns:
        ``map`` (float), or ``(map, per_query_ap)`` when ``return_per_query``.

    Raises:
        ValueError if a query's label has no image in the gallery (an error, not a silent 0),
        if shapes disagree, or if an embedding is non-finite or zero.
    """
    q = _l2_normalise(_to_np(query_emb, "query_emb"), "query_emb")
    g = _l2_normalise(_to_np(gallery_emb, "gallery_emb"), "gallery_emb")
    ql = np.asarray(query_labels)
    gl = np.asarray(gallery_labels)
    if q.ndim != 2 or g.ndim != 2 or q.shape[1] != g.shape[1]:
        raise ValueError(f"retrieval_map: need [Q,D] and [G,D] embeddings, got {q.shape} and {g.shape}")
    if ql.shape != (q.shape[0],) or gl.shape != (g.shape[0],):
        raise ValueError(f"retrieval_map: labels {ql.shape}/{gl.shape} do not match embeddings "
                         f"{q.shape[0]}/{g.shape[0]}")
    if q.shape[0] == 0 or g.shape[0] == 0:
        raise ValueError("retrieval_map: empty query set or gallery")
    gallery_set = set(gl.tolist())
    for i, lab in enumerate(ql.tolist()):
        if lab not in gallery_set:
            raise ValueError(f"retrieval_map: query {i} has label {lab!r} with no image in the gallery")

    G = g.shape[0]
    ranks = np.arange(1, G + 1, dtype=np.float64)
    aps = np.empty(q.shape[0], dtype=np.float64)
    for start in range(0, q.shape[0], chunk_size):
        sl = slice(start, start + chunk_size)
        sims = q[sl] @ g.T                                   # [c, G]
        order = np.argsort(-sims, axis=1, kind="stable")     # [c, G] stable => ties by gallery index
        rel = gl[order] == ql[sl, None]                      # [c, G] relevant flag in rank order
        prec = np.cumsum(rel, axis=1) / ranks                # [c, G] precision@k
        aps[sl] = (prec * rel).sum(axis=1) / rel.sum(axis=1)
    m = float(aps.mean())
    return (m, aps) if return_per_query else m


# ----------------------------------------------------------------------------------------------
# NearID SSR / PA (Section 3.4, Eq. 4-5)
# ----------------------------------------------------------------------------------------------

def _ssr_pa_from_margins(margins: np.ndarray, per_identity: bool) -> dict:
    """SSR/PA from a [N, K] margin table with NaN where a trial does not exist.

    A trial wins iff margin > 0 (a tie is a loss: the identity must *beat* the confounder).
    SSR = mean over rows with >= 1 trial of [all trials win]; PA = total wins / total trials.
    """
    valid = np.isfinite(margins)                          # [N, K]
    wins_t = valid & (np.where(valid, margins, 0.0) > 0)  # NaN > 0 is False anyway; be explicit
    trials = valid.sum(axis=1)                            # [N]
    wins = wins_t.sum(axis=1)                             # [N]
    has = trials > 0
    success = has & (wins == trials)
    n_id, n_tr = int(has.sum()), int(trials.sum())
    out = {
        "ssr": float(success[has].mean()) if n_id else float("nan"),
        "pa": float(wins.sum() / n_tr) if n_tr else float("nan"),
        "n_identities": n_id,
        "n_trials": n_tr,
        "n_wins": int(wins.sum()),
        "n_success": int(success.sum()),
    }
    if per_identity:
        out["wins"] = wins
        out["trials"] = trials
        # float so identities without any trial can be NaN, not a fake failure
        out["success"] = np.where(has, success.astype(np.float64), np.nan)
    return out


def ssr_pa(pos_sim, dist_sim, per_identity: bool = False) -> dict:
    """Sample Success Rate and Pairwise Accuracy of NearID-bench (NearID Eq. 4-5), counted exactly.

    Args:
        pos_sim: [N, P, P] similarity among identity n's positive views; ``pos_sim[n, i, j]`` =
            s(p_i, p_j). Only the strict upper triangle (i < j) is read; NaN there means the pair
            does not exist (a view is missing). The diagonal and lower triangle are ignored.
        dist_sim: [N, P]; ``dist_sim[n, i]`` = s(p_i, n_i), n_i the near-identity distractor
            inpainted into p_i's background and mask. NaN where that distractor is missing.
        per_identity: also return per-identity ``wins``, ``trials`` [N] (int) and ``success`` [N]
            (1.0/0.0, NaN for identities without any trial), e.g. for a bootstrap over identities.

    For every existing pair i < j the directed margins are
    d_{i->j} = s(p_i,p_j) - s(p_i,n_i) (if n_i exists) and d_{j->i} = s(p_i,p_j) - s(p_j,n_j)
    (if n_j exists): up to 2*C(P,2) trials per identity (6 for P = 3). A trial wins iff its margin
    is > 0. SSR = share of identities *with at least one trial* whose every trial wins; PA = wins /
    trials over all identities (micro-pooled). Unlike the authors' table code, no extra trial per
    row is counted.

    Returns:
        dict with ``ssr``, ``pa`` (NaN when nothing can be scored), ``n_identities`` (with >= 1
        trial), ``n_trials``, ``n_wins``, ``n_success`` (+ per-identity arrays).
    """
    ps = _to_np(pos_sim, "pos_sim")
    ds = _to_np(dist_sim, "dist_sim")
    if ps.ndim != 3 or ps.shape[1] != ps.shape[2]:
        raise ValueError(f"ssr_pa: pos_sim must be [N,P,P], got {ps.shape}")
    if ds.shape != ps.shape[:2]:
        raise ValueError(f"ssr_pa: dist_sim must be [N,P] = {ps.shape[:2]}, got {ds.shape}")
    if np.isinf(ps).any() or np.isinf(ds).any():
        raise ValueError("ssr_pa: infinite similarity (use NaN for missing entries)")
    iu, ju = np.triu_indices(ps.shape[1], k=1)            # the C(P,2) pairs i < j
    pair = ps[:, iu, ju]                                  # [N, C] s(p_i, p_j)
    # [N, 2C]: first all i->j margins, then all j->i margins; NaN propagates to missing trials
    margins = np.concatenate([pair - ds[:, iu], pair - ds[:, ju]], axis=1)
    return _ssr_pa_from_margins(margins, per_identity)


def nearid_similarities(pos_emb, dist_emb, pos_mask=None, dist_mask=None):
    """Cosine ``pos_sim`` [N,P,P] and ``dist_sim`` [N,P] for :func:`ssr_pa` from embeddings.

    Args:
        pos_emb: [N, P, D] embeddings of the positive views (need not be normalised).
        dist_emb: [N, P, D]; ``dist_emb[n, i]`` is the distractor in p_i's background.
        pos_mask, dist_mask: optional [N, P] bool, True = present. Without a mask, a view is
            missing iff its embedding row is all-NaN. A present row must be finite and non-zero.

    Returns:
        ``(pos_sim, dist_sim)`` float64 with NaN wherever an involved image is missing.
    """
    pe = _to_np(pos_emb, "pos_emb")
    de = _to_np(dist_emb, "dist_emb")
    if pe.ndim != 3 or de.shape != pe.shape:
        raise ValueError(f"nearid_similarities: need pos_emb and dist_emb [N,P,D] of equal shape, "
                         f"got {pe.shape} and {de.shape}")

    def present(emb, mask, name):
        if mask is None:
            return ~np.isnan(emb).all(axis=-1)
        m = np.asarray(mask, dtype=bool)
        if m.shape != emb.shape[:2]:
            raise ValueError(f"{name}: mask shape {m.shape} != {emb.shape[:2]}")
        return m

    pm, dm = present(pe, pos_mask, "pos_mask"), present(de, dist_mask, "dist_mask")

    def normalise(emb, m, name):
        out = np.full_like(emb, np.nan)
        x = emb[m]                                         # [M, D] present rows only
        bad = ~np.isfinite(x).all(axis=1) | (np.linalg.norm(np.nan_to_num(x), axis=1) == 0)
        if bad.any():
            n, i = np.argwhere(m)[np.argmax(bad)]
            raise ValueError(f"{name}: identity {n}, view {i} is marked present but its embedding "
                             "is non-finite or zero")
        out[m] = x / np.linalg.norm(x, axis=1, keepdims=True)
        return out

    pn, dn = normalise(pe, pm, "pos_emb"), normalise(de, dm, "dist_emb")
    pos_sim = np.einsum("npd,nqd->npq", pn, pn)          # NaN rows give NaN similarities
    dist_sim = np.einsum("npd,npd->np", pn, dn)
    return pos_sim, dist_sim


def pool_sources(results: Mapping[str, Mapping], sources: Iterable[str] | None = None,
                 pa_weight: str = "trials") -> dict:
    """Support-weighted pooling of per-source :func:`ssr_pa` results (NearID Table 1 / Table 5).

    SSR is weighted by each source's ``n_identities`` and PA by its ``n_trials`` (default), which is
    exactly the micro-pooled SSR/PA over the union of all trials; ``pa_weight="identities"``
    weights PA by ``n_identities`` instead (what a table-of-averages with per-source ``n`` does).
    With equal support per source (the released test split: 500 identities each) both reduce to the
    plain mean the paper's "Avg." rows show. Sources with zero support contribute nothing.

    Args:
        results: {source: dict from ssr_pa}.
        sources: the subset to pool (default: all); an unknown name is an error.
    Returns:
        dict ``ssr``, ``pa``, ``n_identities``, ``n_trials``, ``n_sources``.
    """
    names = list(results) if sources is None else list(sources)
    missing = [s for s in names if s not in results]
    if missing:
        raise ValueError(f"pool_sources: unknown sources {missing}; have {sorted(results)}")
    if not names:
        raise ValueError("pool_sources: no sources to pool")
    if pa_weight not in ("trials", "identities"):
        raise ValueError(f"pool_sources: pa_weight must be 'trials' or 'identities', got {pa_weight!r}")
    ssr_num = pa_num = w_id = w_pa = 0.0
    n_tr = 0
    for s in names:
        r = results[s]
        ni, nt = int(r["n_identities"]), int(r["n_trials"])
        if ni > 0:
            ssr_num += ni * float(r["ssr"])
            w_id += ni
        if nt > 0:
            w = nt if pa_weight == "trials" else ni
            pa_num += w * float(r["pa"])
            w_pa += w
        n_tr += nt
    return {
        "ssr": ssr_num / w_id if w_id else float("nan"),
        "pa": pa_num / w_pa if w_pa else float("nan"),
        "n_identities": int(w_id),
        "n_trials": n_tr,
        "n_sources": len(names),
    }


def source_breakdown(results: Mapping[str, Mapping], groups: Mapping[str, Sequence[str]] | None = None,
                     pa_weight: str = "trials"):
    """Per-source rows plus pooled group rows (NearID Table 5) as a pandas DataFrame.

    ``groups`` maps a row label (e.g. "Avg. (training, 4)", "Avg. (unseen fill, 3)",
    "Avg. (all 7, main)") to the sources it pools; columns: ``row``, ``kind`` (source|group),
    ``ssr``, ``pa``, ``n_identities``, ``n_trials``, ``n_sources``.
    """
    import pandas as pd

    rows = []
    for s, r in results.items():
        rows.append({"row": s, "kind": "source", "ssr": float(r["ssr"]), "pa": float(r["pa"]),
                     "n_identities": int(r["n_identities"]), "n_trials": int(r["n_trials"]),
                     "n_sources": 1})
    for g, members in (groups or {}).items():
        rows.append({"row": g, "kind": "group", **pool_sources(results, members, pa_weight)})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------
# correlations and Fisher-z aggregation (NearID Appendix E.2)
# ----------------------------------------------------------------------------------------------

def fisher_z_mean(rs, clip: float = 0.999, return_sem: bool = False, nan_policy: str = "omit"):
    """Fisher-z mean of correlation coefficients: tanh(mean(arctanh(clip(r, -c, c)))).

    NaN coefficients (e.g. a constant score vector) are omitted (``nan_policy="omit"``) or raise
    (``"raise"``); all-NaN gives NaN. The clip keeps |r| = 1 finite.

    ``return_sem=True`` also returns the paper's "±": the standard error of the raw coefficients,
    std(r, ddof=1) / sqrt(n). This reading reproduces NearID Table 2's Fisher-z row from its seven
    per-method rows (e.g. H-H 0.648 ± 0.038, S-H 0.516 ± 0.079); NaN when fewer than 2 coefficients.
    """
    r = _to_np(rs, "rs").ravel()
    if nan_policy not in ("omit", "raise"):
        raise ValueError(f"fisher_z_mean: nan_policy must be 'omit' or 'raise', got {nan_policy!r}")
    nan = np.isnan(r)
    if nan.any() and nan_policy == "raise":
        raise ValueError(f"fisher_z_mean: NaN coefficients at {np.flatnonzero(nan).tolist()}")
    r = r[~nan]
    if np.any(np.abs(r) > 1 + 1e-9):
        raise ValueError(f"fisher_z_mean: |r| > 1 in {r[np.abs(r) > 1 + 1e-9].tolist()}")
    if r.size == 0:
        mean = float("nan")
    else:
        mean = float(np.tanh(np.mean(np.arctanh(np.clip(r, -clip, clip)))))
    if not return_sem:
        return mean
    sem = float(np.std(r, ddof=1) / np.sqrt(r.size)) if r.size >= 2 else float("nan")
    return mean, sem


def pearson(x, y) -> float:
    """Pearson r over the entries where both ``x`` and ``y`` are finite (pairwise deletion).

    NaN when fewer than 3 such entries or when either side is constant (r undefined)."""
    a, b = _to_np(x, "x").ravel(), _to_np(y, "y").ravel()
    if a.shape != b.shape:
        raise ValueError(f"pearson: x {a.shape} and y {b.shape} differ")
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if a.size < 3:
        return float("nan")
    a, b = a - a.mean(), b - b.mean()
    den = np.sqrt((a * a).sum() * (b * b).sum())
    if den == 0:
        return float("nan")
    return float(np.clip((a * b).sum() / den, -1.0, 1.0))


# ----------------------------------------------------------------------------------------------
# MTG (Mind-the-Glitch) part-level metrics
# ----------------------------------------------------------------------------------------------

def mtg_ssr_pa(s_1_2, s_1_1p, s_2_2p, per_identity: bool = False) -> dict:
    """MTG SSR/PA: per pair, margins s(1,2) - s(1,1p) and s(1,2) - s(2,2p).

    The same identity in two backgrounds (1, 2) must be more similar than each image is to its own
    part-edited version (same background, different identity at the part level). A trial wins iff
    its margin > 0; SSR = share of pairs whose (existing) two trials both win; PA = wins / trials.
    NaN similarities remove the trial.
    """
    a, b, c = (_to_np(v, n).ravel() for v, n in ((s_1_2, "s_1_2"), (s_1_1p, "s_1_1p"), (s_2_2p, "s_2_2p")))
    if not (a.shape == b.shape == c.shape):
        raise ValueError(f"mtg_ssr_pa: shapes differ {a.shape}, {b.shape}, {c.shape}")
    margins = np.stack([a - b, a - c], axis=1)            # [N, 2]
    return _ssr_pa_from_margins(margins, per_identity)


def mtg_metrics(s_1_1p, s_2_2p, s_1_2p, s_2_1p, s_1_2, oracle_1, oracle_2) -> dict:
    """All MTG metrics of NearID Table 1: M-O, M-Opair, SSR, PA.

    Each similarity set is correlated (Pearson, over the MTG pairs) with the oracle of the *edited*
    image it involves (oracle = 1 - |part| / |object|):
    s(1,1p) ~ oracle_1, s(2,1p) ~ oracle_1, s(2,2p) ~ oracle_2, s(1,2p) ~ oracle_2.
    M-O is the Fisher-z mean of those four r; M-Opair the Fisher-z mean of the two same-background
    ones (s(1,1p), s(2,2p)). SSR/PA come from :func:`mtg_ssr_pa`.

    Returns:
        dict ``m_o``, ``m_opair``, ``r_1_1p``, ``r_2_2p``, ``r_1_2p``, ``r_2_1p``, ``ssr``, ``pa``,
        ``n_pairs`` (pairs with >= 1 trial), ``n_trials``.
    """
    o1, o2 = _to_np(oracle_1, "oracle_1").ravel(), _to_np(oracle_2, "oracle_2").ravel()
    bad = np.isfinite(o1) & ((o1 < 0) | (o1 > 1)) | np.isfinite(o2) & ((o2 < 0) | (o2 > 1))
    if bad.any():
        raise ValueError(f"mtg_metrics: oracle outside [0, 1] at rows {np.flatnonzero(bad)[:5].tolist()}")
    r = {
        "r_1_1p": pearson(s_1_1p, o1),
        "r_2_2p": pearson(s_2_2p, o2),
        "r_1_2p": pearson(s_1_2p, o2),
        "r_2_1p": pearson(s_2_1p, o1),
    }
    sp = mtg_ssr_pa(s_1_2, s_1_1p, s_2_2p)
    return {
        "m_o": fisher_z_mean(list(r.values())),
        "m_opair": fisher_z_mean([r["r_1_1p"], r["r_2_2p"]]),
        **r,
        "ssr": sp["ssr"],
        "pa": sp["pa"],
        "n_pairs": sp["n_identities"],
        "n_trials": sp["n_trials"],
    }


# ----------------------------------------------------------------------------------------------
# DreamBench++ metric-to-human alignment (NearID Table 2, Figure 4)
# ----------------------------------------------------------------------------------------------

def metric_to_human(metric, human, method, category=None) -> dict:
    """M-H: Pearson r between metric and human scores within each method, Fisher-z across methods.

    Args:
        metric, human: [M] scores per rated image (NaN rows are dropped pairwise by :func:`pearson`).
        method: [M] personalization method of each row (the paper's Table 2 rows).
        category: optional [M] DB++ category (animal, human, object, style) for Figure 4.

    Returns:
        dict with ``m_h`` and ``m_h_sem`` (Fisher-z mean and the paper's ± over methods),
        ``per_method`` (DataFrame: method, r, n) and, with ``category``, ``per_category``
        (DataFrame: category, r = Fisher-z over the per-method r within that category, sem,
        r_pooled = one Pearson over all rows of the category, n).
    """
    import pandas as pd

    df = pd.DataFrame({"metric": _to_np(metric, "metric").ravel(),
                       "human": _to_np(human, "human").ravel(),
                       "method": np.asarray(method).ravel()})
    if category is not None:
        cat = np.asarray(category).ravel()
        if cat.shape[0] != len(df):
            raise ValueError(f"metric_to_human: category has {cat.shape[0]} rows, scores {len(df)}")
        df["category"] = cat

    def per_method(d):
        return pd.DataFrame([{"method": m, "r": pearson(g["metric"], g["human"]),
                              "n": int((np.isfinite(g["metric"]) & np.isfinite(g["human"])).sum())}
                             for m, g in d.groupby("method", sort=True)])

    pm = per_method(df)
    m_h, sem = fisher_z_mean(pm["r"], return_sem=True)
    out = {"m_h": m_h, "m_h_sem": sem, "per_method": pm}
    if category is not None:
        rows = []
        for c, g in df.groupby("category", sort=True):
            pmc = per_method(g)
            rc, sc = fisher_z_mean(pmc["r"], return_sem=True)
            rows.append({"category": c, "r": rc, "sem": sc,
                         "r_pooled": pearson(g["metric"], g["human"]), "n": len(g)})
        out["per_category"] = pd.DataFrame(rows)
    return out


# ----------------------------------------------------------------------------------------------
# ID-Sim benchmark metrics
# ----------------------------------------------------------------------------------------------

def _binary_inputs(scores, labels, name):
    s = _to_np(scores, "scores").ravel()
    y = _to_np(labels, "labels").ravel()
    if s.shape != y.shape:
        raise ValueError(f"{name}: scores {s.shape} and labels {y.shape} differ")
    if not np.isfinite(s).all():
        raise ValueError(f"{name}: non-finite scores at {np.flatnonzero(~np.isfinite(s))[:5].tolist()}")
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"{name}: labels must be 0/1")
    if y.min() == y.max():
        raise ValueError(f"{name}: labels contain a single class, metric undefined")
    return s, y.astype(int)


def verification_ap(scores, labels) -> float:
    """Average precision of verification pairs (1 = same identity), scikit-learn's definition
    (tied scores form one threshold, so the result does not depend on row order)."""
    from sklearn.metrics import average_precision_score

    s, y = _binary_inputs(scores, labels, "verification_ap")
    return float(average_precision_score(y, s))


def verification_auc(scores, labels) -> float:
    """ROC-AUC of verification pairs (ties count one half, scikit-learn's definition)."""
    from sklearn.metrics import roc_auc_score

    s, y = _binary_inputs(scores, labels, "verification_auc")
    return float(roc_auc_score(y, s))


def subjects2k_ap(scores, continuous_labels, threshold: float = 0.8, strict: bool = True) -> float:
    """Subjects2k AP: the continuous label c = #same votes / #votes is binarised at 0.8, then AP.

    ID-Sim Appendix D.2 reads "c > 0.8" in our text extraction, so ``strict=True`` uses ``c > 0.8``;
    ``strict=False`` uses ``c >= 0.8`` (the extraction may have lost a >= sign)."""
    c = _to_np(continuous_labels, "continuous_labels").ravel()
    if not np.isfinite(c).all() or (c < 0).any() or (c > 1).any():
        raise ValueError("subjects2k_ap: continuous labels must be finite and in [0, 1]")
    y = (c > threshold) if strict else (c >= threshold)
    return verification_ap(scores, y.astype(int))


def ndcg(relevance, scores, k: int | None = None) -> float:
    """Mean nDCG over queries (rows) with graded ``relevance`` [Q, G] >= 0 and ``scores`` [Q, G]
    (scikit-learn ``ndcg_score``: linear gain, log2 discount, tied scores averaged)."""
    from sklearn.metrics import ndcg_score

    rel = _to_np(relevance, "relevance")
    sc = _to_np(scores, "scores")
    if rel.ndim == 1:
        rel, sc = rel[None], sc[None]
    if rel.shape != sc.shape or rel.ndim != 2:
        raise ValueError(f"ndcg: relevance {rel.shape} and scores {sc.shape} must be equal [Q,G]")
    if not (np.isfinite(rel).all() and np.isfinite(sc).all()) or (rel < 0).any():
        raise ValueError("ndcg: relevance must be finite and >= 0, scores finite")
    return float(ndcg_score(rel, sc, k=k))


def rank_correlations(metric, ratings) -> dict:
    """Spearman rho and Kendall tau-b between metric scores and graded ratings (scipy), over the
    rows where both are finite; returns ``spearman``, ``kendall``, ``n``."""
    from scipy.stats import kendalltau, spearmanr

    a, b = _to_np(metric, "metric").ravel(), _to_np(ratings, "ratings").ravel()
    if a.shape != b.shape:
        raise ValueError(f"rank_correlations: metric {a.shape} and ratings {b.shape} differ")
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        raise ValueError(f"rank_correlations: only {int(ok.sum())} complete rows")
    a, b = a[ok], b[ok]
    return {"spearman": float(spearmanr(a, b).statistic),
            "kendall": float(kendalltau(a, b).statistic),  # tau-b (tie-corrected)
            "n": int(ok.sum())}


def triplet_accuracy(s_ap, s_an) -> float:
    """Share of triplets with s(anchor, positive) > s(anchor, negative) (CUTE protocol).
    A tie counts as a failure (the metric must prefer the positive)."""
    a, b = _to_np(s_ap, "s_ap").ravel(), _to_np(s_an, "s_an").ravel()
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"triplet_accuracy: s_ap {a.shape} and s_an {b.shape} must be equal, non-empty")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("triplet_accuracy: non-finite similarities")
    return float(np.mean(a > b))
