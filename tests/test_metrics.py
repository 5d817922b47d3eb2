"""Metrics vs hand-computed cases, scikit-learn / scipy, and slow brute-force loops."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import average_precision_score

from nearid_lib import metrics as M
from nearid_lib.metrics.nearid import ssr_pa_from_margins


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


# ---------------------------------------------------------------------------------- SSR / PA

def _brute_ssr_pa(pos_sim, dist_sim):
    """Slow reference: literal loops over identities, pairs i<j, and the two directions. Returns
    SSR, the strict PA, the authors' PA (one more trial per identity with a trial, won iff the mean of
    its margins is > 0), identities and trials."""
    N, P, _ = pos_sim.shape
    n_id = n_succ = n_tr = n_win = n_overall = 0
    for n in range(N):
        margins = []
        for i in range(P):
            for j in range(i + 1, P):
                s = pos_sim[n, i, j]
                if math.isnan(s):
                    continue
                for d in (i, j):
                    if not math.isnan(dist_sim[n, d]):
                        margins.append(s - dist_sim[n, d])
        if margins:
            trials = [m > 0 for m in margins]
            n_id += 1
            n_succ += all(trials)
            n_tr += len(trials)
            n_win += sum(trials)
            n_overall += sum(margins) / len(margins) > 0
    return n_succ / n_id, n_win / n_tr, (n_win + n_overall) / (n_tr + n_id), n_id, n_tr


def test_ssr_pa_hand_computed():
    nan = np.nan
    # identity 0: 3 views, all distractors. pairs: s01=.9 s02=.8 s12=.7 ; d = [.5, .85, .6]
    #   margins: 01: .9-.5>0 W, .9-.85>0 W ; 02: .8-.5 W, .8-.6 W ; 12: .7-.85 L, .7-.6 W -> 5/6, fail
    # identity 1: 2 views (view 2 missing), distractor of view 1 missing: pair 01 = .6, d0=.4
    #   -> 1 trial, win -> success
    # identity 2: only 1 view -> no pair -> no trial -> excluded from SSR
    # identity 3: 2 views, margin exactly 0 -> a tie is a loss
    pos = np.full((4, 3, 3), nan)
    pos[0, 0, 1], pos[0, 0, 2], pos[0, 1, 2] = .9, .8, .7
    pos[1, 0, 1] = .6
    pos[3, 0, 1] = .5
    dist = np.array([[.5, .85, .6], [.4, nan, nan], [.3, nan, nan], [.5, .5, nan]])
    r = M.ssr_pa(pos, dist, per_identity=True)
    assert r["n_identities"] == 3 and r["n_trials"] == 6 + 1 + 2
    assert r["ssr"] == pytest.approx(1 / 3)          # only identity 1 succeeds
    assert r["pa_strict"] == pytest.approx((5 + 1 + 0) / 9)
    # the authors' PA adds one trial per identity: mean margins .15 (win), .2 (win), 0 (a tie: loss)
    assert (r["n_overall_wins"], r["n_pa_trials"]) == (2, 9 + 3)
    assert r["pa"] == pytest.approx((5 + 1 + 0 + 2) / (9 + 3))
    assert r["trials"].tolist() == [6, 1, 0, 2]
    assert r["wins"].tolist() == [5, 1, 0, 0]
    np.testing.assert_array_equal(r["success"], [0.0, 1.0, nan, 0.0])
    # the lower triangle is ignored: garbage there changes nothing
    pos2 = pos.copy()
    pos2[:, 1, 0] = -5.0
    assert M.ssr_pa(pos2, dist)["pa"] == r["pa"]


def test_ssr_pa_vs_brute_force_random_missing():
    rng = np.random.default_rng(3)
    N, P = 200, 4
    s = rng.uniform(-1, 1, size=(N, P, P))
    s = (s + s.transpose(0, 2, 1)) / 2
    view_missing = rng.random((N, P)) < 0.2
    s[view_missing[:, :, None] | view_missing[:, None, :]] = np.nan
    d = rng.uniform(-1, 1, size=(N, P))
    d[rng.random((N, P)) < 0.2] = np.nan
    r = M.ssr_pa(s, d)
    ssr, pa_strict, pa, n_id, n_tr = _brute_ssr_pa(s, d)
    assert (r["n_identities"], r["n_trials"]) == (n_id, n_tr)
    assert r["ssr"] == pytest.approx(ssr, abs=1e-15)
    assert r["pa_strict"] == pytest.approx(pa_strict, abs=1e-15)
    assert r["pa"] == pytest.approx(pa, abs=1e-15)


def _authors_family_pa(margins: np.ndarray) -> tuple[float, float, float]:
    """The authors' table recipe on a margin table, literally (evaluation/metrics.py of
    Gorluxor/NearID, read, not copied): one ``*_margin`` / ``*_win`` column per term (win NA where the
    margin is NaN), an ``overall_margin`` column = the row's mean margin (NaN without a term) with its
    ``overall_win``; the summary counts every ``*_margin`` column of the family, the overall one
    included: PA = non-NA wins / non-NA win cells; SSRm = rows whose every non-NA win is True."""
    df = pd.DataFrame({f"t{k}_margin": margins[:, k] for k in range(margins.shape[1])})
    terms = list(df.columns)
    for c in terms:
        df[c.replace("_margin", "_win")] = [None if math.isnan(v) else v > 0 for v in df[c]]
    df["overall_margin"] = df[terms].mean(axis=1, skipna=True)
    df["overall_win"] = [None if math.isnan(v) else v > 0 for v in df["overall_margin"]]
    wins = [c.replace("_margin", "_win") for c in df.columns if c.endswith("_margin")]
    w = df[wins].apply(pd.to_numeric, errors="coerce")
    n_valid = w.notna().sum(axis=1)
    all_won = (w.sum(axis=1, skipna=True) == n_valid)[n_valid > 0]
    strict = df[[c.replace("_margin", "_win") for c in terms]].apply(pd.to_numeric, errors="coerce")
    return (float(w.sum().sum() / w.notna().sum().sum()), float(strict.sum().sum() / strict.notna().sum().sum()),
            float(all_won.mean()))


def test_pa_both_ways_on_a_hand_made_margin_table():
    """PA both ways on margins chosen by hand (the directed margins of 4 identities, NaN = no
    trial), counted by hand and by the authors' column recipe (:func:`_authors_family_pa`).

    row 0: +.2 +.1 -.05 +.3  nan nan -> 3 of 4 win; mean .1375 > 0 -> overall wins
    row 1: +.01 +.01 -.5     nan nan nan -> 2 of 3 win; mean -.16 -> overall loses
    row 2: -.01 -.01 +.5 -.02 -.02 -.02 -> 1 of 6 wins; mean .07 > 0 -> overall wins
    row 3: all NaN -> no trial, no overall trial
    row 4: +.4 +.4 +.4 +.4 +.4 +.4 -> 6 of 6; overall wins (the only SSR success)
    strict PA = (3 + 2 + 1 + 6) / (4 + 3 + 6 + 6) = 12 / 19; authors' PA = (12 + 3) / (19 + 4) = 15 / 23;
    SSR = 1 / 4 both ways (an all-won row has a positive mean)."""
    nan = np.nan
    m = np.array([[.2, .1, -.05, .3, nan, nan], [.01, .01, -.5, nan, nan, nan],
                  [-.01, -.01, .5, -.02, -.02, -.02], [nan] * 6, [.4] * 6])
    r = ssr_pa_from_margins(m, per_identity=True)
    assert (r["n_trials"], r["n_wins"], r["n_identities"], r["n_overall_wins"]) == (19, 12, 4, 3)
    assert r["pa_strict"] == 12 / 19 and r["pa"] == 15 / 23 and r["ssr"] == 1 / 4
    assert r["n_pa_trials"] == 23 and r["n_success"] == 1
    pa, pa_strict, ssrm = _authors_family_pa(m)
    assert pa == pytest.approx(15 / 23, abs=1e-15) and pa_strict == pytest.approx(12 / 19, abs=1e-15)
    assert ssrm == 1 / 4
    # a table without the overall trial (MTG's rule): both are the strict rate
    r2 = ssr_pa_from_margins(m, False, overall=False)
    assert r2["pa"] == r2["pa_strict"] == 12 / 19 and r2["n_pa_trials"] == 19
    # the same rule through ssr_pa on similarities: the authors' recipe on its directed margins
    rng = np.random.default_rng(11)
    s = rng.uniform(-1, 1, size=(60, 3, 3))
    d = rng.uniform(-1, 1, size=(60, 3))
    d[rng.random((60, 3)) < .25] = np.nan
    iu, ju = np.triu_indices(3, k=1)
    margins = np.concatenate([s[:, iu, ju] - d[:, iu], s[:, iu, ju] - d[:, ju]], axis=1)
    got = M.ssr_pa(s, d)
    pa, pa_strict, ssrm = _authors_family_pa(margins)
    assert got["pa"] == pytest.approx(pa, abs=1e-12) and got["pa_strict"] == pytest.approx(pa_strict, abs=1e-12)
    assert got["ssr"] == pytest.approx(ssrm, abs=1e-12)


def test_ssr_pa_errors_and_empty():
    with pytest.raises(ValueError, match=r"\[N,P,P\]"):
        M.ssr_pa(np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="dist_sim"):
        M.ssr_pa(np.zeros((2, 3, 3)), np.zeros((2, 2)))
    r = M.ssr_pa(np.full((2, 3, 3), np.nan), np.zeros((2, 3)))
    assert r["n_identities"] == 0 and math.isnan(r["ssr"]) and math.isnan(r["pa"])


def test_nearid_similarities_matches_loop_and_feeds_ssr_pa():
    rng = np.random.default_rng(4)
    N, P, D = 7, 3, 5
    pos, dist = rng.normal(size=(N, P, D)), rng.normal(size=(N, P, D))
    pos[2, 1] = np.nan          # missing view by NaN row
    dmask = np.ones((N, P), bool)
    dmask[0, 2] = False         # missing distractor by mask
    dist[0, 2] = 0.0            # a zero pad that must NOT be used
    ps, ds = M.nearid_similarities(pos, dist, dist_mask=dmask)
    cos = lambda a, b: a @ b / np.linalg.norm(a) / np.linalg.norm(b)
    for n in range(N):
        for i in range(P):
            exp_d = np.nan if (n, i) in [(0, 2), (2, 1)] else cos(pos[n, i], dist[n, i])
            np.testing.assert_allclose(ds[n, i], exp_d, atol=1e-12)
            for j in range(P):
                exp = np.nan if (n == 2 and 1 in (i, j)) else cos(pos[n, i], pos[n, j])
                np.testing.assert_allclose(ps[n, i, j], exp, atol=1e-12)
    r = M.ssr_pa(ps, ds)
    assert r["n_trials"] == 6 * N - 2 - 4  # identity 0 loses 2 trials, identity 2 keeps 1 pair x 2
    with pytest.raises(ValueError, match="identity 1, view 0"):
        bad = pos.copy()
        bad[1, 0] = 0.0
        M.nearid_similarities(bad, dist)


def test_pool_sources_support_weighted():
    a = {"ssr": 0.5, "pa": 0.8, "n_identities": 10, "n_trials": 60}
    b = {"ssr": 1.0, "pa": 0.5, "n_identities": 30, "n_trials": 20}
    r = M.pool_sources({"a": a, "b": b})
    assert r["ssr"] == pytest.approx((0.5 * 10 + 1.0 * 30) / 40)
    assert r["pa"] == pytest.approx((0.8 * 60 + 0.5 * 20) / 80)
    assert r["n_identities"] == 40 and r["n_trials"] == 80 and r["n_sources"] == 2
    r2 = M.pool_sources({"a": a, "b": b}, pa_weight="identities")
    assert r2["pa"] == pytest.approx((0.8 * 10 + 0.5 * 30) / 40)
    # pooling == micro-averaging the concatenated sources
    rng = np.random.default_rng(5)
    res, allp, alld = {}, [], []
    for k, n in (("s1", 30), ("s2", 50)):
        p = rng.uniform(size=(n, 3, 3)); d = rng.uniform(size=(n, 3))
        d[rng.random((n, 3)) < .3] = np.nan
        res[k] = M.ssr_pa(p, d); allp.append(p); alld.append(d)
    whole = M.ssr_pa(np.concatenate(allp), np.concatenate(alld))
    pooled = M.pool_sources(res)
    assert pooled["ssr"] == pytest.approx(whole["ssr"]) and pooled["pa"] == pytest.approx(whole["pa"])
    # both PAs pool exactly: the authors' by its own trials (n_pa_trials), the strict one by n_trials
    assert pooled["pa_strict"] == pytest.approx(whole["pa_strict"]) and pooled["pa"] != pooled["pa_strict"]
    assert pooled["n_pa_trials"] == whole["n_pa_trials"] == whole["n_trials"] + whole["n_identities"]
    # paper Table 5, SigLIP2, seven main sources with n = 500 each -> 30.7 SSR, 48.8 PA
    t5 = {"FLUX.1-Fill-512": (35.8, 55.7), "FLUX.1-Fill-1024": (27.4, 44.8), "Qwen-512": (33.8, 51.4),
          "Qwen-1328": (16.2, 32.1), "PowerPaint-512": (34.0, 52.7), "SDXL-512": (42.0, 59.3),
          "SDXL-1024": (26.0, 45.6)}
    res = {k: {"ssr": s, "pa": p, "n_identities": 500, "n_trials": 3000} for k, (s, p) in t5.items()}
    pooled = M.pool_sources(res)
    assert round(pooled["ssr"], 1) == 30.7 and round(pooled["pa"], 1) == 48.8
    df = M.source_breakdown(res, {"Avg. (training, 4)": list(t5)[:4]})
    row = df[df.row == "Avg. (training, 4)"].iloc[0]
    assert round(row.ssr, 1) == 28.3 and round(row.pa, 1) == 46.0 and row.n_identities == 2000
    with pytest.raises(ValueError, match="unknown sources"):
        M.pool_sources(res, ["nope"])


# ---------------------------------------------------------------------------------- Fisher-z

def test_fisher_z_mean_hand_and_paper_table2():
    assert M.fisher_z_mean([0.5, 0.5]) == pytest.approx(0.5)
    exp = math.tanh((math.atanh(0.2) + math.atanh(0.6)) / 2)
    assert M.fisher_z_mean([0.2, 0.6, np.nan]) == pytest.approx(exp)
    assert M.fisher_z_mean([1.0, 1.0]) == pytest.approx(0.999)  # clipped, finite
    with pytest.raises(ValueError, match="NaN"):
        M.fisher_z_mean([0.2, np.nan], nan_policy="raise")
    with pytest.raises(ValueError, match=r"\|r\| > 1"):
        M.fisher_z_mean([1.5])
    assert math.isnan(M.fisher_z_mean([np.nan]))
    # NearID Table 2, S-H column: seven per-method r -> "0.516 ± 0.079"
    s_h = [0.660, 0.652, 0.480, 0.363, 0.766, 0.253, 0.248]
    m, sem = M.fisher_z_mean(s_h, return_sem=True)
    assert round(m, 3) == 0.516 and round(sem, 3) == 0.079
    nearid_h = [0.675, 0.655, 0.546, 0.382, 0.768, 0.306, 0.316]   # "0.545 ± 0.071"
    m, sem = M.fisher_z_mean(nearid_h, return_sem=True)
    assert round(m, 3) == 0.545 and round(sem, 3) == 0.071


def test_pearson_vs_scipy_and_nan():
    from scipy.stats import pearsonr
    rng = np.random.default_rng(6)
    x, y = rng.normal(size=50), rng.normal(size=50)
    assert M.pearson(x, y) == pytest.approx(pearsonr(x, y).statistic, abs=1e-12)
    x2 = x.copy(); x2[3] = np.nan
    keep = np.arange(50) != 3
    assert M.pearson(x2, y) == pytest.approx(pearsonr(x[keep], y[keep]).statistic, abs=1e-12)
    assert math.isnan(M.pearson(np.ones(5), y[:5]))


# ---------------------------------------------------------------------------------- MTG

def test_mtg_metrics_oracle_pairing_and_ssr():
    rng = np.random.default_rng(7)
    n = 40
    o1, o2 = rng.uniform(0.3, 1, n), rng.uniform(0.3, 1, n)
    # similarities that track exactly the oracle they belong to (plus an affine change)
    s11p, s21p = 0.5 * o1 + 0.1, 2 * o1 - 1
    s22p, s12p = 0.3 * o2, o2 + 0.2
    s12 = np.full(n, 0.6)
    r = M.mtg_metrics(s11p, s22p, s12p, s21p, s12, o1, o2)
    assert r["m_o"] == pytest.approx(0.999) and r["m_opair"] == pytest.approx(0.999)
    # swapping the oracles breaks the correlation (independent draws)
    r_sw = M.mtg_metrics(s11p, s22p, s12p, s21p, s12, o2, o1)
    assert abs(r_sw["m_o"]) < 0.5
    # general case: against explicit per-set Pearson + Fisher-z
    s = {k: rng.normal(size=n) for k in ("11p", "22p", "12p", "21p")}
    r = M.mtg_metrics(s["11p"], s["22p"], s["12p"], s["21p"], s12, o1, o2)
    rs = [np.corrcoef(s["11p"], o1)[0, 1], np.corrcoef(s["22p"], o2)[0, 1],
          np.corrcoef(s["12p"], o2)[0, 1], np.corrcoef(s["21p"], o1)[0, 1]]
    assert r["m_o"] == pytest.approx(np.tanh(np.mean(np.arctanh(rs))))
    assert r["m_opair"] == pytest.approx(np.tanh(np.mean(np.arctanh(rs[:2]))))
    with pytest.raises(ValueError, match="oracle above 1"):
        M.mtg_metrics(s11p, s22p, s12p, s21p, s12, o1 + 1, o2)
    # a negative oracle (a part mask larger than its object: the paper's formula as written) is a value
    neg = o1.copy()
    neg[0] = -0.25
    assert np.isfinite(M.mtg_metrics(s11p, s22p, s12p, s21p, s12, neg, o2)["m_o"])


def test_mtg_ssr_pa_hand():
    # pair 0: s12=.8 vs .7,.6 -> both win ; pair 1: .8 vs .9,.1 -> 1 of 2 ; pair 2: .5 vs .5 (tie), nan
    r = M.mtg_ssr_pa([.8, .8, .5], [.7, .9, .5], [.6, .1, np.nan])
    assert r["n_identities"] == 3 and r["n_trials"] == 5
    assert r["ssr"] == pytest.approx(1 / 3) and r["pa"] == pytest.approx(3 / 5)
    # MTG's PA is the strict rate in the authors' code too (no per-pair overall trial)
    assert r["pa_strict"] == r["pa"] and r["n_pa_trials"] == 5 and r["n_overall_wins"] == 0


# ---------------------------------------------------------------------------------- DB++ M-H

def test_metric_to_human_per_method_and_category():
    rng = np.random.default_rng(8)
    rows = []
    for m in ("A", "B", "C"):
        for c in ("animal", "object"):
            h = rng.uniform(0, 4, 20)
            rows += [(m, c, hv, hv + rng.normal(scale=1 + (m == "C") * 3)) for hv in h]
    meth, cat, hum, met = map(np.array, zip(*rows))
    r = M.metric_to_human(met, hum, meth, cat)
    pm = r["per_method"].set_index("method")
    for m in ("A", "B", "C"):
        k = meth == m
        assert pm.loc[m, "r"] == pytest.approx(np.corrcoef(met[k], hum[k])[0, 1])
    assert r["m_h"] == pytest.approx(np.tanh(np.arctanh(pm["r"]).mean()))
    assert r["m_h_sem"] == pytest.approx(pm["r"].std(ddof=1) / np.sqrt(3))
    pc = r["per_category"].set_index("category")
    k = (cat == "animal")
    per = [np.corrcoef(met[k & (meth == m)], hum[k & (meth == m)])[0, 1] for m in ("A", "B", "C")]
    assert pc.loc["animal", "r"] == pytest.approx(np.tanh(np.arctanh(per).mean()))
    assert pc.loc["animal", "r_pooled"] == pytest.approx(np.corrcoef(met[k], hum[k])[0, 1])


# ---------------------------------------------------------------------------------- ID-Sim metrics

def _brute_auc(s, y):
    pos, neg = s[y == 1], s[y == 0]
    return np.mean([(p > q) + 0.5 * (p == q) for p in pos for q in neg])


def test_verification_ap_auc_vs_brute_force():
    rng = np.random.default_rng(9)
    y = rng.integers(0, 2, 80)
    s = rng.normal(size=80) + y
    assert M.verification_ap(s, y) == pytest.approx(_brute_ap(list(s), list(y == 1)), abs=1e-12)
    assert M.verification_auc(s, y) == pytest.approx(_brute_auc(s, y), abs=1e-12)
    s_t = np.round(s)  # many ties: AUC counts them one half
    assert M.verification_auc(s_t, y) == pytest.approx(_brute_auc(s_t, y), abs=1e-12)
    # hand: scores .9(1) .8(0) .7(1) -> AP = (1 + 2/3)/2, AUC = 1/2
    assert M.verification_ap([.9, .8, .7], [1, 0, 1]) == pytest.approx(5 / 6)
    assert M.verification_auc([.9, .8, .7], [1, 0, 1]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="single class"):
        M.verification_ap([.1, .2], [1, 1])
    with pytest.raises(ValueError, match="non-finite"):
        M.verification_auc([np.nan, .2], [0, 1])


def test_subjects2k_binarisation():
    c = np.array([1.0, 0.8, 0.6, 0.9, 0.0])
    s = np.array([0.1, 0.9, 0.8, 0.7, 0.2])
    # strict: positives are c > .8 -> rows 0, 3. ranking: 1(0) 2(0) 3(1) 4(0) 0(1) -> (1/3 + 2/5)/2
    assert M.subjects2k_ap(s, c) == pytest.approx((1 / 3 + 2 / 5) / 2)
    # inclusive: row 1 becomes positive too -> 1(1) 2(0) 3(1) 4(0) 0(1) -> (1 + 2/3 + 3/5)/3
    assert M.subjects2k_ap(s, c, strict=False) == pytest.approx((1 + 2 / 3 + 3 / 5) / 3)


def test_ndcg_vs_brute_force():
    rng = np.random.default_rng(10)
    rel = rng.integers(0, 4, size=(6, 12)).astype(float)
    rel[:, 0] = 3  # every query has a relevant item
    sc = rng.normal(size=(6, 12))

    def dcg(r_sorted):
        return sum(g / math.log2(i + 2) for i, g in enumerate(r_sorted))

    for k in (None, 5):
        vals = []
        for q in range(6):
            order = np.argsort(-sc[q])
            ideal = np.sort(rel[q])[::-1]
            kk = k or 12
            vals.append(dcg(rel[q][order][:kk]) / dcg(ideal[:kk]))
        assert M.ndcg(rel, sc, k=k) == pytest.approx(np.mean(vals), abs=1e-12)


def test_rank_correlations_vs_brute_force():
    rng = np.random.default_rng(11)
    x = rng.normal(size=30)
    y = rng.integers(0, 5, 30).astype(float) + 0.1 * x  # graded with no ties after the nudge
    y[4] = np.nan
    r = M.rank_correlations(x, y)
    k = np.isfinite(y)
    xa, ya = x[k], y[k]
    rank = lambda v: np.argsort(np.argsort(v)).astype(float)
    assert r["spearman"] == pytest.approx(np.corrcoef(rank(xa), rank(ya))[0, 1], abs=1e-12)
    n = len(xa)
    conc = sum(np.sign(xa[i] - xa[j]) * np.sign(ya[i] - ya[j]) for i in range(n) for j in range(i + 1, n))
    assert r["kendall"] == pytest.approx(conc / (n * (n - 1) / 2), abs=1e-12)
    assert r["n"] == 29


def test_triplet_accuracy():
    assert M.triplet_accuracy([.9, .5, .4, .3], [.1, .6, .4, .2]) == pytest.approx(0.5)  # tie fails
    rng = np.random.default_rng(12)
    a, b = rng.normal(size=100), rng.normal(size=100)
    assert M.triplet_accuracy(a, b) == pytest.approx(sum(x > y for x, y in zip(a, b)) / 100)
    with pytest.raises(ValueError):
        M.triplet_accuracy([.1], [np.nan])
