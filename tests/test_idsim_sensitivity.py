"""Sensitivity pipeline on a synthetic grid with known slopes."""
import numpy as np
import pandas as pd
import pytest
from scipy import stats as sst

from nearid_lib.claims import ClaimSpec, Greater, evaluate_claims
from nearid_lib.idsim.claims import sensitivity_evidence
from nearid_lib.idsim.sensitivity import (GRIDS, grid_similarities, per_anchor_sensitivity,
                                          sensitivity_summary, similarity_curves)

L = 4


def _synthetic(n_anchors=12, seed=0):
    """Grids whose similarity to the anchor is exactly 1 - s_f*f - s_i*i (+ small noise), encoded as
    2-d unit vectors at angle arccos(sim) so that cosine similarity recovers it."""
    rng = np.random.default_rng(seed)
    rows, emb, truth = [], {"enc": {}}, []
    for a in range(n_anchors):
        s_i = 0.3 + 0.05 * rng.normal()
        s_f = {"background": 0.05, "viewpoint": 0.1, "lighting": 0.02}
        truth.append({"anchor_id": f"a{a}", "identity": s_i, **s_f})
        for grid in GRIDS:
            for il in range(L):
                for fl in range(L):
                    i, f = il / (L - 1), fl / (L - 1)
                    sim = 1 - s_i * i - s_f[grid] * f - (0.0 if il == fl == 0 else 0.002 * rng.normal())
                    path = f"g/{a}_{grid}_{il}_{fl}.png"
                    rows.append({"anchor_id": f"a{a}", "split": "test", "grid": grid, "identity_level": il,
                                 "factor_level": fl, "identity_change": i, "factor_change": f, "path": path,
                                 "mask": ""})
                    th = np.arccos(np.clip(sim, -1, 1))
                    emb["enc"][path] = np.array([np.cos(th), np.sin(th)]) * (1 + il)   # norm irrelevant
    return pd.DataFrame(rows), emb, pd.DataFrame(truth)


def test_recovers_known_slopes():
    grids, emb, truth = _synthetic()
    sims = grid_similarities(grids, emb)
    assert len(sims) == len(grids)
    fits, wide = per_anchor_sensitivity(sims)
    assert len(fits) == 12 * 3 and (fits.r2 > 0.99).all()
    m = wide.merge(truth, on="anchor_id", suffixes=("", "_true"))
    for f in ("identity", "background", "viewpoint", "lighting"):
        np.testing.assert_allclose(m[f], m[f + "_true"], atol=0.01)
    summ = sensitivity_summary(wide, 1000, np.random.default_rng(0))
    s = summ.set_index("factor")
    assert set(s.index) == {"identity", "background", "viewpoint", "lighting"}
    assert abs(s.loc["viewpoint", "estimate"] - 0.1) < 0.005
    assert s.loc["identity", "low"] <= truth.identity.mean() <= s.loc["identity", "high"]
    # the identity interval equals scipy's percentile bootstrap on the same resamples
    res = sst.bootstrap((wide.identity.to_numpy(),), np.mean, n_resamples=1000, method="percentile",
                        vectorized=True, rng=np.random.default_rng(0))
    # bootstrap_columns draws one index matrix for all columns, identical to scipy's single draw
    assert np.isclose(res.confidence_interval.low, s.loc["identity", "low"])
    assert np.isclose(res.confidence_interval.high, s.loc["identity", "high"])


def test_curves_and_separation():
    grids, emb, _ = _synthetic(6)
    emb["flat"] = {k: np.array([1.0, 0.0]) + 1e-3 * np.random.default_rng(len(k)).normal(size=2) for k in emb["enc"]}
    sims = grid_similarities(grids, emb)
    cur = similarity_curves(sims)
    c = cur[(cur.encoder == "enc") & (cur.factor == "identity")].sort_values("level")
    assert np.all(np.diff(c.sim_mean) < 0) and np.isclose(c.sim_mean.iloc[0], 1.0)
    _, wide = per_anchor_sensitivity(sims)
    summ = sensitivity_summary(wide, 200, np.random.default_rng(1))
    ix = summ.set_index(["encoder", "factor"])
    assert ix.loc[("enc", "identity"), "low"] > ix.loc[("flat", "identity"), "high"]
    # the claim machinery on this evidence: "enc" is more identity-sensitive than "flat" (paired)
    spec = ClaimSpec("s", "ID-Sim", "enc > flat", Greater("enc.sens.identity", "flat.sens.identity", 0.0))
    out = evaluate_claims((spec,), sensitivity_evidence(wide), np.random.default_rng(1), n_boot=200)
    assert out.verdict[0] == "holds"
    assert out.estimate[0] == pytest.approx(ix.loc[("enc", "identity"), "estimate"] - ix.loc[("flat", "identity"), "estimate"])


def test_missing_anchor_image_is_an_error():
    grids, emb, _ = _synthetic(2)
    bad = grids[~((grids.anchor_id == "a1") & (grids.grid == "viewpoint") & (grids.identity_level == 0)
                  & (grids.factor_level == 0))]
    with pytest.raises(ValueError, match="a1.*viewpoint"):
        grid_similarities(bad, emb)


def test_run_sensitivity_is_the_three_steps_with_one_rng():
    """run_sensitivity (notebook 10 and score_encoder) gives what the three steps give by hand."""
    from nearid_lib.idsim.sensitivity import run_sensitivity

    grids, emb, _ = _synthetic(n_anchors=6, seed=3)
    res = run_sensitivity(grids, emb, 200, np.random.default_rng(7))
    sims = grid_similarities(grids, emb)
    fits, wide = per_anchor_sensitivity(sims)
    pd.testing.assert_frame_equal(res.sims, sims)
    pd.testing.assert_frame_equal(res.fits, fits)
    pd.testing.assert_frame_equal(res.wide, wide)
    pd.testing.assert_frame_equal(res.summary, sensitivity_summary(wide, 200, np.random.default_rng(7)))
    other = run_sensitivity(grids, emb, 200, np.random.default_rng(8)).summary
    assert not np.allclose(other["low"], res.summary["low"])          # the rng is the one passed


def test_seeded_encoder_is_the_mean_of_its_seeds_and_its_evidence_keeps_them():
    """A model trained with several seeds (notebook 10's ID-Sim): each seed is regressed on its own
    (per_seed, fits with a seed column), its row of wide is the per-anchor mean over seeds, the
    other encoders and their bootstrap draws are those of an unseeded run, and its claims evidence
    has one row per seed and anchor (the claims average the seeds and resample them)."""
    from nearid_lib.idsim.sensitivity import run_sensitivity

    grids, emb0, _ = _synthetic(n_anchors=6, seed=3)
    _, emb1, _ = _synthetic(n_anchors=6, seed=4)
    frozen = {"frozen": emb0["enc"]}
    one = run_sensitivity(grids, frozen, 100, np.random.default_rng(7), seeded={"model": {0: emb0["enc"]}})
    plain = run_sensitivity(grids, {**frozen, "model": emb0["enc"]}, 100, np.random.default_rng(7))
    pd.testing.assert_frame_equal(one.wide, plain.wide)              # one seed: the unseeded run
    pd.testing.assert_frame_equal(one.summary, plain.summary)
    res = run_sensitivity(grids, frozen, 100, np.random.default_rng(7), seeded={"model": {5: emb0["enc"], 6: emb1["enc"]}})
    assert sorted(res.per_seed.seed.unique()) == [5, 6] and len(res.per_seed) == 12
    by_hand = res.per_seed.groupby("anchor_id")[list(GRIDS) + ["identity"]].mean()
    got = res.wide[res.wide.encoder == "model"].set_index("anchor_id")[list(GRIDS) + ["identity"]]
    pd.testing.assert_frame_equal(got, by_hand, check_exact=False, rtol=1e-12)
    pd.testing.assert_frame_equal(res.summary[res.summary.encoder == "frozen"].reset_index(drop=True),
                                  plain.summary[plain.summary.encoder == "frozen"].reset_index(drop=True))
    assert set(res.fits[res.fits.encoder == "model"].seed) == {5, 6}
    ev = sensitivity_evidence(res.wide, per_seed=res.per_seed)
    assert ev["model.sens.identity"].seeds == [5, 6] and "seed" not in ev["frozen.sens.identity"].table
    assert ev["model.sens.identity"].point() == pytest.approx(got.identity.mean(), abs=1e-12)
    with pytest.raises(ValueError, match="both in emb and in seeded"):
        run_sensitivity(grids, {"model": emb0["enc"]}, 10, np.random.default_rng(0), seeded={"model": {0: emb0["enc"]}})
