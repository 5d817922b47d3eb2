"""FPR layout I/O, validation, the paper's dataset builders and gallery sampling (fixture tables)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from nearid_lib.retrieval import (CUB_GROUPS, FPRLayoutError, build_cars_split, build_cub_split,
                                  build_wildlife_split, check_disjoint, load_fpr_split, read_fpr_table,
                                  read_generated, sample_gallery, write_fpr_table)


def _img(path, color):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), color).save(path)
    return path


def _layout(tmp_path, overlap=False):
    rows_t, rows_g = [], []
    for i, name in enumerate(["a", "b"]):
        for k in range(2):
            _img(tmp_path / "img" / f"{name}_r{k}.png", (i * 80, k * 40, 0))
            rows_t.append({"name": name, "species": "s", "file_path": f"img/{name}_r{k}.png",
                           "ref_path": f"img/{name}_r0.png"})
        for k in range(3):
            _img(tmp_path / "img" / f"{name}_g{k}.png", (i * 80, k * 40, 200))
            rows_g.append({"name": name, "species": "s", "file_path": f"img/{name}_g{k}.png",
                           "ref_path": f"img/{name}_r0.png"})
    if overlap:
        rows_g.append(dict(rows_t[1]))
    write_fpr_table(pd.DataFrame(rows_t), tmp_path / "train_data.csv", "train")
    write_fpr_table(pd.DataFrame(rows_g), tmp_path / "gallery_data.csv", "gallery")
    return tmp_path


def test_roundtrip_and_absolute_paths(tmp_path):
    sp = load_fpr_split(_layout(tmp_path))
    assert len(sp.train) == 4 and len(sp.gallery) == 6
    assert all(p.startswith(str(tmp_path)) for p in sp.gallery.file_path)


def test_overlap_is_an_error_naming_files_and_rows(tmp_path):
    with pytest.raises(FPRLayoutError, match=r"overlap.*train_data.csv.*line\(s\) 3.*gallery_data.csv.*line\(s\) 8"):
        load_fpr_split(_layout(tmp_path, overlap=True))


def test_missing_file_and_column_and_empty_cell(tmp_path):
    _layout(tmp_path)
    (tmp_path / "img" / "b_g1.png").unlink()
    with pytest.raises(FPRLayoutError, match=r"gallery_data.csv.*'file_path'.*line\(s\) 6.*b_g1.png"):
        read_fpr_table(tmp_path / "gallery_data.csv", "gallery")
    df = pd.read_csv(tmp_path / "train_data.csv").drop(columns=["species"])
    df.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(FPRLayoutError, match=r"bad.csv: missing column\(s\) \['species'\]"):
        read_fpr_table(tmp_path / "bad.csv", "train")
    df = pd.read_csv(tmp_path / "train_data.csv", keep_default_na=False)
    df.loc[2, "name"] = ""
    df.to_csv(tmp_path / "bad2.csv", index=False)
    with pytest.raises(FPRLayoutError, match=r"bad2.csv: empty 'name' on line\(s\) 4"):
        read_fpr_table(tmp_path / "bad2.csv", "train")


def test_generated_needs_method_and_reads_folders(tmp_path):
    sp = load_fpr_split(_layout(tmp_path))
    gen = tmp_path / "mymethod"
    _img(gen / "a__0.png", (1, 2, 3))
    _img(gen / "b" / "x.png", (4, 5, 6))
    df = read_generated(gen, train=sp.train)
    assert sorted(df.name) == ["a", "b"] and set(df.method) == {"mymethod"}
    assert df.ref_path.iloc[0].endswith("a_r0.png")
    _img(gen / "zzz__0.png", (0, 0, 0))
    with pytest.raises(FPRLayoutError, match="'zzz'.*not in the reference table"):
        read_generated(gen, train=sp.train)
    pd.DataFrame([{"name": "a", "species": "s", "file_path": "img/a_g0.png", "ref_path": "img/a_r0.png"}]
                 ).to_csv(tmp_path / "g.csv", index=False)
    with pytest.raises(FPRLayoutError, match=r"missing column\(s\).*method"):
        read_fpr_table(tmp_path / "g.csv", "generated")


def test_check_disjoint_requires_gallery_for_every_reference_identity():
    t = pd.DataFrame({"name": ["a", "c"], "species": "s", "file_path": ["1", "2"], "ref_path": "1"})
    g = pd.DataFrame({"name": ["a"], "species": "s", "file_path": ["3"], "ref_path": "1"})
    with pytest.raises(FPRLayoutError, match=r"\['c'\] have no image"):
        check_disjoint(t, g)


# ----------------------------------------------------------------------------- sampling
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


# ----------------------------------------------------------------------------- paper builders
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
    lux = [f"Audi S{i} Sedan 2012" for i in range(10)] + [f"BMW M{i} Sedan 2012" for i in range(8)]
    meta = pd.DataFrame([{"class_name": c, "file_path": f"{c}/{k}.jpg"} for c in lux + ["Ford F-150"]
                         for k in range(16)])
    tr, ga = build_cars_split(meta, seed=1)
    assert tr.name.nunique() == 15 and ga.name.nunique() == 15 and (tr.species == "car").all()
    wl = pd.DataFrame([{"identity": f"{sp}_{i}", "species": sp.capitalize(), "path": f"{sp}/{i}/{k}.jpg"}
                       for sp in ("cow", "zebra", "tiger", "giraffe", "leopard") for i in range(12)
                       for k in range(16 if i < 11 else 3)])
    emb = np.random.default_rng(0).normal(size=(len(wl), 5))
    out = build_wildlife_split(wl, species=("cow", "zebra", "tiger", "giraffe", "leopard"), seed=0,
                               sampling="kmeans", embeddings=emb, ids_per_species=3)
    for sp, (tr, ga) in out.items():
        assert tr.name.nunique() == 3 and (ga.groupby("name").size() == 10).all()
        assert not any(n.endswith("_11") for n in tr.name)      # too few images: never drawn
