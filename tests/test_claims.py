"""Claims as data: statistics vs the metrics module, bootstrap vs brute-force resampling,
paired intervals, verdicts on hand-built cases, preconditions, seeds, paper values."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nearid_lib import claims as C
from nearid_lib import metrics
from nearid_lib.runtime.seeding import make_rng


def _nearid_table(rng, n=40, sources=("a", "b"), p_win=0.8, seeds=(0,)):
    rows = []
    for seed in seeds:
        for u in range(n):
            for s in sources:
                trials = int(rng.integers(2, 7))
                wins = int(rng.binomial(trials, p_win))
                rows.append({"unit": f"id{u:03d}", "source": s, "seed": seed, "wins": wins,
                             "trials": trials, "success": float(wins == trials)})
    return pd.DataFrame(rows)


def test_ssr_pa_statistics_match_metrics_pooling():
    t = _nearid_table(make_rng(0, "t"))
    per = {}
    for s, g in t.groupby("source"):
        per[s] = {"ssr": g.success.mean(), "pa": g.wins.sum() / g.trials.sum(),
                  "n_identities": len(g), "n_trials": int(g.trials.sum()), "n_wins": int(g.wins.sum()),
                  "n_success": int(g.success.sum())}
    pooled = metrics.pool_sources(per, ["a", "b"])
    assert C.Evidence("ssr", t).point() == pytest.approx(pooled["ssr"], abs=1e-12)
    assert C.Evidence("pa", t).point() == pytest.approx(pooled["pa"], abs=1e-12)


def test_mtg_mo_statistic_matches_mtg_metrics():
    rng = make_rng(1, "mtg")
    n = 30
    cols = {k: rng.random(n) for k in ("s_1_1p", "s_2_2p", "s_1_2p", "s_2_1p", "s_1_2")}
    o1, o2 = rng.random(n), rng.random(n)
    ref = metrics.mtg_metrics(cols["s_1_1p"], cols["s_2_2p"], cols["s_1_2p"], cols["s_2_1p"],
                              cols["s_1_2"], o1, o2)
    t = pd.DataFrame({"unit": [f"p{i}" for i in range(n)], **cols, "oracle_1": o1, "oracle_2": o2})
    assert C.Evidence("mtg_mo", t).point() == pytest.approx(ref["m_o"], abs=1e-9)
    assert C.Evidence("mtg_mopair", t).point() == pytest.approx(ref["m_opair"], abs=1e-9)


@pytest.mark.parametrize("stat", ["ssr", "pa", "mtg_mo"])
def test_replicates_equal_brute_force_resampling(stat):
    """A replicate from resampling counts equals the statistic recomputed on the explicitly
    resampled table (units drawn with replacement, clusters kept whole)."""
    rng = make_rng(2, stat)
    if stat == "mtg_mo":
        n = 25
        t = pd.DataFrame({"unit": [f"p{i}" for i in range(n)],
                          **{k: rng.random(n) for k in ("s_1_1p", "s_2_2p", "s_1_2p", "s_2_1p")},
                          "oracle_1": rng.random(n), "oracle_2": rng.random(n)})
    else:
        t = _nearid_table(rng, n=25)
    ev = C.Evidence(stat, t)
    units = C._units(ev)
    reps = C._replicates([ev], make_rng(3, "boot"), n_boot=5)[0]
    counts = make_rng(3, "boot").multinomial(len(units), np.full(len(units), 1 / len(units)), size=5)
    for b in range(5):
        parts = [t[t.unit == u] for u, c in zip(units, counts[b]) for _ in range(int(c))]
        assert reps[b] == pytest.approx(C.Evidence(stat, pd.concat(parts)).point(), abs=1e-9)


def test_paired_difference_has_no_between_unit_noise():
    rng = make_rng(4, "pair")
    u = rng.random(50)
    a = pd.DataFrame({"unit": [f"u{i}" for i in range(50)], "x": u + 0.1})
    b = pd.DataFrame({"unit": [f"u{i}" for i in range(50)], "x": u})
    ev = {"a": C.Evidence("mean:x", a), "b": C.Evidence("mean:x", b)}
    spec = C.ClaimSpec("k", "P", "a beats b", C.Greater("a", "b", margin=0.05))
    row = C.evaluate_claim(spec, ev, make_rng(0, "b"), n_boot=200)
    assert row["verdict"] == "holds"
    assert row["ci_low"] == pytest.approx(0.1) and row["ci_high"] == pytest.approx(0.1)
    assert "(paired)" in row["detail"]
    # different units: independent resampling, the interval widens by the spread of u
    b2 = b.assign(unit=[f"v{i}" for i in range(50)])
    row2 = C.evaluate_claim(spec, {"a": ev["a"], "b": C.Evidence("mean:x", b2)}, make_rng(0, "b"),
                            n_boot=200)
    assert row2["ci_high"] - row2["ci_low"] > 0.05 and "(paired)" not in row2["detail"]


@pytest.mark.parametrize("value,verdict", [(0.9, "holds"), (0.1, "does not hold"), (0.5, "inconclusive")])
def test_at_least_verdicts(value, verdict):
    rng = make_rng(5, value)
    # success probabilities around `value`, 200 units: the interval is about +-0.07 wide
    t = pd.DataFrame({"unit": [f"u{i}" for i in range(200)],
                      "success": (rng.random(200) < value).astype(float)})
    spec = C.ClaimSpec("k", "P", "ssr high", C.AtLeast("q", 0.5))
    row = C.evaluate_claim(spec, {"q": C.Evidence("ssr", t)}, make_rng(0, "b"), n_boot=500)
    assert row["verdict"] == verdict, row


def test_within_and_at_most_hand_cases():
    z = pd.DataFrame({"unit": ["a", "b", "c", "d"], "x": [1.0, 1.0, 1.0, 1.0]})
    ev = {"one": C.Evidence("mean:x", z), "two": C.Evidence("mean:x", z.assign(x=2.0))}
    near = C.ClaimSpec("k", "P", "close", C.Within("one", "two", tol=1.5))
    far = C.ClaimSpec("k", "P", "close", C.Within("one", "two", tol=0.5))
    most = C.ClaimSpec("k", "P", "small", C.AtMost("one", 1.5))
    rng = make_rng(0, "w")
    assert C.evaluate_claim(near, ev, rng, n_boot=50)["verdict"] == "holds"
    assert C.evaluate_claim(far, ev, rng, n_boot=50)["verdict"] == "does not hold"
    assert C.evaluate_claim(most, ev, rng, n_boot=50)["verdict"] == "holds"


def test_preconditions_and_missing_evidence_are_not_testable():
    t = pd.DataFrame({"unit": ["a", "b", "c"], "success": [0.0, 1.0, 0.0]})
    spec = C.ClaimSpec("k", "P", "x", C.AtLeast("q", 0.1),
                       preconditions=(C.Precondition("q", ">=", 0.9, "regime"),))
    row = C.evaluate_claim(spec, {"q": C.Evidence("ssr", t)}, make_rng(0, "p"), n_boot=10)
    assert row["verdict"] == "not testable" and "precondition" in row["detail"]
    row = C.evaluate_claim(spec, {}, make_rng(0, "p"), n_boot=10)
    assert row["verdict"] == "not testable" and "no evidence" in row["detail"]
    # an undefined statistic (Pearson r of one MTG pair) is not a verdict either
    cols = sorted({c for pair in C.MTG_PAIRS for c in pair})
    pairs = pd.DataFrame({"unit": ["a"], **{c: [0.5] for c in cols}})      # one pair: r = 0/0
    mo = C.ClaimSpec("k", "P", "mo", C.AtLeast("m", 0.0))
    row = C.evaluate_claim(mo, {"m": C.Evidence("mtg_mo", pairs)}, make_rng(0, "p"), n_boot=10)
    assert row["verdict"] == "not testable" and "undefined" in row["detail"]


def test_seeds_are_averaged_and_their_spread_reported():
    rows = []
    for seed, p in ((0, 0.2), (1, 0.4), (2, 0.6)):
        for i in range(10):
            rows.append({"unit": f"u{i}", "seed": seed, "success": float(i < 10 * p)})
    ev = C.Evidence("ssr", pd.DataFrame(rows))
    assert ev.seeds == [0, 1, 2]
    np.testing.assert_allclose(ev.per_seed(), [0.2, 0.4, 0.6])
    assert ev.point() == pytest.approx(0.4)
    row = C.evaluate_claim(C.ClaimSpec("k", "P", "x", C.AtLeast("q", 0.0)), {"q": ev},
                           make_rng(0, "s"), n_boot=50)
    assert "3 seeds sd 20.0%" in row["ours"] and row["seeds"] == "3"


def test_paper_value_reads_one_cell():
    ref = C.PaperRef("nearid_table1_main", (("row", "NearID (Ours)"),), "nearid_ssr")
    assert C.paper_value(ref) == pytest.approx(99.17)
    with pytest.raises(KeyError, match="0 matching rows"):
        C.paper_value(C.PaperRef("nearid_table1_main", (("row", "nope"),), "nearid_ssr"))


def test_evidence_rejects_missing_columns():
    with pytest.raises(ValueError, match="lacks column"):
        C.Evidence("pa", pd.DataFrame({"unit": ["a"], "wins": [1]}))


def test_ratio_at_least_is_paired_and_decided_on_its_interval():
    import numpy as np
    import pandas as pd

    from nearid_lib.claims import ClaimSpec, Evidence, RatioAtLeast, evaluate_claims

    rng = np.random.default_rng(0)
    units = [f"u{i}" for i in range(60)]
    base = rng.uniform(0.3, 0.9, 60)            # large between-unit spread, shared by both sides

    def ev(x):
        return Evidence("mean:ap", pd.DataFrame({"unit": units, "ap": x}))

    spec = (ClaimSpec("r", "T", "a reaches 90% of b", RatioAtLeast("a", "b", 0.9)),)
    out = evaluate_claims(spec, {"a": ev(0.97 * base), "b": ev(base)}, np.random.default_rng(1), n_boot=400)
    # hand value: sum(0.97 b) / sum(b) = 0.97 in every replicate (paired): a zero-width interval
    assert out.estimate[0] == pytest.approx(0.97) and out.ci_low[0] == pytest.approx(0.97)
    assert out.verdict[0] == "holds" and "ratio 0.970" in out.ours[0]
    out = evaluate_claims(spec, {"a": ev(0.8 * base), "b": ev(base)}, np.random.default_rng(1), n_boot=400)
    assert out.verdict[0] == "does not hold"


def test_comparison_at_the_floor_or_ceiling_is_not_testable():
    """SSR 0% vs 1% (both within 2% of the floor) decides nothing; 0% vs 10% does; so does a
    single-quantity claim at the floor (SSR >= 95% with SSR 0% does not hold)."""
    def ssr(k, n=100):
        return C.Evidence("ssr", pd.DataFrame({"unit": [f"u{i}" for i in range(n)],
                                               "success": [1.0] * k + [0.0] * (n - k)}))
    rng = make_rng(0, "floor")
    spec = C.ClaimSpec("k", "P", "a above b", C.Greater("a", "b"))
    row = C.evaluate_claim(spec, {"a": ssr(1), "b": ssr(0)}, rng, n_boot=50)
    assert row["verdict"] == "not testable" and "floor" in row["detail"]
    row = C.evaluate_claim(spec, {"a": ssr(99), "b": ssr(100)}, rng, n_boot=50)
    assert row["verdict"] == "not testable" and "ceiling" in row["detail"]
    assert C.evaluate_claim(spec, {"a": ssr(10), "b": ssr(0)}, rng, n_boot=50)["verdict"] != "not testable"
    single = C.ClaimSpec("k", "P", "a high", C.AtLeast("a", 0.95))
    assert C.evaluate_claim(single, {"a": ssr(0)}, rng, n_boot=50)["verdict"] == "does not hold"
    # unbounded statistics never hit the rule; mean:<col> is bounded only when the evidence says so
    m = pd.DataFrame({"unit": ["a", "b", "c"], "x": [0.0, 0.0, 0.0]})
    assert C.at_bound([C.Evidence("mean:x", m)] * 2, [0.0, 0.0]) is None
    assert C.at_bound([C.Evidence("mean:x", m, bounds=(0.0, 1.0))] * 2, [0.0, 0.01]) == "floor"
    assert C.at_bound([C.Evidence("mean:x", m, bounds=(0.0, 1.0))] * 2, [0.0, 0.03]) is None


def test_below_chance_is_flagged():
    t = pd.DataFrame({"unit": [f"u{i}" for i in range(50)], "wins": [1.0] * 10 + [0.0] * 40,
                      "trials": [1.0] * 50})
    pa = C.Evidence("pa", t)                       # PA 20%, chance 50%
    assert pa.chance_level == 0.5 and pa.range == (0.0, 1.0)
    row = C.evaluate_claim(C.ClaimSpec("k", "P", "pa", C.AtLeast("q", 0.1)), {"q": pa}, make_rng(0, "c"),
                           n_boot=50)
    assert row["flags"] == "below chance: q = 20.0% < chance 50.0%"
    above = C.Evidence("pa", t.assign(wins=[1.0] * 30 + [0.0] * 20))
    row = C.evaluate_claim(C.ClaimSpec("k", "P", "pa", C.AtLeast("q", 0.1)), {"q": above}, make_rng(0, "c"),
                           n_boot=50)
    assert row["flags"] == ""
    # a correlation's chance is 0; a statistic without a known chance is never flagged
    assert C.below_chance(["r"], [C.Evidence("mean:x", t.rename(columns={"wins": "x"}), chance=0.0)], [-0.1],
                          lambda v: f"{v:.2f}") == "below chance: r = -0.10 < chance 0.00"
    assert C.below_chance(["s"], [C.Evidence("ssr", t.assign(success=0.0))], [0.0], str) == ""


def test_seeds_enter_as_student_t_hierarchical_bootstrap():
    """Three training seeds that disagree completely (every unit wins under seed 0, loses under
    seeds 1 and 2): a units-only bootstrap sees no spread at all (every replicate is 1/3); the
    hierarchical one adds t * sd / sqrt(3), t from Student's t with 2 degrees of freedom and
    sd = std([1, 0, 0], ddof=1), so (replicate - 1/3) * sqrt(3) / sd has t_2's quartiles +-0.816."""
    units = [f"u{i}" for i in range(30)]
    t = pd.concat([pd.DataFrame({"unit": units, "seed": s, "success": float(s == 0)}) for s in (0, 1, 2)])
    ev = C.Evidence("ssr", t)
    reps = C._replicates([ev], make_rng(0, "h"), n_boot=4000)[0]
    scaled = (reps - 1 / 3) * np.sqrt(3) / np.std([1.0, 0.0, 0.0], ddof=1)
    # a quartile of 4000 t_2 draws has sampling sd ~0.03: 0.1 is over 3 sd
    assert np.quantile(scaled, [0.25, 0.5, 0.75]) == pytest.approx([-0.8165, 0.0, 0.8165], abs=0.1)
    spec = C.ClaimSpec("k", "P", "ssr above a quarter", C.AtLeast("q", 0.25))
    row = C.evaluate_claim(spec, {"q": ev}, make_rng(0, "b"), n_boot=2000)
    assert row["verdict"] == "inconclusive" and "seeds (hierarchical" in row["detail"]
    # one seed: units only (the replicate equals the brute-force unit resample)
    one = C.Evidence("ssr", t[t.seed == 0])
    assert np.all(C._replicates([one], make_rng(0, "h"), n_boot=50)[0] == 1.0)


def test_seed_draws_leave_the_shared_stream_alone():
    """The seed part comes from a spawned child generator: the unit draws of a multi-seed evidence,
    and every draw after it from the shared generator, are those of a one-seed evidence."""
    rng = make_rng(5, "s")
    units = [f"u{i}" for i in range(20)]
    vals = rng.random(60)
    t = pd.DataFrame({"unit": units * 3, "seed": np.repeat([0, 1, 2], 20), "x": vals})
    multi, single = C.Evidence("mean:x", t), C.Evidence("mean:x", t[t.seed == 0])
    r1, r2 = make_rng(1, "a"), make_rng(1, "a")
    rep_multi = C._replicates([multi], r1, n_boot=200)[0]
    rep_single = C._replicates([single], r2, n_boot=200)[0]
    assert r1.random() == r2.random()
    # the multi-seed replicate minus its seed part is the seeds' mean over the same unit resample
    counts = make_rng(1, "a").multinomial(20, np.full(20, 1 / 20), size=200)   # over the sorted units
    order = np.argsort(units)
    per_seed = np.stack([(counts @ vals[20 * s:20 * s + 20][order]) / 20 for s in range(3)], axis=1)
    noise = rep_multi - per_seed.mean(axis=1)
    np.testing.assert_allclose(rep_single, per_seed[:, 0], rtol=1e-12)
    assert np.std(noise) > 0 and abs(np.median(noise)) < 0.05


def test_seeds_paired_draw_one_t_on_the_per_seed_differences():
    """Two quantities trained with the same seeds: the seed term is one t_2 draw scaled by the sd of
    the per-seed differences. Each unit scores its seed's value, so unit resampling moves nothing
    and the replicates minus the estimate are exactly that term: seed effects shared by both sides
    (0.2 / 0.5 / 0.8) cancel, and the differences 0.10 / 0.30 / 0.20 leave sd 0.1."""
    units = [f"u{i}" for i in range(30)]

    def ev(values, seeds=(0, 1, 2)):
        return C.Evidence("mean:x", pd.concat([pd.DataFrame({"unit": units, "seed": s, "x": v})
                                               for s, v in zip(seeds, values)]))
    a, b = ev([0.3, 0.8, 1.0]), ev([0.2, 0.5, 0.8])
    assert C.seeds_paired([a, b]) and not C.seeds_paired([a, ev([0.2, 0.5, 0.8], (3, 4, 5))])
    assert not C.seeds_paired([a]) and not C.seeds_paired([a, C.Evidence("mean:x", a.table[a.table.seed == 0])])
    spec = C.ClaimSpec("k", "P", "a above b", C.Greater("a", "b"))
    row = C.evaluate_claim(spec, {"a": a, "b": b}, make_rng(0, "p"), n_boot=4000)
    assert row["estimate"] == pytest.approx(0.2) and "seeds paired" in row["detail"]
    # the 95% interval of a paired t_2: 0.2 +- 4.303 * 0.1 / sqrt(3) = [-0.048, 0.448]; a
    # percentile of 4000 draws of t_2 is uncertain by a few per cent of its value: 0.03 (~12%)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((0.2 - 0.2484, 0.2 + 0.2484), abs=0.03)
    assert row["verdict"] == "inconclusive"
    # the same numbers under other seed ids (not paired): two independent terms with sds 0.36 and
    # 0.30 -- the shared seed effect no longer cancels and the interval is far wider
    unpaired = C.evaluate_claim(spec, {"a": a, "b": ev([0.2, 0.5, 0.8], (3, 4, 5))}, make_rng(0, "p"), n_boot=4000)
    assert unpaired["ci_high"] - unpaired["ci_low"] > 2 * (row["ci_high"] - row["ci_low"])
    assert "seeds paired" not in unpaired["detail"]
    # pair_seeds=False (benchmarks/diag_seed_pairing.py, removed; git show 519cb69:benchmarks/diag_seed_pairing.py): the same seeds drawn per side, as unpaired
    per_side = C.evaluate_claim(spec, {"a": a, "b": b}, make_rng(0, "p"), n_boot=4000, pair_seeds=False)
    assert (per_side["ci_low"], per_side["ci_high"]) == (unpaired["ci_low"], unpaired["ci_high"])
    # identical per-seed differences: no seed term at all, the interval is the point
    same = C.evaluate_claim(spec, {"a": a, "b": ev([0.1, 0.6, 0.8])}, make_rng(0, "p"), n_boot=200)
    assert same["ci_low"] == pytest.approx(0.2) and same["ci_high"] == pytest.approx(0.2)


def test_a_revised_criterion_keeps_the_earlier_verdict_visible():
    z = pd.DataFrame({"unit": list("abcdef"), "x": [1.0] * 6})
    ev = {"unseen": C.Evidence("mean:x", z.assign(x=1.2)), "train": C.Evidence("mean:x", z)}
    spec = C.ClaimSpec("k", "P", "no drop", C.Greater("unseen", "train", -0.05),
                       earlier=(("v1, two-sided", C.Within("unseen", "train", 0.05)),), revision="paper: no drop")
    row = C.evaluate_claim(spec, ev, make_rng(0, "r"), n_boot=50)
    assert row["verdict"] == "holds"
    assert row["earlier_verdicts"] == "v1, two-sided: |unseen - train| <= 0.050 -> does not hold"
    assert row["revision"] == "paper: no drop"
    bad = C.ClaimSpec("k", "P", "x", C.Greater("unseen", "train"), earlier=(("v1", C.AtLeast("unseen", 0)),))
    with pytest.raises(ValueError, match="other quantities"):
        C.evaluate_claim(bad, ev, make_rng(0, "r"), n_boot=10)


def test_graded_evidence_equals_metric_to_human_and_resamples_anchors():
    """The DB++ stand-in's M-H as claims evidence (nearid.dbpp.graded_evidence): its point is
    metrics.metric_to_human's m_h (Pearson per method, Fisher-z over methods) for one seed and the
    mean of the per-seed m_h for several; a bootstrap replicate equals the statistic recomputed on
    the explicitly resampled anchors."""
    from nearid_lib.nearid.dbpp import graded_evidence

    rng = make_rng(7, "graded")
    n_anchor, methods = 12, ("context drift 1", "context drift 2", "context drift 3")
    pairs = pd.DataFrame([{"anchor_id": f"a{a:02d}", "method": m, "oracle": float(rng.random())}
                          for a in range(n_anchor) for m in methods for _ in range(4)])
    s0 = pairs.oracle.to_numpy() + rng.normal(0, 0.3, len(pairs))
    s1 = pairs.oracle.to_numpy() * 0.5 + rng.normal(0, 0.3, len(pairs))
    ref = [metrics.metric_to_human(s, pairs.oracle, pairs.method)["m_h"] for s in (s0, s1)]
    one = graded_evidence("m", pairs, [(None, s0)])["m.dbpp_proc.mh"]
    assert one.stat == "pearson_groups:3" and one.range == (-1.0, 1.0) and one.chance_level == 0.0
    assert one.point() == pytest.approx(ref[0], abs=1e-9)
    two = graded_evidence("m", pairs, [(0, s0), (1, s1)])["m.dbpp_proc.mh"]
    assert two.per_seed() == pytest.approx(ref, abs=1e-9)
    assert two.point() == pytest.approx(np.mean(ref), abs=1e-9)
    units = C._units(one)
    reps = C._replicates([one], make_rng(3, "boot"), n_boot=4)[0]
    counts = make_rng(3, "boot").multinomial(len(units), np.full(len(units), 1 / len(units)), size=4)
    for b in range(4):
        idx = [i for u, c in zip(units, counts[b]) for _ in range(int(c)) for i in np.flatnonzero(pairs.anchor_id == u)]
        sub = pairs.iloc[idx]
        assert reps[b] == pytest.approx(metrics.metric_to_human(s0[idx], sub.oracle, sub.method)["m_h"], abs=1e-9)
    with pytest.raises(ValueError, match="3 scores for 144 pairs"):
        graded_evidence("m", pairs, [(0, s0[:3])])
    with pytest.raises(KeyError, match="pearson_groups:<k>"):
        C.statistic("pearson_groups:x")


def test_pool_seeds_stacks_each_quantity_over_seeds():
    t0 = pd.DataFrame({"unit": ["a", "b", "c"], "ap": [1.0, 0.5, 0.0]})
    t1 = pd.DataFrame({"unit": ["a", "b", "c"], "ap": [0.5, 0.5, 0.5]})
    pooled = C.pool_seeds({0: {"m.ap": C.Evidence("mean:ap", t0, bounds=(0.0, 1.0))},
                           1: {"m.ap": C.Evidence("mean:ap", t1, bounds=(0.0, 1.0))}})
    ev = pooled["m.ap"]
    assert ev.seeds == [0, 1] and ev.range == (0.0, 1.0)
    assert list(ev.per_seed()) == [0.5, 0.5] and ev.point() == 0.5
    with pytest.raises(ValueError, match="different quantities"):
        C.pool_seeds({0: {"m.ap": C.Evidence("mean:ap", t0)}, 1: {"n.ap": C.Evidence("mean:ap", t1)}})


def test_each_claim_draws_from_its_own_generator():
    """evaluate_claims gives every claim a generator of its own (claim_rng: the notebook's seed and
    the claim's key): a claim's row is the same evaluated alone, after other claims or in reverse
    order, and equals evaluate_claim with claim_rng; two claims on the same evidence draw different
    replicates."""
    rng = make_rng(3, "own")
    units = [f"u{i}" for i in range(40)]
    t = pd.DataFrame({"unit": units * 3, "seed": np.repeat([0, 1, 2], 40), "x": rng.random(120)})
    ev = {"a": C.Evidence("mean:x", t), "b": C.Evidence("mean:x", t.assign(x=t.x * 0.9))}
    specs = [C.ClaimSpec("k1", "P", "a high", C.AtLeast("a", 0.5)),
             C.ClaimSpec("k2", "P", "a above b", C.Greater("a", "b", 0.0)),
             C.ClaimSpec("k3", "P", "b low", C.AtMost("b", 0.5))]
    cols = ["key", "ci_low", "ci_high", "verdict"]
    every = C.evaluate_claims(specs, ev, make_rng(0, "claims"), n_boot=300).set_index("key")
    back = C.evaluate_claims(specs[::-1], ev, make_rng(0, "claims"), n_boot=300).set_index("key")
    for s in specs:
        alone = C.evaluate_claims([s], ev, make_rng(0, "claims"), n_boot=300).iloc[0]
        direct = C.evaluate_claim(s, ev, C.claim_rng(make_rng(0, "claims"), s.key), n_boot=300)
        for c in cols[1:]:
            assert every.loc[s.key, c] == back.loc[s.key, c] == alone[c] == direct[c], (s.key, c)
    # the claims' generators differ from each other and from the notebook generator's own stream
    draws = [C.claim_rng(make_rng(0, "claims"), s.key).random() for s in specs]
    assert len(set(draws + [make_rng(0, "claims").random()])) == 4
    with pytest.raises(TypeError, match="k1"):
        C.claim_rng(np.random.Generator(np.random.RandomState(0)._bit_generator), "k1")   # legacy seeding


def test_seed_term_stays_within_a_bounded_metric():
    """A bounded metric near its ceiling (three seeds' mean AP 0.99 / 0.975 / 1.0): the t term would
    carry replicates above 1; they are clipped to the range, so the interval's upper end is 1 at most,
    while the same numbers without bounds reach above it."""
    units = [f"q{i}" for i in range(30)]
    t = pd.concat([pd.DataFrame({"unit": units, "seed": s, "ap": v}) for s, v in ((0, 0.99), (1, 0.975), (2, 1.0))])
    spec = C.ClaimSpec("k", "P", "ap high", C.AtLeast("q", 0.9))
    free = C.evaluate_claim(spec, {"q": C.Evidence("mean:ap", t)}, make_rng(0, "b"), n_boot=2000)
    bounded = C.evaluate_claim(spec, {"q": C.Evidence("mean:ap", t, bounds=(0.0, 1.0))}, make_rng(0, "b"), n_boot=2000)
    assert free["ci_high"] > 1.0 and bounded["ci_high"] == 1.0
    assert bounded["ci_low"] == pytest.approx(free["ci_low"], abs=1e-12)      # the same draws below the bound


def test_a_precondition_declared_after_a_result_keeps_the_verdict_it_replaced():
    """A regime precondition added after a result (issue 53: 3d, 3f-3i) makes the claim "not
    testable", and the interval is still computed so the verdict without it stays beside; a
    precondition declared with the claim (no ``earlier``) stops before the interval, as before."""
    z = pd.DataFrame({"unit": list("abcdefgh"), "x": [1.0, 1.1, 0.9, 1.0, 1.2, 1.0, 0.8, 1.1]})
    ev = {"a": C.Evidence("mean:x", z.assign(x=z.x + 0.5)), "b": C.Evidence("mean:x", z),
          "head": C.Evidence("mean:x", z.assign(x=0.85))}
    regime = (C.Precondition("head", ">=", 0.9, "the paper's effect is near the ceiling"),)
    test = C.Greater("a", "b", 0.0)
    later = C.ClaimSpec("k", "P", "x", test, preconditions=regime,
                        earlier=(("v1, without the regime precondition", test),), revision="issue 53")
    row = C.evaluate_claim(later, ev, make_rng(0, "r"), n_boot=200)
    assert row["verdict"] == "not testable"
    assert row["detail"].startswith("precondition head >= 0.900 fails (0.850): the paper's effect is near the ceiling; ")
    assert row["estimate"] == pytest.approx(0.5) and row["ci_low"] == pytest.approx(0.5)
    assert row["earlier_verdicts"] == "v1, without the regime precondition: a - b > 0.000 -> holds"
    assert row["revision"] == "issue 53"
    first = C.evaluate_claim(C.ClaimSpec("k", "P", "x", test, preconditions=regime), ev, make_rng(0, "r"), n_boot=200)
    assert first["verdict"] == "not testable" and "estimate" not in first and "earlier_verdicts" not in first
    ok = C.evaluate_claim(later, {**ev, "head": C.Evidence("mean:x", z.assign(x=0.95))}, make_rng(0, "r"), n_boot=200)
    assert ok["verdict"] == "holds" and ok["earlier_verdicts"].endswith("-> holds")
    # a precondition is printed in its own quantity's units (an SSR in percent beside an M-H claim)
    ssr = C.Evidence("ssr", pd.DataFrame({"unit": list("abcd"), "success": [1.0, 1.0, 0.0, 1.0]}))
    pct = C.evaluate_claim(later, {**ev, "head": ssr}, make_rng(0, "r"), n_boot=50)
    assert pct["detail"].startswith("precondition head >= 90.0% fails (75.0%)")


def test_own_questions_and_truths_by_construction_are_written_per_profile():
    """A truth by construction is a fact of the profile's world keyed by quantity
    (claims.world_facts), written into every claim that reads the quantity in that profile only."""
    from nearid_lib.claims.world_facts import COPY_PASTE

    z = pd.DataFrame({"unit": list("abcd"), "x": [1.0, 1.0, 1.0, 1.0]})
    spec = C.ClaimSpec("k", "P", "x", C.AtLeast("specialised.copy_paste.map", 0.5), own_question="not the paper's")
    ev = {"specialised.copy_paste.map": C.Evidence("mean:x", z)}
    mini = C.evaluate_claim(spec, ev, make_rng(0, "c"), n_boot=20, profile="mini")
    paper = C.evaluate_claim(spec, ev, make_rng(0, "c"), n_boot=20, profile="paper")
    assert (mini["by_construction"], paper["by_construction"]) == (COPY_PASTE, "")
    assert mini["calibrated"] == paper["calibrated"] == ""
    assert mini["own_question"] == paper["own_question"] == "not the paper's"


def _declared():
    from nearid_lib.fpr.claims import FPR_CLAIMS, _FPR2_V2
    from nearid_lib.idsim.claims import IDSIM_CLAIMS
    from nearid_lib.nearid.claims import NEARID_CLAIMS

    specs = (*NEARID_CLAIMS, *IDSIM_CLAIMS, *FPR_CLAIMS, _FPR2_V2)
    return [(s.key, t) for s in specs for t in (s.test, *(e for _, e in s.earlier))]


@pytest.mark.parametrize("fmt", [lambda v: f"{100 * v:.1f}%", lambda v: f"{v:.3f}"], ids=["percent", "decimals"])
def test_every_declared_criterion_comes_back_from_its_text(fmt):
    """The report re-decides verdicts from a claims table's ``criterion`` text (leaning verdicts):
    every declared criterion, in both formats a claims table writes, must read back as itself."""
    for key, test in _declared():
        assert C.criterion_from_text(test.criterion(fmt)) == test, key
    assert C.criterion_from_text("|a.b - c|  <= 5.0%") == C.Within("a.b", "c", 0.05)
    assert C.criterion_from_text("a - b > -5.0%") == C.Greater("a", "b", -0.05)
    with pytest.raises(ValueError, match="not a criterion"):
        C.criterion_from_text("a == b")


def test_claims_read_the_strict_pa_they_were_declared_on():
    """Claims' ``pa`` statistic is the strict pairwise rate (wins / trials of the directed margins,
    the rate claim 2c's criterion was declared on), not the authors' PA of the tables, which adds one
    trial per identity (docs/protocol.md, "PA both ways")."""
    from nearid_lib.nearid.evaluate import nearid_bench, units_from_bench

    from _nearid_cases import A, B, _split

    se = _split({"A": A, "B": B})
    nb = nearid_bench(se, ["A"], per_identity=True)
    units = units_from_bench(nb, se.ids)
    pooled = nb["pooled"]["all"]
    assert C.Evidence("pa", units).point() == pytest.approx(pooled["pa_strict"], abs=1e-12)
    assert pooled["pa"] != pytest.approx(pooled["pa_strict"])
    assert C.Evidence("ssr", units).point() == pytest.approx(pooled["ssr"], abs=1e-12)


def test_p_hold_is_the_share_of_replicates_outside_the_holding_region():
    """Each criterion's bootstrap p-value of "holds", by hand on ten replicates."""
    from nearid_lib.claims.criteria import AtLeast, AtMost, Greater, RatioAtLeast, Within

    d = np.array([-0.3, -0.1, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, np.nan])     # 9 finite
    assert AtLeast("q", 0.1).p_hold(d) == pytest.approx(3 / 9)        # -0.3, -0.1, 0.0 below 0.1
    assert AtMost("q", 0.1).p_hold(d) == pytest.approx(5 / 9)         # 0.2 .. 0.6 above
    assert Greater("a", "b", 0.0).p_hold(d) == pytest.approx(3 / 9)   # <= 0: -0.3, -0.1, 0.0
    assert RatioAtLeast("a", "b", 0.5).p_hold(d) == pytest.approx(7 / 9)
    assert Within("a", "b", 0.35).p_hold(d) == pytest.approx(max(0, 3) / 9)   # TOST: 0.4, 0.5, 0.6 above
    assert np.isnan(AtLeast("q", 0.0).p_hold([np.nan]))


def test_holm_stops_at_the_first_p_value_over_its_level():
    from nearid_lib.stats import holm_reject

    # sorted 0.005 <= 0.05/4, 0.01 <= 0.05/3, 0.03 > 0.05/2: stop; 0.04 is not reached
    assert holm_reject([0.01, 0.04, 0.03, 0.005], 0.05) == [True, False, False, True]
    assert holm_reject([0.001, float("nan")], 0.05) == [True, False]      # NaN counts in m, never rejected
    assert holm_reject([], 0.05) == []


def test_the_report_gives_holm_beside_each_counted_holds():
    """A counted "holds" whose p-value does not survive Holm over the counted tests reads so, and the
    summary says how many "holds" chance alone would give."""
    from nearid_lib.claims.report_section import holm_column, summary_lines

    frame = pd.DataFrame({"key": ["a", "b", "c"], "claim": ["a", "b", "c"], "verdict": ["holds", "holds", "inconclusive"],
                          "p_hold": [0.001, 0.02, 0.3], "evidence": "", "criterion": "x >= 0", "ours": ""})
    tested = pd.Series([True, True, True])
    assert holm_column(frame, tested).tolist() == ["holds", "not after Holm", ""]   # 0.02 > 0.025 / 2
    text = " ".join(summary_lines(frame))
    assert "about 0.1 \"holds\" would be expected by chance alone" in text
    assert "1 of the 2 \"holds\" remain" in text


def test_an_interval_end_within_its_monte_carlo_noise_of_the_criterion_is_a_tie():
    """2d-like: a lower end 0.04997 against ">= 0.05" with the end's Monte Carlo noise 0.001 is a tie,
    not counted; the same end at 0.2 is a verdict. The noise of a quantile, by the normal case:
    sqrt(q (1 - q) / n) / phi(z_q), 0.0267 for q = 2.5% of 10,000 standard normal replicates."""
    from nearid_lib.claims import quantile_mc_se
    from nearid_lib.claims.report_section import not_counted, ties

    se = quantile_mc_se(np.random.default_rng(0).standard_normal(10_000), 0.025)
    assert se == pytest.approx(np.sqrt(0.025 * 0.975 / 10_000) / 0.05844, rel=0.2)
    assert np.isnan(quantile_mc_se(np.ones(50), 0.025))
    frame = pd.DataFrame({"key": ["2d", "2x"], "claim": ["a", "b"], "verdict": ["inconclusive", "holds"],
                          "criterion": ["q >= 5.0%", "q >= 5.0%"], "estimate": [0.3, 0.4],
                          "ci_low": [0.04997, 0.2], "ci_high": [0.6, 0.6],
                          "ci_low_mc_se": [0.001, 0.001], "ci_high_mc_se": [0.002, 0.002]})
    assert ties(frame).tolist() == [True, False]
    assert not_counted(frame.assign(chance="")).tolist() == ["tie", ""]
