"""ID-Sim benchmark builders and loaders on tiny hand-made cases."""
import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau, spearmanr

from nearid_lib.idsim.eval_suite import (BenchmarkError, bench_keys, benchmark_table, evaluate_sets,
                                    load_pairs_csv, load_ratings_csv, load_retrieval_csv, load_triplets_csv,
                                    mini_benchmark_sets)


def _e(deg):
    t = np.deg2rad(deg)
    return np.array([np.cos(t), np.sin(t)])


def test_evaluate_sets_hand_case():
    emb = {k: _e(d) for k, d in dict(q1=0, q2=90, g1=10, g2=80, g3=20, g4=100, a=0, p=30, n=60, n2=20,
                                    r=0, x1=5, x2=40, x3=70).items()}
    sets = {
        # q1 (label A) ranks g1(A) g3(B) g2(B) g4(A): AP = (1/1 + 2/4)/2 = 0.75; q2 (B): g2(B) g4(A) g3(B) g1(A)
        # -> AP = (1 + 2/3)/2 in that order, but g2 and g4 are tied (see below)
        "retrieval": pd.DataFrame({"path": ["q1", "q2", "g1", "g2", "g3", "g4"],
                                   "label": ["A", "B", "A", "B", "B", "A"],
                                   "role": ["query", "query", "gallery", "gallery", "gallery", "gallery"]}),
        "pairs": pd.DataFrame({"img1": ["a", "a", "a"], "img2": ["p", "n", "n2"], "label": [1, 0, 0]}),
        "triplets": pd.DataFrame({"anchor": ["a", "a"], "positive": ["p", "p"], "negative": ["n", "n2"],
                                  "mode": ["easy", "hard"]}),
        "graded": pd.DataFrame({"img1": ["r", "r", "r"], "img2": ["x1", "x2", "x3"], "c": [1.0, 0.5, 0.0],
                                "rating": [1.0, 0.5, 0.0]}),
    }
    res = evaluate_sets(sets, emb)
    # q2 is tied between g2 (B, 80 deg) and g4 (A, 100 deg): the expected AP over both orders is
    # ((1 + 2/3)/2 + (1/2 + 2/3)/2) / 2 (a gallery-order tie break would give (1 + 2/3)/2)
    assert np.isclose(res["pods_ap"], (0.75 + ((1 + 2 / 3) / 2 + (1 / 2 + 2 / 3) / 2) / 2) / 2)
    # pairs: sims p=cos30 > n2=cos20? no: cos20 > cos30 > cos60 -> positive ranked 2nd: AP = 1/2, AUC = 1/2
    assert np.isclose(res["petface_ap"], 0.5) and np.isclose(res["petface_auc"], 0.5)
    assert res["cute_easy_acc"] == 1.0 and res["cute_hard_acc"] == 0.0
    assert res["subjects2k_ap"] == 1.0 and res["subjects2k_auc"] == 1.0
    s = [np.cos(np.deg2rad(d)) for d in (5, 40, 70)]
    assert np.isclose(res["dreambench_spearman"], spearmanr(s, [1, 0.5, 0]).statistic)
    assert np.isclose(res["dreambench_kendall"], kendalltau(s, [1, 0.5, 0]).statistic)
    t = benchmark_table({"idsim": res}, {"idsim": ("ID-Sim", "ours")}, "smoke")
    paper = pd.read_csv(__import__("nearid_lib.report", fromlist=["x"]).paper_values_dir()
                        / "idsim_fig25_full_results.csv")
    assert set(t.metric_id) <= set(paper.metric_id)
    assert {"model", "metric_id", "value", "ours_label", "profile"} <= set(t.columns)


def test_loaders_validate(tmp_path):
    p = tmp_path / "pairs.csv"
    p.write_text("img1,img2,c\na.png,b.png,0.9\na.png,c.png,0.8\n")
    df = load_pairs_csv(p)
    assert df.label.tolist() == [1, 0]          # binarised at c > 0.8
    bad = [(load_pairs_csv, "img1,img2,label\na.png,b.png,2\n", "row 0 field 'label'"),
           (load_triplets_csv, "anchor,positive,negative,mode\na,b,c,easy\na,b,,hard\n", "row 1 field 'negative'"),
           (load_retrieval_csv, "path,label,role\nq,A,query\ng,B,gallery\n", "row 0 field 'label'"),
           (load_ratings_csv, "reference,image,rating\nr,x,3\nr,y,four\n", "row 1 field 'rating'")]
    for i, (loader, text, where) in enumerate(bad):
        f = tmp_path / f"bad{i}.csv"
        f.write_text(text)
        with pytest.raises(BenchmarkError, match=where):
            loader(f)


def test_mini_sets_on_smoke_world(smoke_world):
    from nearid_lib.config import get_profile
    from nearid_lib.data.draws import scene_of

    data, cfg = smoke_world, get_profile("smoke")
    sets = mini_benchmark_sets(data, cfg, "test", seed=0)
    n_test = int((data.positives.split == "test").sum())
    assert (sets["pairs"].label == 1).sum() == n_test
    assert set(sets["triplets"]["mode"]) == {"easy", "hard"}
    g = sets["graded"]
    # the graded set (Subjects2k / DreamBench++ analogue) has anchors of its own, never the Fig. 6 ones
    assert len(g) == len(data.graded) - data.graded.groupby(["anchor_id", "grid"]).ngroups
    assert set(g.anchor_id).isdisjoint(data.grids.anchor_id) and g.anchor_id.str.startswith("graded_").all()
    assert np.allclose(g.c, g.rating) and g.c.between(0, 1).all()
    # scenes: view k of an identity and the (view, scene) of every triplet image
    pos = data.positives[data.positives.split == "test"]
    where = {r[f"img{k}"]: (r.id, k) for _, r in pos.iterrows() for k in (1, 2, 3) if r[f"img{k}"]}
    for s in data.sources:
        d = data.distractors[s]
        where.update({d.at[i, f"nimg{k}"]: (r.id, k) for i, r in pos.iterrows() for k in (1, 2, 3) if r[f"img{k}"]})

    def scene(key):
        ident, k = where[key]
        return ident, scene_of(cfg, ident, k)

    t = sets["triplets"]
    for _, r in t.iterrows():
        a, p, n = scene(r.anchor), scene(r.positive), scene(r.negative)
        assert a[0] == p[0] == n[0] and r.negative.startswith("dist/") and p == n   # a distractor of the positive's view
        if r["mode"] == "easy":
            assert a == p                                                           # CUTE easy: one scene
    # CUTE hard: the anchor is in another scene whenever the identity has two scenes
    hard = t[t["mode"] == "hard"]
    for _, r in hard.iterrows():
        ident = scene(r.anchor)[0]
        n_scenes = len({scene_of(cfg, ident, k) for k in (1, 2, 3) if pos.set_index("id").at[ident, f"img{k}"]})
        assert (scene(r.anchor) != scene(r.positive)) == (n_scenes > 1)
    assert (t["mode"] == "easy").sum() == sum(
        any(scene_of(cfg, r.id, k) == 1 for k in (2, 3) if r[f"img{k}"]) for _, r in pos.iterrows())
    keys = bench_keys(sets)
    assert len(keys) == len(set(keys)) and set(data.graded.path) <= set(keys)


def test_scene_of_matches_the_rendered_backgrounds():
    """Two views share a scene exactly when scene_of says so: view k shot in view 1's scene is drawn
    from view 1's background spec (re-framed), any other view from its own."""
    from nearid_lib.config import get_profile
    from nearid_lib.data.draws import scene_of, view_background

    cfg = get_profile("smoke", {"world.shared_scene_p": 0.5})
    own = get_profile("smoke", {"world.shared_scene_p": 0.0})
    seen = set()
    for i in range(12):
        ident = f"test_{i:05d}"
        for k in (2, 3):
            s = scene_of(cfg, ident, k)
            seen.add(s == 1)
            same_as_own = np.array_equal(view_background(cfg, True, ident, k), view_background(own, True, ident, k))
            assert same_as_own == (s == k)
    assert seen == {True, False}
    assert scene_of(get_profile("smoke", {"world.shared_scene_p": 0.0}), "test_00000", 2) == 2


def test_patch_table_rows_match_paper_and_values_land_in_columns():
    import pandas as pd

    from nearid_lib.idsim.eval_suite import PATCH_ROWS, patch_table
    from nearid_lib.report import paper_values_dir

    paper = pd.read_csv(paper_values_dir() / "idsim_table2b_patch.csv")
    assert list(PATCH_ROWS) == paper.dataset.tolist()
    assert [m for m, _ in PATCH_ROWS.values()] == paper.metric.tolist()
    t = patch_table({"dinov3": {"pods_ap": 0.25, "cute_hard_acc": 0.5}, "ours": {"pods_ap": 0.75}}, "mini")
    t = t.set_index("dataset")
    assert t.at["PODS", "dinov3"] == 0.25 and t.at["PODS", "ours"] == 0.75
    assert t.at["CUTE", "dinov3"] == 0.5 and pd.isna(t.at["CUTE", "ours"])


def test_pods_ap_independent_of_gallery_order_with_ties():
    import numpy as np
    import pandas as pd

    from nearid_lib.idsim.eval_suite import evaluate_sets

    # a query tied between a relevant and an irrelevant gallery image: expected AP (1 + 1/2) / 2
    emb = {"q": np.array([1.0, 0.0]), "g1": np.array([1.0, 0.0]), "g2": np.array([1.0, 0.0]),
           "g3": np.array([0.0, 1.0])}
    for order in (["g1", "g2", "g3"], ["g2", "g1", "g3"]):
        r = pd.DataFrame({"path": ["q", *order], "role": ["query", "gallery", "gallery", "gallery"],
                          "label": [0] + [0 if g == "g1" else 1 for g in order]})
        assert evaluate_sets({"retrieval": r}, emb)["pods_ap"] == pytest.approx(0.75)


def test_embed_encoders_pools_every_head_from_one_pass():
    """Several heads over the model's backbone (notebook 10: every NearID seed) are pooled from the
    same frozen tokens: each equals the head embedded alone, the frozen and ID-Sim rows do not
    change, and the backbone runs once per batch however many heads there are."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    import torch

    from nearid_lib.idsim.eval_suite import embed_encoders

    keys = [f"k{i}" for i in range(5)]
    feats = {k: torch.randn(4, 3, generator=torch.Generator().manual_seed(i)) for i, k in enumerate(keys)}
    calls = []

    class Model:
        backbone = SimpleNamespace(tiny=False, cache_key=lambda: "bb")

        def eval(self):
            return self

        def adapters_disabled(self):
            return nullcontext()

        def raw_from_prefix(self, f):
            calls.append(len(f))
            return f.mean(1), f

        def from_prefix(self, f):
            return SimpleNamespace(pooled=f.sum(1) + 1.0)

    store = SimpleNamespace(ensure=lambda k, v: None, get=lambda ks: torch.stack([feats[k] for k in ks]))

    def head(w):
        return SimpleNamespace(cache_key=lambda: "bb", pool=lambda tok: (tok * torch.tensor(w)).max(1).values)

    h0, h1 = head([1.0, -2.0, 0.5]), head([0.3, 1.0, -1.0])
    together = embed_encoders(Model(), store, keys, batch_size=2, heads={"nearid.seed0": h0, "nearid.seed1": h1})
    assert list(together) == ["frozen", "idsim", "nearid.seed0", "nearid.seed1"] and calls == [2, 2, 1]
    for name, h in (("nearid.seed0", h0), ("nearid.seed1", h1)):
        alone = embed_encoders(Model(), store, keys, nearid=h, batch_size=2)
        for k in keys:
            np.testing.assert_array_equal(together[name][k], alone["nearid"][k])
            np.testing.assert_array_equal(together["frozen"][k], alone["frozen"][k])
            np.testing.assert_array_equal(together["idsim"][k], alone["idsim"][k])
    assert not np.allclose(together["nearid.seed0"]["k0"], together["nearid.seed1"]["k0"])
