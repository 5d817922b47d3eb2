"""The FPR authors' gallery rules (:mod:`nearid_lib.fpr.authors_splits`) against pandas' own sampling
calls, which their data scripts make (``df.sample``, ``groupby().sample``, a per-group ``sample``
with a fixed ``random_state``), on small synthetic tables in the published layouts."""
from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from nearid_lib.fpr import authors_splits as S
from nearid_lib.fpr.datasets import CUB_GROUP_IDS, FPRSizeError


def _frame(n=40, groups=5, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"name": rng.choice([f"g{i}" for i in range(groups)], n),
                         "file_path": [f"img{i:03d}.jpg" for i in range(n)], "x": rng.normal(size=n)},
                        index=rng.permutation(1000)[:n])


def test_draws_equal_pandas_sample_calls():
    df = _frame()
    for seed in (0, 42, 101):
        pd.testing.assert_frame_equal(S.rs_sample(df, 7, seed), df.sample(n=7, random_state=seed))
        small = df.groupby("name").filter(lambda g: len(g) >= 3)
        pd.testing.assert_frame_equal(S.grouped_sample(small, "name", 3, seed),
                                      small.groupby("name").sample(n=3, random_state=seed))
        want = pd.concat([g.sample(n=min(len(g), 4), random_state=seed) for _, g in df.groupby("name", sort=True)])
        pd.testing.assert_frame_equal(S.per_group_sample(df, "name", lambda n: min(n, 4), seed), want)
    with pytest.raises(FPRSizeError, match="draws 30"):
        S.grouped_sample(df, "name", 30, 1)


def _cub_meta(per_class=25):
    names = {cid: f"{cid:03d}.Bird_{cid}" for ids in CUB_GROUP_IDS.values() for cid in ids}
    rows = [{"img_id": i, "class_id": cid, "class_name": names[cid], "file_path": f"/cub/{cid}/{k}.jpg"}
            for i, (cid, k) in enumerate((c, k) for k in range(per_class) for c in sorted(names))]
    return pd.DataFrame(rows)


def test_cub_rule_is_the_authors_two_grouped_draws():
    meta = _cub_meta()
    out = S.authors_cub_split(meta, gallery_num=10, train_num=10)
    assert set(out) == set(CUB_GROUP_IDS)
    for group, ids in CUB_GROUP_IDS.items():
        train, gallery = out[group]
        sel = meta[meta.class_id.isin(ids)].assign(name=lambda d: d.class_name.str.split(".", n=1).str[-1])
        gal = sel.groupby("name").sample(n=10, random_state=101)
        tr = sel[~sel.file_path.isin(gal.file_path)].groupby("name").sample(n=10, random_state=101)
        assert list(gallery.file_path) == list(gal.file_path) and list(train.file_path) == list(tr.file_path)
        assert (gallery.groupby("name").size() == 10).all() and set(gallery.species) == {group}
        assert not set(train.file_path) & set(gallery.file_path)
    with pytest.raises(FPRSizeError):
        S.authors_cub_split(_cub_meta(per_class=15), 10, 10)


def test_cars_rule_takes_the_first_images_of_each_label_in_split_order():
    rows = [{"label": lab, "class_name": f"model {lab}", "file_path": f"/cars/{r}.png", "row": r}
            for r, lab in enumerate([1, 2] * 25)]
    cars = pd.DataFrame(rows).sample(frac=1, random_state=3)          # any row order in: the split's order wins
    train, gallery = S.authors_cars_split(cars, (1, 2), gallery_num=10, train_num=10)
    for lab in (1, 2):
        mine = [r["file_path"] for r in rows if r["label"] == lab]
        assert list(gallery[gallery.name == f"model {lab}"].file_path) == mine[:10]
        assert list(train[train.name == f"model {lab}"].file_path) == mine[10:20]


def _wildlife(seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for sp, src in (("zebra", "StripeSpotter"), ("cow", "CowDataset")):
        for i in range(14):
            n = int(rng.integers(3, 40))
            rows += [{"identity": f"{src}_{i:02d}", "species": sp, "dataset": src, "path": f"{src}/{i}/{k}.jpg",
                      "file_path": f"/w/{src}/{i}/{k}.jpg"} for k in range(n)]
    df = pd.DataFrame(rows)
    return df.iloc[rng.permutation(len(df))].reset_index(drop=True)        # metadata.csv order


def test_reid_rule_and_its_ablation_pool():
    meta = _wildlife()
    out = S.authors_reid_split(meta, ("zebra", "cow"), per_species=4)
    # the authors' calls, with pandas
    df = meta.rename(columns={"identity": "name"})
    elig = df.groupby("name").filter(lambda g: len(g) >= 9)
    train = pd.concat([g.sample(n=min(len(g) - 5, 10), random_state=42) for _, g in elig.groupby("name")])
    for sp in ("zebra", "cow"):
        t, g = out[sp]
        top = train[train.species == sp]["name"].value_counts().head(4).index
        assert set(t.name) == set(top) and len(set(t.name)) == 4
        want_t = train[train.name.isin(top)]
        assert sorted(t.file_path) == sorted(want_t.file_path)
        rest = df[~df.file_path.isin(train.file_path) & df.name.isin(top)]
        want_g = pd.concat([x.sample(n=min(len(x), 15), random_state=42) for _, x in rest.groupby("name")])
        assert list(g.file_path) == list(want_g.file_path)
        assert (t.groupby("name").size() <= 10).all() and (g.groupby("name").size() <= 15).all()
        pool = out.pool[sp]
        assert set(g.file_path) <= set(pool.file_path) and not set(pool.file_path) & set(t.file_path)
        assert set(pool.name) >= set(t.name) and len(set(pool.name)) > 4           # other identities too
        assert (pool.groupby("name").size() <= 30).all()
    with pytest.raises(FPRSizeError, match="takes 40"):
        S.authors_reid_split(meta, ("zebra",), per_species=40)


def test_ablation_draws():
    pool = pd.DataFrame({"name": [f"s{i % 3}" for i in range(30)], "file_path": [f"p{i}" for i in range(30)]})
    got = S.per_subject_gallery(pool, 4)
    want = pd.concat([g.sample(n=4, random_state=101) for _, g in pool.groupby("name")])
    pd.testing.assert_frame_equal(got, want)
    # random galleries: one random.seed(101), subjects in the reference table's order
    rng = random.Random(101)
    chosen = []
    for name in ("s2", "s0", "s1"):
        chosen += rng.sample(pool[pool.name == name].file_path.tolist(), 5)
    assert set(S.random_galleries(pool, ["s2", "s0", "s1"], 5).file_path) == set(chosen)
    # k-means: scikit-learn's, on the embeddings as they are, nearest to each centroid
    from sklearn.cluster import KMeans

    x = np.random.default_rng(0).normal(size=(14, 6)) * 3
    idx = S.kmeans_gallery(x, 4)
    km = KMeans(n_clusters=4, random_state=42, n_init="auto", max_iter=300).fit(x)
    for c, i in enumerate(idx):
        members = np.flatnonzero(km.labels_ == c)
        d = np.linalg.norm(x[members] - km.cluster_centers_[c], axis=1)
        assert i == members[np.argmin(d)]
    assert len(set(idx.tolist())) == 4
