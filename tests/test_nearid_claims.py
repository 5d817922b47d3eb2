"""NearID claims 1, 2 and 4 are computed from the tables (thresholds move the verdicts)."""
from __future__ import annotations

from nearid_lib.nearid.claims import nearid_claims
from nearid_lib.nearid.evaluate import source_groups
from nearid_lib.nearid.tables import table1, table5, table7

from _nearid_cases import _result



def test_claims_are_computed():
    groups = source_groups(["A", "B"], ["A"])
    res = [_result("efficientnet-lite0", "frozen"), _result("nearid", "head", fg_shift=1.0)]
    t1, t5, t7 = (table1(res, groups, "mini"), table5(res, groups, "mini"),
                  table7(res, groups, "mini"))
    cl = {c["claim"][:2]: c for c in nearid_claims(t1, t5, t7, "mini")}
    # frozen full SSR 62.5% > 50%: claim 1 fails; the head is the same geometry: 2a fails, 2b holds
    assert not cl["1."]["holds"] and not cl["2a"]["holds"] and cl["2b"]["holds"]
    assert not cl["2c"]["holds"] and not cl["4."]["holds"]     # unseen SSR 25%; MTG SSR 0 = 0
    assert "62.5%" in cl["1."]["ours"]
    cl2 = {c["claim"][:2]: c for c in nearid_claims(t1, t5, t7, "mini", low_ssr=70, fg_gain=30)}
    assert cl2["1."]["holds"]
