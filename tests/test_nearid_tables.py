"""NearID Tables 1, 5, 7 from hand-built encoder results: keys of paper_values/, support-weighted pooling."""
from __future__ import annotations

import pandas as pd
import pytest

from nearid_lib.nearid.evaluate import source_groups
from nearid_lib.nearid.tables import FROZEN_SOURCE_RANGE, source_range_check, table1, table5, table7

from _nearid_cases import PV, _expected_B, _result


def test_table_builders_keys_and_values():
    groups = source_groups(["A", "B"], ["A"])
    assert groups == {"training": ["A"], "unseen_fill": ["B"], "main": ["A", "B"], "all": ["A", "B"]}
    res = [_result("efficientnet-lite0", "EfficientNet-Lite0 GAP (frozen)"),
           _result("nearid", "NearID head", fg_shift=1.0)]
    t1 = table1(res, groups, "mini")
    ssr_b, pa_b, tr_b = _expected_B()
    # pooled over A and B, support-weighted: SSR by identities (4 + 4), PA by trials (16 + 16);
    # the authors' PA adds one trial per identity to each source (A: 4 won; B: 4 won, every mean
    # margin of B is positive), the strict rate stays beside it
    assert t1["nearid_ssr"].iloc[0] == pytest.approx((100 + ssr_b) / 2)
    assert t1["nearid_pa_strict"].iloc[0] == pytest.approx((100 * 16 + pa_b * tr_b) / (16 + tr_b))
    assert t1["nearid_pa"].iloc[0] == pytest.approx(100 * (16 + 4 + pa_b / 100 * tr_b + 4) / (16 + 4 + tr_b + 4))
    assert t1["n_pa_trials"].iloc[0] == 16 + 4 + tr_b + 4
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
    assert b["pa_strict"] == pytest.approx(pa_b) and b["pa"] == pytest.approx(100 * (pa_b / 100 * tr_b + 4) / (tr_b + 4))
    un = t5[(t5["group"] == "avg_unseen_fill") & (t5["method"] == "SigLIP2")].iloc[0]
    assert un["ssr"] == pytest.approx(ssr_b) and un["source"] == "Avg. (unseen fill, 3)"

    t7 = table7(res, groups, "mini")
    paper7 = pd.read_csv(PV / "nearid_table7_fg_only.csv")
    assert set(t7["method"]) <= set(paper7["method"])
    fro = t7.iloc[0]
    assert fro["fg_ssr"] == 100.0 and fro["delta_ssr"] == pytest.approx(100 - (100 + ssr_b) / 2)
    assert fro["full_pa"] == t1["nearid_pa"].iloc[0] and fro["full_pa_strict"] == t1["nearid_pa_strict"].iloc[0]
    assert fro["delta_mo"] == pytest.approx(0.2)
    assert t7.iloc[1]["delta_ssr"] == pytest.approx(0.0)


def test_siglip2_row_reads_out_as_the_authors_compose_it_and_the_split_is_stated():
    """The frozen SigLIP2 row of Table 1: NearID/MTG through its MAP head, DB++ through the mean of
    its patch tokens (the authors' guide); the mean-pooled row stays whole. On a split that is not
    the authors', every row says so and the released-weights row is flagged."""
    from nearid_lib.data.splits import RULE_NOTE
    from nearid_lib.nearid.evaluate import EncoderResult, nearid_bench

    from _nearid_cases import A, _split

    nb = nearid_bench(_split({"A": A}), ["A"])

    def res(name, mh):
        return EncoderResult(name, f"label {name}", nearid={"full": nb}, mtg={"full": None},
                             dbpp={"kind": "human", "m_h": mh, "m_h_all4": mh - 0.1, "m_h_category": "object"})

    rs = [res("siglip2-so400m-patch14-384", 0.489), res("siglip2-so400m-patch14-384-meanpool", 0.515),
          res("nearid-release", 0.545)]
    t = table1(rs, {"main": ["A"]}, "paper").set_index("row")
    assert t.loc["SigLIP2", "dbpp_mh"] == 0.515 and t.loc["SigLIP2", "dbpp_mh_maphead"] == 0.489
    assert t.loc["SigLIP2", "dbpp_mh_all4"] == pytest.approx(0.415)
    assert "mean of the patch tokens" in t.loc["SigLIP2", "dbpp_note"]
    assert t.loc["SigLIP2 (mean-pooled)", "dbpp_mh"] == 0.515
    assert t.loc["SigLIP2", "nearid_ssr"] == t.loc["SigLIP2 (mean-pooled)", "nearid_ssr"]   # same tiny case
    assert "split" not in t.columns                     # no split record (the procedural world)
    official = table1(rs, {"main": ["A"]}, "paper", split={"source": "split column", "official": True})
    assert set(official["split"]) == {"official (split column)"} and "flag" not in official.columns
    ours = table1(rs, {"main": ["A"]}, "paper",
                  split={"source": "rule", "official": False, "note": RULE_NOTE}).set_index("row")
    assert ours["split"].str.startswith("not the authors'").all()
    assert ours["flag"].notna().tolist() == [False, False, True]
    assert "released weights' training data" in ours.loc["NearID, released weights", "flag"]
    alone = table1(rs[:1], {"main": ["A"]}, "paper")              # one readout only: nothing composed
    assert alone.loc[0, "dbpp_mh"] == 0.489 and "dbpp_mh_maphead" not in alone.columns


def test_siglip2_mean_readout_is_the_mean_of_its_tokens():
    import torch

    from nearid_lib.models import load_encoder

    mean, _ = load_encoder("siglip2-so400m-patch14-384-meanpool", tiny=True)
    mapped, _ = load_encoder("siglip2-so400m-patch14-384", tiny=True)
    x = torch.randn(2, 3, mean.image_size, mean.image_size, generator=torch.Generator().manual_seed(0))
    a, b = mean(x), mapped(x)
    torch.testing.assert_close(a.tokens, b.tokens, rtol=0, atol=0)      # the same tower (same init seed)
    torch.testing.assert_close(a.pooled, a.tokens.mean(dim=1), rtol=0, atol=0)
    assert not torch.allclose(b.pooled, a.pooled)


def test_source_range_check_flags_sources_outside_the_papers_frozen_range():
    """NearID E.4: the paper's frozen baselines span SSR 12-67% across sources. Hand-made Table 5
    rows: the bounds are inclusive, a source outside is flagged, `apart` is listed but not judged,
    other methods and the average rows are left out."""
    assert FROZEN_SOURCE_RANGE == (12.0, 67.0)
    rows = [("a", "training", "SigLIP2", 12.0), ("b", "unseen_fill", "SigLIP2", 67.0),
            ("c", "unseen_fill", "SigLIP2", 79.3), ("d", "unseen_canny", "SigLIP2", 11.9),
            ("h", "apart", "SigLIP2", 3.3), ("Avg. (all 9)", "avg_all", "SigLIP2", 90.0),
            ("a", "training", "NearID (Ours)", 99.0)]
    t5 = pd.DataFrame([{"source": s, "group": g, "method": m, "ours_label": m, "ssr": v} for s, g, m, v in rows])
    out = source_range_check(t5)
    assert out["source"].tolist() == ["a", "b", "c", "d", "h"]
    assert out["inside"].tolist() == [True, True, False, False, None]
    assert out["frozen_ssr"].tolist() == [12.0, 67.0, 79.3, 11.9, 3.3]
    with pytest.raises(ValueError, match="no per-source row of method 'VSM'"):
        source_range_check(t5, method="VSM")
