"""ID-Sim claims as declarations: the per-unit evidence reproduces the benchmark metrics it
stands for, and the verdicts follow the paired intervals (hand cases)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from nearid_lib import make_rng
from nearid_lib.claims import evaluate_claims
from nearid_lib.idsim.eval_suite import evaluate_sets
from nearid_lib.idsim.claims import CLAIMS_BY_NOTEBOOK, IDSIM_CLAIMS, benchmark_evidence, sensitivity_evidence


def _sets(rng, n_ids=30, d=16):
    """Retrieval (2 queries + 3 gallery images per subject), triplets and graded pairs, with an
    'idsim' embedding that knows identities and a 'frozen' one that is noise."""
    proto = rng.normal(size=(n_ids, d))
    emb = {"idsim": {}, "frozen": {}}

    def add(key, ident, noise):
        emb["idsim"][key] = proto[ident] + noise * rng.normal(size=d)
        emb["frozen"][key] = rng.normal(size=d)

    ret, trips, graded = [], [], []
    for i in range(n_ids):
        for j in range(2):
            add(f"q{i}_{j}", i, 0.3)
            ret.append({"path": f"q{i}_{j}", "label": f"s{i}", "role": "query"})
        for j in range(3):
            add(f"g{i}_{j}", i, 0.3)
            ret.append({"path": f"g{i}_{j}", "label": f"s{i}", "role": "gallery"})
        add(f"a{i}", i, 0.2)
        add(f"p{i}", i, 0.2)
        add(f"n{i}", (i + 1) % n_ids, 0.2)
        trips += [{"anchor": f"a{i}", "positive": f"p{i}", "negative": f"n{i}", "mode": m} for m in ("hard", "easy")]
        for lvl in range(4):
            add(f"e{i}_{lvl}", i, 0.2 + lvl)
            graded.append({"img1": f"a{i}", "img2": f"e{i}_{lvl}", "c": 1 - lvl / 3, "rating": 1 - lvl / 3,
                           "grid": "background", "anchor_id": f"A{i}"})
    return {"retrieval": pd.DataFrame(ret), "triplets": pd.DataFrame(trips), "graded": pd.DataFrame(graded)}, emb


def test_evidence_reproduces_the_benchmark_metrics():
    sets, emb = _sets(np.random.default_rng(0))
    ev = benchmark_evidence(sets, emb)
    for enc in emb:
        res = evaluate_sets(sets, emb[enc])
        assert ev[f"{enc}.pods.ap"].point() == pytest.approx(res["pods_ap"])
        assert ev[f"{enc}.cute_hard.acc"].point() == pytest.approx(res["cute_hard_acc"])
        g = sets["graded"]
        sims = {k: v / np.linalg.norm(v) for k, v in emb[enc].items()}
        rhos = [spearmanr([sims[a] @ sims[b] for a, b in zip(gg.img1, gg.img2)], gg.rating).statistic
                for _, gg in g.groupby("anchor_id")]
        assert ev[f"{enc}.graded.rho"].point() == pytest.approx(np.mean(rhos))


def test_benchmark_claims_hold_for_an_identity_aware_encoder():
    sets, emb = _sets(np.random.default_rng(1))
    out = evaluate_claims(IDSIM_CLAIMS, benchmark_evidence(sets, emb), make_rng(0, "t"), n_boot=300,
                          keys=CLAIMS_BY_NOTEBOOK["09_train_idsim"])
    assert out.verdict.tolist() == ["holds"] * 4
    assert (out.detail.str.contains("paired")).all()
    # the other way round the claims do not hold
    swapped = {"idsim": emb["frozen"], "frozen": emb["idsim"]}
    out = evaluate_claims(IDSIM_CLAIMS, benchmark_evidence(sets, swapped), make_rng(0, "t"), n_boot=300,
                          keys=CLAIMS_BY_NOTEBOOK["09_train_idsim"])
    assert out.verdict.tolist() == ["does not hold"] * 4


def test_sensitivity_claims_hand_case():
    anchors = [f"A{i}" for i in range(40)]
    rng = np.random.default_rng(2)
    rows = []
    for a in anchors:
        rows.append({"encoder": "frozen", "anchor_id": a, "identity": 0.1 + 0.01 * rng.normal(),
                     "background": 0.3 + 0.01 * rng.normal()})
        rows.append({"encoder": "idsim", "anchor_id": a, "identity": 0.5 + 0.01 * rng.normal(),
                     "background": 0.3 + 0.3 * rng.normal()})      # no clear difference: inconclusive
    out = evaluate_claims(IDSIM_CLAIMS, sensitivity_evidence(pd.DataFrame(rows)), make_rng(0, "t"), n_boot=500,
                          keys=CLAIMS_BY_NOTEBOOK["10_sensitivity_regression"])
    v = dict(zip(out.key, out.verdict))
    assert v["idsim.2a"] == "holds" and v["idsim.2b"] == "inconclusive"
    assert v["idsim.2c"] == v["idsim.2d"] == "not testable"        # no NearID head in the evidence
