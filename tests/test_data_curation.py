"""Curation functions (NearID SynCD filtering, ID-Sim A.1 balanced sampling) on hand-made tables."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nearid_lib.data.curation import (balanced_allocation, filter_syncd, proportional_allocation,
                                      sample_balanced)


def _syncd():
    rows = [
        ("a", "rigid", "red mug", "o1", 2),
        ("b", "rigid", "Red mug ", "o2", 3),      # duplicate description (normalised) -> drop
        ("c", "rigid", "blue car", "o1", 2),      # duplicate objaverse id -> drop
        ("d", "deformable", "cat", "o3", 3),      # deformable partition -> drop
        ("e", "rigid", "", "o4", 2),              # no description -> drop
        ("f", "rigid", "green lamp", "o5", 1),    # one view -> drop
        ("g", "rigid", "green lamp2", "o6", 3),
        ("h", "Rigid", "chair", "o7", 2),
        ("i", "rigid", "table", "", 2),           # missing objaverse id is not a duplicate
        ("j", "rigid", "sofa", "", 2),
        ("k", "rigid", "vase", "o8", 3),
    ]
    return pd.DataFrame(rows, columns=["id", "partition", "description", "objaverse_id", "n_views"])


def test_filter_syncd_rules_and_splits():
    out = filter_syncd(_syncd(), splits=(10, 1, 2), seed=0)
    assert sorted(out.id) == ["a", "g", "h", "i", "j", "k"]
    assert (out.split == "test").sum() == 2 and (out.split == "val").sum() == 1
    assert (out.split == "train").sum() == 3                    # capped by what survives
    # deterministic in the seed, different across seeds
    again = filter_syncd(_syncd(), splits=(10, 1, 2), seed=0)
    assert out.split.tolist() == again.split.tolist()
    splits = {tuple(filter_syncd(_syncd(), splits=(10, 1, 2), seed=s).split) for s in range(10)}
    assert len(splits) > 1
    scaled = filter_syncd(_syncd(), splits=(18786, 100, 500), scale=0.006, seed=1)  # (113, 1, 3)
    assert scaled.split.value_counts().to_dict() == {"test": 3, "train": 2, "val": 1}
    with pytest.raises(ValueError, match="survive"):
        filter_syncd(_syncd(), splits=(1, 3, 3))
    with pytest.raises(ValueError, match="objaverse_id"):
        filter_syncd(_syncd().drop(columns=["objaverse_id"]))


def test_balanced_allocation_hand_computed():
    # 11,000 / 4 = 2,750 each; A (100) gives all -> 10,900 / 3 = 3,633.3; B (3,000) gives all ->
    # 7,900 / 2 = 3,950 for C and D.
    a = balanced_allocation({"A": 100, "B": 3000, "C": 5000, "D": 10000}, 11000)
    assert a.to_dict() == {"A": 100, "B": 3000, "C": 3950, "D": 3950}
    # Integer remainder goes one each in name order; total is exact.
    b = balanced_allocation({"x": 50, "y": 50, "z": 50}, 100)
    assert b.to_dict() == {"x": 34, "y": 33, "z": 33}
    # Budget larger than everything: everyone gives all.
    assert balanced_allocation({"x": 3, "y": 4}, 100).to_dict() == {"x": 3, "y": 4}


def test_balanced_allocation_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(50):
        sizes = {f"d{i}": int(rng.integers(0, 400)) for i in range(int(rng.integers(1, 7)))}
        total = int(rng.integers(1, 1200))
        got = balanced_allocation(sizes, total)
        # reference: water-filling, one instance at a time to the dataset with the fewest taken
        ref = {k: 0 for k in sorted(sizes)}
        for _ in range(min(total, sum(sizes.values()))):
            k = min((k for k in ref if ref[k] < sizes[k]), key=lambda k: (ref[k], k))
            ref[k] += 1
        assert got.sum() == min(total, sum(sizes.values()))
        assert got.to_dict() == ref, (sizes, total)


def test_proportional_allocation():
    p = proportional_allocation({"A": 100, "B": 300}, 40)
    assert p.to_dict() == {"A": 10, "B": 30}
    assert proportional_allocation({"A": 1, "B": 1, "C": 1}, 2).sum() == 2


def test_sample_balanced_steps_4_5():
    rows = []
    for ds, n_inst in (("MET", 3), ("SOP", 20), ("GLD", 30)):
        for i in range(n_inst):
            for j in range(2 + i % 3):
                rows.append((ds, f"{ds}{i}", f"{ds}{i}_{j}.jpg"))
    rows.append(("SOP", "lonely", "lonely_0.jpg"))            # one image: not pairable
    imgs = pd.DataFrame(rows, columns=["dataset", "instance", "image"])
    out = sample_balanced(imgs, total=30, n_val=5, rng=0)
    assert out.groupby("dataset").size().to_dict() == {"GLD": 14, "MET": 3, "SOP": 13}
    assert (out.split == "val").sum() == 5 and len(out) == 30
    assert out.instance.is_unique and "lonely" not in set(out.instance)
    assert (out.anchor != out.positive).all()
    inst_of = dict(zip(imgs.image, imgs.instance))
    assert all(inst_of[a] == inst_of[p] == i for a, p, i in zip(out.anchor, out.positive, out.instance))
    again = sample_balanced(imgs, total=30, n_val=5, rng=0)
    pd.testing.assert_frame_equal(out, again)
    prop = sample_balanced(imgs, total=30, n_val=5, rng=0, strategy="proportional")
    assert prop.groupby("dataset").size()["MET"] < 3 + 1
