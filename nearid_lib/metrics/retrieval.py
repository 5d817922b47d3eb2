"""Retrieval mAP: the Finer-Personalization Rank protocol and the ID-Sim retrieval benchmarks."""
from __future__ import annotations

import numpy as np

from ._arrays import _l2_normalise, _to_np

__all__ = ["average_precision", "retrieval_map"]


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
