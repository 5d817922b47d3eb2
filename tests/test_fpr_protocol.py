"""The FPR protocol: one call equals brute force; a query identity missing from the gallery is an error."""
from __future__ import annotations

import numpy as np
import pytest

from nearid_lib.fpr import rank_generator, score_embeddings

from _fpr_cases import _fixture


def test_rank_generator_one_call_matches_brute_force(tmp_path):
    root = _fixture(tmp_path)
    res = rank_generator(root / "generated_data.csv", root / "gallery_data.csv", encoder="efficientnet-lite0",
                         tiny=True, cache_dir=tmp_path / "cache")
    assert list(res.summary.method) == ["m1", "m2"]
    assert {"map", "sim", "top1", "auc", "ndcg", "n_queries"} <= set(res.summary.columns)
    pq = res.per_query
    # brute force: per query, rank its species' gallery by cosine, AP by the definition
    q, g, gal = res.extra["q_emb"], res.extra["g_emb"], res.extra["gallery"]
    for i in range(len(pq)):
        idx = [j for j in range(len(gal)) if gal.species.iloc[j] == pq.species.iloc[i]]
        s = [float(q[i] @ g[j] / np.linalg.norm(q[i]) / np.linalg.norm(g[j])) for j in idx]
        order = sorted(range(len(idx)), key=lambda t: (-s[t], t))
        hits, precs = 0, []
        for r, t in enumerate(order, 1):
            if gal.name.iloc[idx[t]] == pq.name.iloc[i]:
                hits += 1
                precs.append(hits / r)
        assert pq.ap.iloc[i] == pytest.approx(np.mean(precs), abs=1e-9)
    assert (pq.n_gallery == 6).all()
    for m, d in pq.groupby("method"):
        assert res.summary.set_index("method").loc[m, "map"] == pytest.approx(d.ap.mean())
    # the folder form gives the same scores for one method
    res2 = rank_generator(root / "generated", root, encoder="efficientnet-lite0", tiny=True,
                          cache_dir=tmp_path / "cache")
    assert res2.per_query.ap.mean() == pytest.approx(pq.ap.mean())
    # whole-gallery scope differs (12 gallery images per query)
    res3 = rank_generator(root / "generated_data.csv", root, encoder="efficientnet-lite0", tiny=True,
                          group_by=None, cache_dir=tmp_path / "cache")
    assert (res3.per_query.n_gallery == 12).all()


def test_score_embeddings_missing_identity_is_error():
    q = np.eye(3)[:2]
    with pytest.raises(ValueError, match="no image in the gallery"):
        score_embeddings(q, ["a", "z"], np.eye(3), ["a", "b", "c"])
