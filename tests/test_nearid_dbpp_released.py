"""DreamBench++ M-H from per-image scores in the NearID authors' ratings layout
(``nearid_lib.nearid.dbpp_released``, ``nearid dbpp-mh``): hand-computed values, the key suffix and
alias rules, misaligned files, the dry-run fixture and the CLI."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from nearid_lib.cli import main as cli_main
from nearid_lib.data.schema import DataError
from tools.paper_fixtures.dbpp import FIXTURE_METHODS, write_ratings
from nearid_lib.nearid.dbpp_released import (fig4_released, mh_long, normalise_key, read_ratings, table1_released,
                                             table2_released)

# A hand case: two methods, the object category (4 images) and style (3 images).
KEYS = ["object_00_backpack-0", "object_00_backpack-1", "object_01_magic_cube-0", "object_01_magic_cube-1",
        "style_00_ink-0", "style_00_ink-1", "style_00_ink-2"]
H1 = {"m1": [0, 1, 3, 4, 0, 2, 4], "m2": [4, 3, 1, 0, 1, 1, 3]}
H2 = {"m1": [1, 1, 2, 4, 1, 2, 3], "m2": [3, 3, 2, 0, 0, 2, 4]}
S = {"m1": [0.1, 0.3, 0.5, 0.9, 0.2, 0.1, 0.8], "m2": [0.7, 0.8, 0.1, 0.3, 0.5, 0.4, 0.9]}


def _dump(path, keys, vals):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(zip(keys, vals))))


def _hand(root, metric_keys=None):
    for g, h in (("group1", H1), ("group2", H2)):
        for m, v in h.items():
            _dump(root / "data_human_rating" / "merged_data" / g / f"{m}-cp.json", KEYS, v)
    mk = metric_keys or [k.replace("magic_cube", "rubik's_cube") + "_0" for k in KEYS]     # as the release writes
    for m, v in S.items():
        _dump(root / "data_nearid_rating" / f"{m}.json", mk, v)
    return root


def _r(a, b):
    return float(np.corrcoef(np.asarray(a, float), np.asarray(b, float))[0, 1])


def test_hand_computed_values(tmp_path):
    mh = mh_long(read_ratings(_hand(tmp_path / "ratings"))).set_index(["scorer", "category", "method"])
    obj, sty = slice(0, 4), slice(4, 7)
    expect = {}
    for cat, sl in (("object", obj), ("style", sty)):
        for m in ("m1", "m2"):
            r1, r2 = _r(S[m][sl], H1[m][sl]), _r(S[m][sl], H2[m][sl])
            got = mh.loc[("nearid", cat, m)]
            assert got["r"] == pytest.approx((r1 + r2) / 2, abs=1e-12)
            assert got["r_spread"] == pytest.approx(abs(r1 - r2) / 2, abs=1e-12)
            assert got["n"] == sl.stop - sl.start
            expect[(cat, m)] = (r1 + r2) / 2
            hh = mh.loc[("human_human", cat, m)]
            assert hh["r"] == pytest.approx(_r(H1[m][sl], H2[m][sl]), abs=1e-12) and np.isnan(hh["r_spread"])
        fz = np.tanh(np.mean(np.arctanh([expect[(cat, "m1")], expect[(cat, "m2")]])))
        sem = np.std([expect[(cat, "m1")], expect[(cat, "m2")]], ddof=1) / np.sqrt(2)
        assert mh.loc[("nearid", cat, "fisher_z"), "r"] == pytest.approx(fz, abs=1e-12)
        assert mh.loc[("nearid", cat, "fisher_z"), "r_spread"] == pytest.approx(sem, abs=1e-12)
        expect[(cat, "fz")] = fz
    # all4: Fisher-z over the categories present, never one r over the pooled images
    all4 = np.tanh(np.mean(np.arctanh([expect[("object", "fz")], expect[("style", "fz")]])))
    assert mh.loc[("nearid", "all4", "fisher_z"), "r"] == pytest.approx(all4, abs=1e-12)
    pooled = np.mean([_r(S[m], H1[m]) for m in S])
    assert abs(mh.loc[("nearid", "all4", "fisher_z"), "r"] - pooled) > 1e-3
    t1 = table1_released(mh.reset_index(), "smoke").set_index("row")
    assert t1.loc["NearID (Ours)", "dbpp_mh"] == pytest.approx(expect[("object", "fz")], abs=1e-12)
    assert t1.loc["NearID (Ours)", "n_object"] == 8
    t2 = table2_released(mh.reset_index(), "smoke")
    assert list(t2.columns[:3]) == ["method", "method_id", "category"] and t2.iloc[-1]["method"] == "Fisher-z (r̄)"
    assert t2.set_index("method_id").loc["m1", "nearid_h"] == pytest.approx(expect[("object", "m1")], abs=1e-12)


def test_key_suffix_and_alias_rules():
    assert normalise_key("live_subject_animal_00_kitten-0_0") == "live_subject_animal_00_kitten-0"
    assert normalise_key("live_subject_animal_00_kitten-0") == "live_subject_animal_00_kitten-0"
    assert normalise_key("object_20_rubik's_cube-3_0") == "object_20_magic_cube-3"
    assert normalise_key("object_07_robot_toy_2-4") == "object_07_robot_toy_2-4"   # a digit in the name stays


def test_misaligned_and_bad_files_are_named(tmp_path):
    bad_keys = [k.replace("magic_cube", "rubik's_cube") + "_0" for k in KEYS]
    bad_keys[2], bad_keys[3] = bad_keys[3], bad_keys[2]
    root = _hand(tmp_path / "a", metric_keys=bad_keys)
    with pytest.raises(DataError, match=r"data_nearid_rating/m1.json: key 2 is 'object_01_magic_cube-1' but "
                                        r".*group1/m1-cp.json has 'object_01_magic_cube-0'"):
        read_ratings(root)
    root = _hand(tmp_path / "b")
    _dump(root / "data_dino_rating" / "m1.json", KEYS[:-1], S["m1"][:-1])
    with pytest.raises(DataError, match=r"data_dino_rating/m1.json: 6 images, .* has 7"):
        read_ratings(root)
    root = _hand(tmp_path / "c")
    _dump(root / "data_dino_rating" / "m1.json", KEYS, ["x"] * 7)
    with pytest.raises(DataError, match=r"data_dino_rating/m1.json, key 'object_00_backpack-0': 'x'"):
        read_ratings(root)
    with pytest.raises(DataError, match="need two human groups"):
        read_ratings(tmp_path / "c" / "data_dino_rating")
    with pytest.raises(DataError, match="does not exist"):
        read_ratings(tmp_path / "nothing")


def test_fixture_layout_and_cli(tmp_path, capsys):
    root = write_ratings(tmp_path / "ratings")
    r = read_ratings(root)
    assert r.methods == sorted(FIXTURE_METHODS)               # file order: sorted names
    assert set(r.scorers) == {"nearid", "backbone", "backbone_maphead", "vsm", "dino", "clipi", "qwen3vl_30b", "gpt"}
    mh = mh_long(r)
    f = mh[mh["method"] == "fisher_z"].pivot(index="scorer", columns="category", values="r")
    assert list(f.columns) == ["all4", "live_subject_animal", "live_subject_human", "object", "style"]
    # the fixture's noise levels order the scorers (nearid least noisy, vsm most)
    assert f.loc["nearid", "all4"] > f.loc["vsm", "all4"]
    fig = fig4_released(mh, "smoke")
    assert list(fig["category"]) == ["Animal", "Human", "Object", "Style"]
    assert np.allclose(fig["delta_mh_nearid_minus_siglip2"], fig["mh_nearid"] - fig["mh_backbone"])
    # the CLI: the released scorers plus the user's own folder
    mine = tmp_path / "mine"
    for m in FIXTURE_METHODS:
        src = json.loads((root / "data_dino_rating" / f"{m}.json").read_text())
        _dump(mine / f"{m}.json", list(src), [-v for v in src.values()])       # a metric that is anti-aligned
    out = tmp_path / "mh.csv"
    assert cli_main(["dbpp-mh", str(root), "--scores", f"mine={mine}", "--out", str(out)]) == 0
    csv = pd.read_csv(out)
    assert list(csv.columns) == ["scorer", "category", "method", "r", "r_spread", "n"]
    both = csv.merge(mh, on=["scorer", "category", "method"], suffixes=("", "_lib"))
    assert len(both) == len(mh) and np.allclose(both["r"], both["r_lib"], atol=1e-12, equal_nan=True)
    mine_r = csv.set_index(["scorer", "category", "method"])["r"]
    dino_r = mh.set_index(["scorer", "category", "method"])["r"]
    assert mine_r[("mine", "object", "emu2")] == pytest.approx(-dino_r[("dino", "object", "emu2")], abs=1e-12)
    assert "wrote" in capsys.readouterr().out
    assert cli_main(["dbpp-mh", str(root), "--scores", "dino=" + str(mine), "--out", str(out)]) == 2
    assert cli_main(["dbpp-mh", str(tmp_path / "none"), "--out", str(out)]) == 2


def test_encoder_path_matches_the_released_scores_path(tmp_path):
    """dbpp_human's statistic (our encoders on the DreamBench++ images) equals the released-scores
    statistic on the same per-image numbers: object category headline, Fisher-z over the others."""
    from nearid_lib.nearid.dbpp import dbpp_mh_from_scores

    mh = mh_long(read_ratings(_hand(tmp_path / "ratings"))).set_index(["scorer", "category", "method"])
    rows, s = [], []
    for g, h in (("group1", H1), ("group2", H2)):
        for m in ("m1", "m2"):
            for i, k in enumerate(KEYS):
                cat, subj = ("object", k[:-2]) if k.startswith("object") else ("style", k[:-2])
                rows.append({"group": g, "method": m, "subject": subj, "prompt_index": int(k[-1]),
                             "category": cat, "score": float(h[m][i])})
                s.append(S[m][i])
    out = dbpp_mh_from_scores(np.asarray(s), pd.DataFrame(rows))
    assert out["m_h_category"] == "object"
    assert out["m_h"] == pytest.approx(mh.loc[("nearid", "object", "fisher_z"), "r"], abs=1e-12)
    assert out["m_h_all4"] == pytest.approx(mh.loc[("nearid", "all4", "fisher_z"), "r"], abs=1e-12)
    pm = out["per_method"].set_index("method")
    assert pm.loc["m2", "r"] == pytest.approx(mh.loc[("nearid", "object", "m2"), "r"], abs=1e-12)
    assert pm.loc["m2", "r_spread"] == pytest.approx(mh.loc[("nearid", "object", "m2"), "r_spread"], abs=1e-12)
    assert list(out["per_category"]["category"]) == ["object", "style"]
