"""The FPR paper's dataset builders and gallery sampling (random, k-means, curated)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nearid_lib.fpr import (CUB_GROUPS, N_CARS_MODELS, FPRLayoutError, build_cars_split, build_cub_split,
                            build_wildlife_split, sample_gallery)
from nearid_lib.fpr.datasets import CARS_MODELS, FPRSizeError


def _group(n=30, d=4, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"file_path": [f"f{i}" for i in range(n)]}), rng.normal(size=(n, d))


def test_random_sampling_deterministic_and_distinct():
    g, _ = _group()
    a, b = sample_gallery(g, 10, "random", seed=3), sample_gallery(g, 10, "random", seed=3)
    assert np.array_equal(a, b) and len(set(a)) == 10
    assert not np.array_equal(a, sample_gallery(g, 10, "random", seed=4))
    assert np.array_equal(sample_gallery(g.iloc[:5], 10, "random"), np.arange(5))


def test_kmeans_picks_image_nearest_each_centroid():
    # three tight, well separated clusters: k-means must pick one image per cluster, the one
    # nearest the cluster's centroid (brute force on the known clusters)
    rng = np.random.default_rng(0)
    centers = np.eye(3) * 10
    x = np.concatenate([c + rng.normal(scale=0.1, size=(6, 3)) for c in centers])
    g = pd.DataFrame({"file_path": [f"f{i}" for i in range(len(x))]})
    got = sample_gallery(g, 3, "kmeans", seed=1, embeddings=x)
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    want = []
    for c in range(3):
        members = np.arange(6 * c, 6 * c + 6)
        cen = xn[members].mean(0)
        want.append(members[np.argmin(((xn[members] - cen) ** 2).sum(1))])
    assert sorted(got.tolist()) == sorted(want)
    assert np.array_equal(got, sample_gallery(g, 3, "kmeans", seed=1, embeddings=x))


def test_curated_drops_near_duplicates():
    g, x = _group(12)
    x[5] = x[2] * 1.0001          # near-duplicate of 2
    got = sample_gallery(g, 11, "curated", seed=0, embeddings=x)
    assert 5 not in got and len(got) == 11


def test_cub_builder_three_groups_of_five():
    rows = []
    for gi, (group, species) in enumerate(CUB_GROUPS.items()):
        for s in species:
            for k in range(17):
                rows.append({"class_name": f"{gi:03d}.{s}", "file_path": f"{s}/{k}.jpg"})
    rows += [{"class_name": "001.Black_footed_Albatross", "file_path": f"alb/{k}.jpg"} for k in range(20)]
    meta = pd.DataFrame(rows)
    out = build_cub_split(meta, seed=0, n_gallery=10, n_ref=(5, 7))
    assert set(out) == {"sparrow", "tern", "wren"}
    for group, (tr, ga) in out.items():
        assert tr.name.nunique() == 5 and set(ga.name) == set(CUB_GROUPS[group])
        assert (ga.groupby("name").size() == 10).all()
        assert tr.groupby("name").size().between(5, 7).all()
        assert not set(tr.file_path) & set(ga.file_path)
        assert (tr.species == group).all()
    again = build_cub_split(meta, seed=0, n_gallery=10, n_ref=(5, 7))
    pd.testing.assert_frame_equal(out["tern"][1], again["tern"][1])
    with pytest.raises(FPRLayoutError, match="misses species"):
        build_cub_split(meta[~meta.class_name.str.contains("Marsh_Wren")])


def test_cars_and_wildlife_builders():
    # the authors' 15 car models (load_cars_data.py labels) among other classes of the dataset;
    # only those 15 are identities, every other class is ignored
    others = ["AM General Hummer SUV 2000", "Acura Integra Type R 2001", "Audi R8 Coupe 2012", "Ford F-150"]
    meta = pd.DataFrame([{"class_name": c, "file_path": f"{c}/{k}.jpg"} for c in list(CARS_MODELS) + others
                         for k in range(16)])
    tr, ga = build_cars_split(meta, seed=1)
    assert set(tr.name) == set(ga.name) == set(CARS_MODELS) and N_CARS_MODELS == 15
    assert (tr.species == "car").all() and (ga.groupby("name").size() == 10).all()
    assert tr.groupby("name").size().between(5, 10).all() and not set(tr.file_path) & set(ga.file_path)
    with pytest.raises(FPRLayoutError, match="BMW M5 Sedan 2010.*not found"):
        build_cars_split(meta[meta.class_name != "BMW M5 Sedan 2010"])
    tr2, _ = build_cars_split(meta, models=others[:3], seed=1, n_gallery=5)   # explicit models
    assert set(tr2.name) == set(others[:3])
    # WildlifeReID-10k: the identities with the most images are taken (the authors' rule); the one
    # with too few images for gallery + references is never drawn, whatever its rank
    wl = pd.DataFrame([{"identity": f"{sp}_{i}", "species": sp.capitalize(), "path": f"{sp}/{i}/{k}.jpg"}
                       for sp in ("cow", "zebra", "tiger", "giraffe", "leopard") for i in range(12)
                       for k in range(16 + i % 3 if i < 11 else 3)])
    emb = np.random.default_rng(0).normal(size=(len(wl), 5))
    out = build_wildlife_split(wl, species=("cow", "zebra", "tiger", "giraffe", "leopard"), seed=0,
                               sampling="kmeans", embeddings=emb, ids_per_species=3)
    for sp, (tr, ga) in out.items():
        assert tr.name.nunique() == 3 and (ga.groupby("name").size() == 10).all()
        # 18 images: identities 2, 5, 8 (ids 2 and 5 and 8 have i % 3 == 2)
        assert set(tr.name) == {f"{sp}_2", f"{sp}_5", f"{sp}_8"}
    with pytest.raises(FPRSizeError, match="species 'cow' has 11 identities"):
        build_wildlife_split(wl, species=("cow",), ids_per_species=12)


def test_world_gallery_near_duplicates_are_what_the_curated_rule_drops(smoke_world):
    """world.gallery_dup_p: a repeated shot differs from its original by a nudge (near-identical
    pixels), other gallery images of the subject do not; the curated rule drops exactly the
    repeats when embeddings are the pixels, random sampling keeps them."""
    from nearid_lib.config import get_profile
    from nearid_lib.data.galleries import fpr_repeats
    from nearid_lib.fpr.datasets import sample_gallery

    cfg, data = get_profile("smoke"), smoke_world
    n_rep = 0
    for name, g in data.fpr_gallery.groupby("name", sort=True):
        ks = [int(p.rsplit("gal", 1)[1].split(".")[0]) for p in g.file_path]
        px = np.stack([np.asarray(data.image(p), dtype=np.float64).ravel() for p in g.file_path])
        rep = {i: ks.index(fpr_repeats(cfg, name, k)) for i, k in enumerate(ks) if fpr_repeats(cfg, name, k) != k}
        n_rep += len(rep)
        for i, j in rep.items():
            near = np.abs(px[i] - px[j]).mean()
            others = [np.abs(px[i] - px[o]).mean() for o in range(len(ks)) if o not in (i, j) and o not in rep]
            assert near < 0.5 * min(others, default=np.inf), (name, ks[i], near, others)
        x = px - px.mean(1, keepdims=True)
        kept = sample_gallery(g, len(ks) - len(rep), "curated", embeddings=x)
        if rep:
            assert set(kept) == set(range(len(ks))) - set(rep), (name, kept, rep)
    assert n_rep > 0                                     # the smoke world has repeats (p = 0.5)
    assert all(fpr_repeats(get_profile("smoke", {"world.gallery_dup_p": 0.0}), "x", k) == k for k in range(8))
