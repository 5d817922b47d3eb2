"""Metrics vs hand-computed cases, scikit-learn / scipy, and slow brute-force loops."""
from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from nearid_lib import metrics as M


# ---------------------------------------------------------------------------------- retrieval mAP

def _brute_ap(sims_row, rel_row):
    """Slow obvious AP: walk the ranking (ties by index), accumulate precision at each hit."""
    order = sorted(range(len(sims_row)), key=lambda k: (-sims_row[k], k))
    hits, total = 0, 0.0
    for rank, k in enumerate(order, start=1):
        if rel_row[k]:
            hits += 1
            total += hits / rank
    return total / hits


def test_retrieval_map_hand_computed():
    # 2-D unit vectors at angles so the cosine ranking is obvious.
    ang = np.deg2rad([0, 10, 20, 30, 40])
    gallery = np.stack([np.cos(ang), np.sin(ang)], 1)  # g0..g4 sorted by angle
    g_lab = np.array(["a", "b", "a", "b", "b"])
    query = np.array([[1.0, 0.0], [np.cos(np.deg2rad(40)), np.sin(np.deg2rad(40))]])
    q_lab = np.array(["a", "b"])
    # query 0 ranking: g0(a) g1(b) g2(a) g3 g4 -> AP = (1/1 + 2/3)/2 = 5/6
    # query 1 ranking: g4(b) g3(b) g2(a) g1(b) g0 -> AP = (1 + 1 + 3/4)/3 = 11/12
    m, per = M.retrieval_map(query, q_lab, gallery, g_lab, return_per_query=True)
    assert per == pytest.approx([5 / 6, 11 / 12])
    assert m == pytest.approx((5 / 6 + 11 / 12) / 2)


def test_retrieval_map_vs_sklearn_and_brute_force():
    rng = np.random.default_rng(0)
    Q, G, D, L = 23, 57, 8, 6
    q, g = rng.normal(size=(Q, D)), rng.normal(size=(G, D))
    gl = rng.integers(0, L, size=G)
    gl[:L] = np.arange(L)  # every label present in the gallery
    ql = rng.integers(0, L, size=Q)
    m, per = M.retrieval_map(q, ql, g, gl, return_per_query=True)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    gn = g / np.linalg.norm(g, axis=1, keepdims=True)
    sims = qn @ gn.T
    for i in range(Q):
        rel = gl == ql[i]
        assert per[i] == pytest.approx(average_precision_score(rel, sims[i]), abs=1e-12)
        assert per[i] == pytest.approx(_brute_ap(list(sims[i]), list(rel)), abs=1e-12)
    assert m == pytest.approx(per.mean())
    # chunking does not change anything
    assert M.retrieval_map(q, ql, g, gl, chunk_size=4) == pytest.approx(m, abs=1e-15)


def test_retrieval_map_ties_broken_by_gallery_index():
    # identical gallery images: all similarities tie; the stable order is g0, g1, g2.
    g = np.ones((3, 2))
    q = np.ones((1, 2))
    assert M.retrieval_map(q, [1], g, [0, 0, 1]) == pytest.approx(1 / 3)   # hit at rank 3
    assert M.retrieval_map(q, [1], g, [1, 0, 0]) == pytest.approx(1.0)     # hit at rank 1
    # brute force uses the same (similarity desc, index asc) rule on random tied data
    rng = np.random.default_rng(1)
    g = rng.integers(0, 2, size=(30, 3)).astype(float) + 0.1  # many exact duplicates
    gl = rng.integers(0, 3, size=30)
    gl[:3] = [0, 1, 2]
    q = rng.integers(0, 2, size=(10, 3)).astype(float) + 0.1
    ql = rng.integers(0, 3, size=10)
    _, per = M.retrieval_map(q, ql, g, gl, return_per_query=True)
    sims = M.cosine_similarity_matrix(q, g)
    for i in range(10):
        assert per[i] == pytest.approx(_brute_ap(list(sims[i]), list(gl == ql[i])), abs=1e-12)


def test_retrieval_map_errors():
    g = np.eye(3)
    with pytest.raises(ValueError, match=r"query 1 has label 'z'"):
        M.retrieval_map(np.eye(3)[:2], ["a", "z"], g, ["a", "b", "c"])
    with pytest.raises(ValueError, match="zero-norm"):
        M.retrieval_map(np.zeros((1, 3)), ["a"], g, ["a", "b", "c"])
    with pytest.raises(ValueError, match="non-finite"):
        M.retrieval_map(np.full((1, 3), np.nan), ["a"], g, ["a", "b", "c"])
    with pytest.raises(ValueError, match="labels"):
        M.retrieval_map(np.eye(3)[:2], ["a"], g, ["a", "b", "c"])


def test_retrieval_map_accepts_torch():
    torch = pytest.importorskip("torch")
    g = torch.eye(3)
    assert M.retrieval_map(g, [0, 1, 2], g, [0, 1, 2]) == pytest.approx(1.0)
