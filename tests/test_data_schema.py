"""load_nearid validation and every bad input of the issue: each error names dataset/row/field."""
from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from nearid_lib import get_profile
from nearid_lib.data import DataError, build_world, load_nearid, read_mask, read_rgb

TINY = {"world.n_train_ids": 2, "world.n_val_ids": 1, "world.n_test_ids": 1,
        "world.n_mtg_pairs": 1, "world.n_grid_anchors": 1, "world.grid_levels": 2,
        "world.n_species": 1, "world.ids_per_species": 2, "world.refs_per_id": 1,
        "world.gallery_per_id": 1, "world.image_size": 32, "world.source_resolutions": (32, 48),
        "world.distractor_sources": ("recolor", "marking"), "world.train_sources": ("recolor", "marking")}


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    root = tmp_path_factory.mktemp("s") / "nearid"
    return build_world(get_profile("smoke", **TINY), root, progress=False)


@pytest.fixture
def root(master, tmp_path):
    dst = tmp_path / "nearid"
    shutil.copytree(master, dst)
    return dst


def test_valid_dataset_loads(root):
    d = load_nearid(root, check_images=True)
    assert d.sources == ["recolor", "marking"] and d.train_sources == ["recolor", "marking"]
    v = d.views()
    assert len(v) == int(d.identities.n_views.sum())
    assert {"nimg_recolor", "nimg_marking"} <= set(v.columns)


def test_missing_manifest_means_incomplete(root):
    (root / "manifest.json").unlink()
    with pytest.raises(DataError, match="incomplete"):
        load_nearid(root)
    load_nearid(root, require_complete=False)


def test_corrupt_image(root):
    d = load_nearid(root)
    p = root / d.positives.img2[1]
    p.write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    with pytest.raises(DataError, match=r"positives.csv, row 1, field 'img2'.*corrupt"):
        load_nearid(root, check_images=True)


def test_truncated_image(root):
    d = load_nearid(root)
    p = root / d.distractors["marking"].nimg1[0]
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"distractors/marking.csv, row 0, field 'nimg1'"):
        load_nearid(root, check_images=True)


@pytest.mark.parametrize("mode", ["L", "RGBA", "I;16", "P"])
def test_mode_conversion_rule(tmp_path, mode):
    rgb = np.random.default_rng(0).integers(0, 255, (8, 9, 3), dtype=np.uint8)
    gray = rgb[..., 0]
    if mode == "L":
        im = Image.fromarray(gray, "L")
        expect = np.stack([gray] * 3, -1)
    elif mode == "RGBA":
        im = Image.fromarray(np.dstack([rgb, np.full((8, 9), 7, np.uint8)]), "RGBA")
        expect = np.rint(rgb * (7 / 255)).astype(np.uint8)   # composited onto black (imageio rule)
    elif mode == "I;16":
        im = Image.fromarray(gray.astype(np.uint16) * 257)  # uint16 -> mode I;16
        expect = np.stack([gray] * 3, -1)              # scaled by 1/257
    else:
        im = Image.fromarray(rgb).convert("P")
        expect = np.asarray(im.convert("RGB"))
    p = tmp_path / "x.png"
    im.save(p)
    out = read_rgb(p, "dataset t, row 0, field 'img1'")
    assert out.mode == "RGB" and out.size == (9, 8)
    np.testing.assert_array_equal(np.asarray(out), expect)


def _replace_mask(root, col: str, row: int, mask: Image.Image):
    """Overwrite the ``col`` mask of positives row ``row`` with ``mask``; returns its path."""
    p = root / load_nearid(root).positives[col][row]
    mask.save(p)
    return p


def test_mask_size_mismatch(root):
    _replace_mask(root, "mask1", 2, Image.new("L", (10, 12), 255))
    with pytest.raises(DataError, match=r"positives.csv, row 2, field 'mask1'.*size"):
        load_nearid(root, check_images=True)


def test_empty_mask(root):
    p = _replace_mask(root, "mask2", 0, Image.new("L", (32, 32), 0))
    with pytest.raises(DataError, match=r"positives.csv, row 0, field 'mask2'.*empty"):
        load_nearid(root, check_images=True)
    with pytest.raises(DataError, match="empty"):
        read_mask(p)


def test_identity_with_one_view(root):
    pos = pd.read_csv(root / "positives.csv", dtype=str, keep_default_na=False)
    pos.loc[3, ["img2", "mask2", "img3", "mask3"]] = ""
    pos.to_csv(root / "positives.csv", index=False)
    with pytest.raises(DataError, match=r"positives.csv, row 3, field 'img2'.*fewer than two views"):
        load_nearid(root)


def test_distractor_table_one_row_short(root):
    p = root / "distractors" / "marking.csv"
    df = pd.read_csv(p, dtype=str, keep_default_na=False)
    df.iloc[:-1].to_csv(p, index=False)
    with pytest.raises(DataError, match=r"distractors/marking.csv.*3 rows but positives.csv has 4"):
        load_nearid(root)


def test_distractor_rows_misordered(root):
    p = root / "distractors" / "recolor.csv"
    df = pd.read_csv(p, dtype=str, keep_default_na=False)
    df.iloc[[1, 0, 2, 3]].to_csv(p, index=False)
    with pytest.raises(DataError, match=r"recolor.csv, row 0, field 'id'.*not row-aligned"):
        load_nearid(root)


def test_missing_column_and_bad_split(root):
    pos = pd.read_csv(root / "identities.csv", dtype=str, keep_default_na=False)
    pos.loc[1, "split"] = "holdout"
    pos.to_csv(root / "identities.csv", index=False)
    with pytest.raises(DataError, match=r"identities.csv, row 1, field 'split'"):
        load_nearid(root)
    pos.drop(columns=["class_name"]).to_csv(root / "identities.csv", index=False)
    with pytest.raises(DataError, match=r"identities.csv.*missing column.*class_name"):
        load_nearid(root)
