"""NearID Tables 1, 5, 7 from hand-built encoder results: keys of paper_values/, support-weighted pooling."""
from __future__ import annotations

import pandas as pd
import pytest

from nearid_lib.nearid.evaluate import source_groups
from nearid_lib.nearid.tables import table1, table5, table7

from _nearid_cases import PV, _expected_B, _result


def test_table_builders_keys_and_values():
    groups = source_groups(["A", "B"], ["A"])
    assert groups == {"training": ["A"], "unseen_fill": ["B"], "main": ["A", "B"], "all": ["A", "B"]}
    res = [_result("efficientnet-lite0", "EfficientNet-Lite0 GAP (frozen)"),
           _result("nearid", "NearID head", fg_shift=1.0)]
    t1 = table1(res, groups, "mini")
    ssr_b, pa_b, tr_b = _expected_B()
    # pooled over A and B, support-weighted: SSR by identities (4 + 4), PA by trials (16 + 16)
    assert t1["nearid_ssr"].iloc[0] == pytest.approx((100 + ssr_b) / 2)
    assert t1["nearid_pa"].iloc[0] == pytest.approx((100 * 16 + pa_b * tr_b) / (16 + tr_b))
    assert list(t1["row"]) == ["SigLIP2", "NearID (Ours)"]
    assert (t1["profile"] == "mini").all() and t1["dbpp_mh"].isna().all()
    assert t1["mtg_pa"].iloc[0] == 50.0 and t1["mtg_mo"].iloc[0] == 0.2
    paper1 = pd.read_csv(PV / "nearid_table1_main.csv")
    assert set(t1["row"]) <= set(paper1["row"])
    assert {c for c in paper1.columns if c.startswith(("nearid_", "mtg_", "dbpp_"))} <= set(t1.columns)

    t5 = table5(res, groups, "mini")
    paper5 = pd.read_csv(PV / "nearid_table5_per_source.csv")
    grp_rows = t5[t5["group"].str.startswith("avg_")]
    assert set(grp_rows["source"]) <= set(paper5["source"])
    assert set(t5["method"]) <= set(paper5["method"])
    b = t5[(t5["source"] == "B") & (t5["method"] == "SigLIP2")].iloc[0]
    assert b["ssr"] == pytest.approx(ssr_b) and not b["training_source"] and b["group"] == "unseen_fill"
    un = t5[(t5["group"] == "avg_unseen_fill") & (t5["method"] == "SigLIP2")].iloc[0]
    assert un["ssr"] == pytest.approx(ssr_b) and un["source"] == "Avg. (unseen fill, 3)"

    t7 = table7(res, groups, "mini")
    paper7 = pd.read_csv(PV / "nearid_table7_fg_only.csv")
    assert set(t7["method"]) <= set(paper7["method"])
    fro = t7.iloc[0]
    assert fro["fg_ssr"] == 100.0 and fro["delta_ssr"] == pytest.approx(100 - (100 + ssr_b) / 2)
    assert fro["delta_mo"] == pytest.approx(0.2)
    assert t7.iloc[1]["delta_ssr"] == pytest.approx(0.0)
