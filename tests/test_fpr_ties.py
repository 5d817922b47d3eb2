"""Ties in similarity must not make the FPR / ID-Sim mAP depend on the gallery's order: the
expected AP over tie orders, checked by hand, against brute-force enumeration of tie orders, and
under gallery permutations."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from nearid_lib.metrics.retrieval import average_precision, expected_average_precision, retrieval_map


def _brute_expected_ap(scores, rel):
    """Mean AP over every order of the tied items (each tie group permuted independently)."""
    scores, rel = np.asarray(scores, float), np.asarray(rel, bool)
    levels = sorted(set(scores.tolist()), reverse=True)
    groups = [np.flatnonzero(scores == v) for v in levels]
    aps = []
    for perm in itertools.product(*[list(itertools.permutations(g)) for g in groups]):
        order = np.concatenate([np.asarray(p) for p in perm])
        r = rel[order]
        prec = np.cumsum(r) / np.arange(1, len(r) + 1)
        aps.append(prec[r].sum() / r.sum())
    return float(np.mean(aps))


def test_expected_ap_hand_cases():
    # one relevant item among three tied ones: it sits at rank 1, 2 or 3 with equal chance
    assert expected_average_precision([1, 1, 1], [0, 0, 1]) == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    # the stable convention instead puts it last (gallery order decides)
    assert average_precision([1, 1, 1], [0, 0, 1]) == pytest.approx(1 / 3)
    # two relevant items tied at ranks 2-3 behind a non-relevant one: every order gives 1/2, 2/3
    assert expected_average_precision([0.9, 0.5, 0.5, 0.1], [0, 1, 1, 0]) == pytest.approx(7 / 12)
    # a relevant and a non-relevant item tied at the top, one relevant last:
    # orders (rel, non): 1, 2/3 -> 5/6; (non, rel): 1/2, 2/3 -> 7/12; mean 17/24
    assert expected_average_precision([0.7, 0.7, 0.2], [1, 0, 1]) == pytest.approx(17 / 24)
    # no ties: the plain AP
    assert expected_average_precision([0.3, 0.9, 0.5], [1, 0, 1]) == pytest.approx(
        average_precision([0.3, 0.9, 0.5], [1, 0, 1]))


def test_expected_ap_equals_brute_force_over_tie_orders():
    rng = np.random.default_rng(0)
    for _ in range(60):
        n = int(rng.integers(2, 8))
        scores = rng.integers(0, 3, n).astype(float)          # few levels -> many ties
        rel = rng.random(n) < 0.4
        if not rel.any():
            rel[int(rng.integers(n))] = True
        assert expected_average_precision(scores, rel) == pytest.approx(_brute_expected_ap(scores, rel), abs=1e-12)


def test_permuted_gallery_with_ties_gives_identical_map():
    rng = np.random.default_rng(1)
    # quantised embeddings: several gallery images share their similarity to a query
    g = rng.integers(0, 2, (12, 3)).astype(float) + 0.5
    gl = np.array(list("aabbccaabbcc"))
    q = rng.integers(0, 2, (5, 3)).astype(float) + 0.5
    ql = np.array(list("abcab"))
    base, per = retrieval_map(q, ql, g, gl, return_per_query=True, ties="expected")
    stable = set()
    for _ in range(20):
        p = rng.permutation(len(g))
        m, per_p = retrieval_map(q, ql, g[p], gl[p], return_per_query=True, ties="expected")
        assert m == pytest.approx(base, abs=1e-12)
        np.testing.assert_allclose(per_p, per, atol=1e-12)
        stable.add(round(retrieval_map(q, ql, g[p], gl[p], ties="stable"), 12))
    assert len(stable) > 1          # the stable convention does depend on gallery order here
    # per query, the expected AP is the brute-force mean over orders of the (exactly) tied images
    sims = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (g / np.linalg.norm(g, axis=1, keepdims=True)).T
    checked = 0
    for i in range(len(q)):
        if np.unique(sims[i], return_counts=True)[1].max() <= 4:
            assert per[i] == pytest.approx(_brute_expected_ap(sims[i], gl == ql[i]), abs=1e-12)
            checked += 1
    assert checked


def test_no_ties_expected_equals_stable():
    rng = np.random.default_rng(2)
    q, g = rng.normal(size=(6, 4)), rng.normal(size=(15, 4))
    ql, gl = rng.integers(0, 3, 6), np.arange(15) % 3
    assert retrieval_map(q, ql, g, gl, ties="expected") == pytest.approx(retrieval_map(q, ql, g, gl), abs=1e-12)
    with pytest.raises(ValueError, match="ties"):
        retrieval_map(q, ql, g, gl, ties="random")


def test_fpr_score_embeddings_independent_of_gallery_order_with_duplicates():
    from nearid_lib.fpr.protocol import score_embeddings

    rng = np.random.default_rng(3)
    # a duplicated gallery image of another identity ties with the true match (copy-paste case)
    g = rng.normal(size=(8, 4))
    g[5] = g[0]
    gn = np.array(["a", "a", "b", "b", "c", "b", "c", "a"])
    q = g[[0, 2]] + 0.0
    qn = np.array(["a", "b"])
    base = score_embeddings(q, qn, g, gn).ap.to_numpy()
    for _ in range(10):
        p = rng.permutation(len(g))
        np.testing.assert_allclose(score_embeddings(q, qn, g[p], gn[p]).ap.to_numpy(), base, atol=1e-12)
    sims = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (g / np.linalg.norm(g, axis=1, keepdims=True)).T
    assert base[0] == pytest.approx(_brute_expected_ap(np.round(sims[0], 12), gn == "a"), abs=1e-9)
