"""NearID's claim declarations: paper references resolve, names follow the evidence naming, every
claim is evaluated by exactly one notebook, and a hand-built case gets the verdicts it must."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from nearid_lib.claims import evaluate_claims, paper_value
from nearid_lib.nearid.claims import CLAIMS_BY_NOTEBOOK, NEARID_CLAIMS
from nearid_lib.nearid.evaluate import nearid_evidence, unit_outcomes

from _nearid_cases import A, B, PV, _split

QUANTITY = re.compile(r"^(frozen|nearid|loss\.\w+|alpha\.\d+\.\d+|beta\.\d+\.\d+|data\.\w+)"
                      r"\.((full|fg)\.(main|train|unseen_fill|structure|all)\.(ssr|pa)|mtg\.(ssr|pa|mo|mopair)|dbpp_proc\.mh)$")


def _quantities(spec):
    return list(spec.test.quantities)


def test_every_paper_reference_resolves_to_one_number():
    for spec in NEARID_CLAIMS:
        assert spec.paper_refs, spec.key
        vals = [paper_value(r, PV) for r in spec.paper_refs]
        assert all(np.isfinite(vals)), spec.key
        spec.paper_text.format(*vals)          # the text has a slot per reference


def test_keys_unique_and_every_claim_has_one_notebook():
    keys = [s.key for s in NEARID_CLAIMS]
    assert len(keys) == len(set(keys))
    listed = [k for ks in CLAIMS_BY_NOTEBOOK.values() for k in ks]
    assert sorted(listed) == sorted(keys)


def test_quantities_follow_the_evidence_naming():
    for spec in NEARID_CLAIMS:
        qs = _quantities(spec)
        assert qs, spec.key
        for q in qs + [p.q for p in spec.preconditions]:
            assert QUANTITY.match(q), (spec.key, q)


def _units(angles, seed=0):
    return unit_outcomes(_split(angles)).assign(seed=seed)


def _evidence(reps: int):
    ev = {}
    for pref, ang in (("frozen", {"A": A, "B": B}), ("nearid", {"A": A, "B": A})):
        t = _units(ang)
        t = pd.concat([t.assign(unit=t["unit"] + f"_{r}") for r in range(reps)], ignore_index=True)
        ev.update(nearid_evidence(pref, {"full": t}, None, ["A", "B"], ["A"]))
    return ev


def test_hand_case_verdicts():
    """Frozen: source B fools three of the four identities (SSR over A and B: 5 of 8 = 62.5%); the
    "head": every distractor far (100%). On 4 identities the bootstrap interval of "frozen SSR <= 50%"
    (1a) is wide (a resample of the fooled identities reaches 0%): undecided. "head > frozen" (2a) is
    paired: no identity loses and three gain, so only the all-id1 resample (p = 4^-4) gives 0: it
    holds. On the identities replicated 20 times 1a's interval narrows and it does not hold."""
    keys = ["nearid.1a", "nearid.2a", "nearid.2b"]
    small = evaluate_claims(NEARID_CLAIMS, _evidence(1), np.random.default_rng(0), n_boot=500,
                            keys=keys).set_index("key")
    assert np.isclose(small.loc["nearid.1a", "estimate"], 0.625)
    assert np.isclose(small.loc["nearid.2a", "estimate"], 0.375)
    assert small.loc["nearid.1a", "verdict"] == "inconclusive"
    assert small.loc["nearid.2a", "verdict"] == "holds"
    assert small.loc["nearid.2b", "verdict"] == "holds"          # 100% SSR, interval [1, 1]
    big = evaluate_claims(NEARID_CLAIMS, _evidence(20), np.random.default_rng(0), n_boot=500,
                          keys=keys).set_index("key")
    assert big.loc["nearid.1a", "verdict"] == "does not hold"
    assert big.loc["nearid.2a", "verdict"] == "holds"
    assert big.loc["nearid.1a", "ci_high"] - big.loc["nearid.1a", "ci_low"] < \
        small.loc["nearid.1a", "ci_high"] - small.loc["nearid.1a", "ci_low"]


def test_missing_evidence_is_not_testable():
    out = evaluate_claims(NEARID_CLAIMS, {}, np.random.default_rng(0), n_boot=10, keys=["nearid.6a"])
    assert out["verdict"].iloc[0] == "not testable"
