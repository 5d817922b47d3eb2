"""The procedural DreamBench++ stand-in: grid pairs, metric-to-oracle, and its labelling in every table."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from nearid_lib.nearid.dbpp import PROCEDURAL_NOTE, dbpp_standin
from nearid_lib.nearid.evaluate import EncoderResult, nearid_bench
from nearid_lib.nearid.pairs import grid_pairs
from nearid_lib.nearid.scorers import CosinePairScorer, PairBenchEncoder
from nearid_lib.nearid.tables import fig4_dbpp_category, table1, table2_dbpp

from _nearid_cases import A, _split


def test_procedural_dbpp_standin():
    g = []
    for a in ("g0", "g1", "g2"):
        for grid in ("background", "lighting"):
            for il in range(3):
                for fl in range(3):
                    g.append({"anchor_id": a, "split": "test", "grid": grid, "identity_level": il,
                              "factor_level": fl, "identity_change": il / 2, "factor_change": fl / 2,
                              "path": f"{a}/{grid}_{il}_{fl}", "mask": "m"})
    data = SimpleNamespace(grids=pd.DataFrame(g))
    gp = grid_pairs(data, "test")
    assert len(gp) == 3 * 2 * 8 and set(gp["category"]) == {"background", "lighting"}
    assert gp["oracle"].between(0, 1).all() and not gp["img"].eq(gp["ref"]).any()
    # an encoder whose cosine to the reference (identity level 0, at angle 0) is exactly the oracle
    look = {r.path: np.array([1 - r.identity_change, np.sqrt(1 - (1 - r.identity_change) ** 2)])
            for r in data.grids.itertuples()}
    benc = PairBenchEncoder(CosinePairScorer(look), "nearid", load_images=False)
    mh, s = dbpp_standin(benc, None, gp)
    np.testing.assert_allclose(s, gp["oracle"], atol=1e-12)
    # every per-method r is 1; the Fisher-z mean clips r at 0.999
    assert mh["kind"] == "procedural" and mh["m_h"] == pytest.approx(0.999, abs=1e-9)
    assert np.allclose(mh["per_method"]["r"], 1.0)
    res = [EncoderResult("nearid", "head", dbpp=mh), EncoderResult("efficientnet-lite0", "frozen", dbpp=mh)]
    t2 = table2_dbpp(res, "mini")
    assert t2["method"].str.startswith("[procedural]").all()
    assert (t2["rating"] == PROCEDURAL_NOTE).all() and "not human" in PROCEDURAL_NOTE
    assert t2["nearid_h"].iloc[-1] == pytest.approx(0.999) and t2["nearid_h"].iloc[0] == pytest.approx(1.0)
    f4 = fig4_dbpp_category(res, "mini")
    assert f4["delta_mh_nearid_minus_siglip2"].abs().max() < 1e-9
    t1 = table1([EncoderResult("nearid", "head", nearid={"full": nearid_bench(_split({"A": A}), ["A"])},
                                           mtg={"full": None}, dbpp=mh)], {"main": ["A"]}, "mini")
    assert np.isnan(t1["dbpp_mh"].iloc[0]) and t1["dbpp_mh_procedural"].iloc[0] == pytest.approx(0.999)
    assert "not human" in t1["dbpp_note"].iloc[0]
