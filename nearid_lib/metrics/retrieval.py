"""Retrieval mAP: the Finer-Personalization Rank protocol and the ID-Sim retrieval benchmarks.

Ties. A ranking by similarity is ambiguous where similarities are equal (duplicate images, a
saturated encoder, quantised scores). Two conventions are offered:

* ``ties="expected"``: the AP *expected over every order of the tied items* (McSherry & Najork,
  ECIR 2008, "Computing information retrieval performance measures efficiently in the presence of
  tied scores"). It does not depend on the gallery's order at all, and equals the plain AP when there
  are no ties. The protocols of this project (FPR, ID-Sim retrieval) use it.
* ``ties="stable"``: a stable sort, so tied items keep ascending gallery index order
  (deterministic, but a permuted gallery can change the AP). Kept as the default of the two generic
  functions for backwards compatibility.

Expected AP of one tie group: the group has ``t`` items of which ``r`` are relevant, preceded by
``n`` items holding ``R`` relevant ones. Every order of the group is equally likely, so the item at
group position ``i`` (1-based) is relevant with probability ``r / t`` and, given that, the number of
relevant items before it within the group is ``(i - 1)(r - 1)/(t - 1)`` in expectation. Precision is
linear in that count, hence the group adds
``sum_i (r / t) * (R + 1 + (i - 1)(r - 1)/(t - 1)) / (n + i)`` to the sum of precisions.
"""
from __future__ import annotations

import numpy as np

from ._arrays import l2_normalise, to_np

__all__ = ["average_precision", "retrieval_map", "expected_average_precision", "random_ranking_ap", "TIES"]

TIES = ("stable", "expected")


def _check_ties(ties: str) -> None:
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, got {ties!r}")


def expected_average_precision(scores, relevant) -> float:
    """AP of one ranking by descending ``scores``, averaged over every order of tied scores
    (see the module docstring). Raises if there is no relevant item."""
    s = to_np(scores, "scores").ravel()
    rel = np.asarray(relevant, dtype=bool).ravel()
    if s.shape != rel.shape:
        raise ValueError(f"expected_average_precision: scores {s.shape} and relevant {rel.shape} differ")
    if not rel.any():
        raise ValueError("expected_average_precision: no relevant item, AP undefined")
    order = np.argsort(-s, kind="stable")
    s, r = s[order], rel[order]
    # tie groups: runs of equal scores in the sorted order
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], len(s)]
    total, n_before, r_before = 0.0, 0, 0
    for a, b in zip(starts, ends):
        t, rg = b - a, int(r[a:b].sum())
        if rg:
            i = np.arange(1, t + 1, dtype=np.float64)
            within = (i - 1) * (rg - 1) / (t - 1) if t > 1 else np.zeros(1)
            total += float(np.sum(rg / t * (r_before + 1 + within) / (n_before + i)))
        n_before += t
        r_before += rg
    return total / r_before


def random_ranking_ap(n_gallery: int, n_relevant: int) -> float:
    """The chance level of retrieval AP: the AP of a uniformly random ranking of ``n_gallery`` items
    of which ``n_relevant`` are relevant, in expectation (= :func:`expected_average_precision` with
    every score tied): ``((r - 1) / (n - 1) * n + (n - r) / (n - 1) * H_n) / n``, ``H_n`` the n-th
    harmonic number (1 when every item is relevant)."""
    n, r = int(n_gallery), int(n_relevant)
    if not 1 <= r <= n:
        raise ValueError(f"random_ranking_ap: need 1 <= relevant ({r}) <= gallery ({n})")
    if r == n:
        return 1.0
    h = float(np.sum(1.0 / np.arange(1, n + 1)))
    return ((r - 1) / (n - 1) * n + (n - r) / (n - 1) * h) / n


def average_precision(scores, relevant, ties: str = "stable") -> float:
    """Non-interpolated average precision of one ranking.

    AP = (1/R) * sum over relevant items at rank k of precision@k, where R = number of relevant
    items and the ranking is by descending ``scores``. ``ties``: ``"stable"`` breaks ties by item
    index (the convention of :func:`retrieval_map`), ``"expected"`` averages over tie orders
    (:func:`expected_average_precision`). Raises if there is no relevant item.
    """
    _check_ties(ties)
    if ties == "expected":
        return expected_average_precision(scores, relevant)
    s = to_np(scores, "scores").ravel()
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
                  return_per_query: bool = False, chunk_size: int = 1024, ties: str = "stable"):
    """Mean average precision of gallery retrieval (Finer-Personalization Rank protocol).

    Each query ranks the *whole* gallery by cosine similarity; its AP is the non-interpolated
    average precision of that ranking, with the gallery images that share the query's label as the
    relevant set: AP = (1/R) * sum_{k: g_k relevant} (#relevant in top k) / k. mAP is the plain
    mean over queries (every query weighs the same).

    Ties (see the module docstring): ``"stable"`` keeps tied gallery images in ascending index
    order; ``"expected"`` gives the AP expected over every order of the tied images, so the result
    does not depend on the gallery's order (used by the FPR and ID-Sim protocols).

    Args:
        query_emb: [Q, D] query embeddings (generated images); normalised here.
        query_labels: [Q] identity labels (any hashable dtype numpy can compare: str or int).
        gallery_emb: [G, D] gallery embeddings.
        gallery_labels: [G] identity labels.
        return_per_query: also return the [Q] array of per-query APs.
        chunk_size: queries per block, bounds memory to chunk_size x G.
        ties: ``"stable"`` or ``"expected"``.

    Returns:
        ``map`` (float), or ``(map, per_query_ap)`` when ``return_per_query``.

    Raises:
        ValueError if a query's label has no image in the gallery (an error, not a silent 0),
        if shapes disagree, or if an embedding is non-finite or zero.
    """
    _check_ties(ties)
    q = l2_normalise(to_np(query_emb, "query_emb"), "query_emb")
    g = l2_normalise(to_np(gallery_emb, "gallery_emb"), "gallery_emb")
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
        if ties == "expected":
            srt = np.take_along_axis(sims, order, axis=1)    # [c, G] descending
            tied = (srt[:, 1:] == srt[:, :-1]).any(axis=1)   # rows whose ranking has a tie
            for j in np.flatnonzero(tied):
                aps[start + j] = expected_average_precision(sims[j], gl == ql[start + j])
    m = float(aps.mean())
    return (m, aps) if return_per_query else m
