"""Sensitivity regression vs numpy lstsq and hand cases; bootstrap vs scipy.stats.bootstrap."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import bootstrap

from nearid_lib import stats as S


def _grid(anchor, b0, b1, b2, noise, rng, levels=(0, .25, .5, .75, 1.0)):
    rows = []
    for f in levels:
        for i in levels:
            rows.append({"anchor_id": anchor, "factor_change": f, "identity_change": i,
                         "sim": b0 + b1 * f + b2 * i + noise * rng.normal()})
    return rows


def test_sensitivity_ols_exact_and_vs_lstsq():
    rng = np.random.default_rng(0)
    # exact plane: recovers coefficients, R^2 = 1; sensitivity = -slope
    df = pd.DataFrame(_grid("a", 0.9, -0.1, -0.6, 0.0, rng))
    r = S.sensitivity_ols(df).iloc[0]
    assert r.b0 == pytest.approx(0.9) and r.sens_factor == pytest.approx(0.1)
    assert r.sens_identity == pytest.approx(0.6) and r.r2 == pytest.approx(1.0) and r.n == 25
    # noisy, several anchors and an encoder column: vs numpy least squares and explicit R^2
    rows = []
    for enc in ("e1", "e2"):
        for k in range(4):
            for row in _grid(f"x{k}", rng.uniform(.5, 1), -rng.uniform(0, .3), -rng.uniform(0, .8), .05, rng):
                rows.append({**row, "encoder": enc})
    df = pd.DataFrame(rows)
    out = S.sensitivity_ols(df, by=["encoder"])
    assert len(out) == 8 and list(out.columns[:2]) == ["encoder", "anchor_id"]
    for _, o in out.iterrows():
        g = df[(df.encoder == o.encoder) & (df.anchor_id == o.anchor_id)]
        X = np.column_stack([np.ones(len(g)), g.factor_change, g.identity_change])
        beta, *_ = np.linalg.lstsq(X, g.sim.to_numpy(), rcond=None)
        resid = g.sim.to_numpy() - X @ beta
        r2 = 1 - (resid ** 2).sum() / ((g.sim - g.sim.mean()) ** 2).sum()
        np.testing.assert_allclose([o.b0, o.b_factor, o.b_identity], beta, atol=1e-10)
        assert o.r2 == pytest.approx(r2, abs=1e-10)


def test_sensitivity_ols_errors():
    rng = np.random.default_rng(1)
    df = pd.DataFrame(_grid("a", 1, -.1, -.5, .0, rng))
    with pytest.raises(ValueError, match="missing columns"):
        S.sensitivity_ols(df.drop(columns="sim"))
    bad = df.copy(); bad.loc[3, "sim"] = np.nan
    with pytest.raises(ValueError, match="non-finite 'sim' at rows \\[3\\]"):
        S.sensitivity_ols(bad)
    col = df.copy(); col["factor_change"] = col["identity_change"]  # collinear grid
    with pytest.raises(ValueError, match="anchor 'a'.*rank-deficient"):
        S.sensitivity_ols(col)


def test_bootstrap_mean_ci_identical_to_scipy_percentile():
    # same seed -> same Generator stream -> same resample indices as scipy's percentile method,
    # so the whole bootstrap distribution, interval and standard error must agree to rounding.
    x = np.random.default_rng(2).normal(0.3, 1.0, size=37)
    ours = S.bootstrap_mean_ci(x, n_boot=1000, rng=np.random.default_rng(123), return_distribution=True)
    ref = bootstrap((x,), np.mean, n_resamples=1000, method="percentile", vectorized=True,
                    rng=np.random.default_rng(123))
    np.testing.assert_allclose(ours["distribution"], ref.bootstrap_distribution, rtol=0, atol=1e-14)
    assert ours["low"] == pytest.approx(ref.confidence_interval.low, abs=1e-14)
    assert ours["high"] == pytest.approx(ref.confidence_interval.high, abs=1e-14)
    assert ours["std"] == pytest.approx(ref.standard_error, abs=1e-14)
    assert ours["estimate"] == pytest.approx(x.mean()) and ours["n"] == 37
    # a different seed gives a different interval (the test is sensitive to the draw)
    other = S.bootstrap_mean_ci(x, n_boot=1000, rng=np.random.default_rng(124))
    assert other["low"] != ours["low"]
    # coverage sanity: the interval brackets the sample mean and is ~ mean +- 1.96 * sem
    sem = x.std(ddof=1) / np.sqrt(x.size)
    assert ours["low"] < x.mean() < ours["high"]
    assert (ours["high"] - ours["low"]) == pytest.approx(2 * 1.96 * sem, rel=0.2)


def test_bootstrap_mean_ci_errors_and_degenerate():
    with pytest.raises(TypeError, match="Generator"):
        S.bootstrap_mean_ci([1.0, 2.0], rng=None)
    with pytest.raises(ValueError, match="non-finite"):
        S.bootstrap_mean_ci([1.0, np.nan], rng=np.random.default_rng(0))
    r = S.bootstrap_mean_ci([2.0, 2.0, 2.0], n_boot=50, rng=np.random.default_rng(0))
    assert (r["mean"], r["std"], r["low"], r["high"]) == (2.0, 0.0, 2.0, 2.0)


def test_bootstrap_columns_shares_resamples_and_matches_single():
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"g": ["a"] * 20 + ["b"] * 15, "u": rng.normal(size=35), "v": rng.normal(size=35)})
    out = S.bootstrap_columns(df, ["u", "v"], n_boot=300, rng=np.random.default_rng(7), by=["g"])
    assert list(out.column) == ["u", "v", "u", "v"] and list(out.g) == ["a", "a", "b", "b"]
    # the first group with the same seed equals bootstrap_mean_ci on that column
    single = S.bootstrap_mean_ci(df.u[:20], n_boot=300, rng=np.random.default_rng(7))
    row = out.iloc[0]
    assert (row["low"], row["high"], row["std"]) == pytest.approx((single["low"], single["high"], single["std"]))


def test_bootstrap_ssr_pa_vs_loop():
    wins = np.array([6, 5, 0, 3, 1, 6])
    trials = np.array([6, 6, 0, 3, 2, 6])      # identity 2 has no trial -> dropped
    r = S.bootstrap_ssr_pa(wins, trials, n_boot=200, rng=np.random.default_rng(4))
    assert r["ssr"]["estimate"] == pytest.approx(3 / 5)
    assert r["pa"]["estimate"] == pytest.approx(21 / 23)
    assert r["ssr"]["n"] == 5
    # slow reference with the same index stream
    idx = np.random.default_rng(4).integers(0, 5, size=(200, 5))
    w, t = wins[trials > 0], trials[trials > 0]
    ssr_d = [np.mean([w[i] == t[i] for i in row]) for row in idx]
    pa_d = [sum(w[i] for i in row) / sum(t[i] for i in row) for row in idx]
    assert r["ssr"]["low"] == pytest.approx(np.percentile(ssr_d, 2.5))
    assert r["pa"]["high"] == pytest.approx(np.percentile(pa_d, 97.5))
    assert r["pa"]["mean"] == pytest.approx(np.mean(pa_d))
    with pytest.raises(ValueError, match="wins <= trials"):
        S.bootstrap_ssr_pa([3], [2], rng=np.random.default_rng(0))
