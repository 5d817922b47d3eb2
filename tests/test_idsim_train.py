"""ID-Sim training inputs: balanced quotas and instances, hard-negative mining, context edits, the
triplets built on the smoke world."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from nearid_lib.idsim.sampling import balanced_instances, balanced_quotas, context_edit
from nearid_lib.idsim.triplets import build_triplets, mine_hard_negatives


def _ref_quotas(counts, total):
    """Slow reference of App. A.1: repeatedly hand out one instance to the active dataset with
    the fewest so far (ties: key order) -> max-min fair allocation."""
    q = {k: 0 for k in counts}
    for _ in range(min(total, sum(counts.values()))):
        k = min((k for k in sorted(counts) if q[k] < counts[k]), key=lambda k: q[k])
        q[k] += 1
    return q


def test_balanced_quotas_hand_case_and_reference():
    # ID-Sim style: small datasets give everything, the rest is split equally
    q = balanced_quotas({"MET": 5, "ILIAS": 8, "A": 100, "B": 100}, 40)
    assert q == {"MET": 5, "ILIAS": 8, "A": 14, "B": 13}
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 6))
        counts = {f"d{i}": int(rng.integers(0, 30)) for i in range(n)}
        total = int(rng.integers(0, 120))
        q = balanced_quotas(counts, total)
        ref = _ref_quotas(counts, total)
        assert sum(q.values()) == sum(ref.values())
        assert sorted(q.values()) == sorted(ref.values()) or q == ref
        assert all(q[k] <= counts[k] for k in counts)
    with pytest.raises(ValueError, match="negative"):
        balanced_quotas({"a": -1}, 3)


def test_balanced_instances_counts():
    df = pd.DataFrame({"id": [f"i{j}" for j in range(30)], "class_name": ["a"] * 3 + ["b"] * 20 + ["c"] * 7})
    out = balanced_instances(df, 15, np.random.default_rng(0))
    assert out.groupby("class_name").size().to_dict() == {"a": 3, "b": 6, "c": 6}


def test_mine_hard_negatives_matches_loop():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(20, 5))
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    ids = [f"id{j // 2}" for j in range(20)]
    grp = ["x" if j < 12 else "y" for j in range(20)]
    got = mine_hard_negatives(e, ids, grp)
    for i in range(20):
        cands = [j for j in range(20) if ids[j] != ids[i] and grp[j] == grp[i]]
        assert got[i] == max(cands, key=lambda j: (e[i] @ e[j], -j))


def test_context_edit_keeps_object_changes_background():
    rng = np.random.default_rng(0)
    from PIL import Image
    img = Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8))
    mask = np.zeros((32, 32), bool)
    mask[8:24, 8:24] = True
    a, b = context_edit(img, mask, 1), context_edit(img, mask, 1)
    assert np.array_equal(np.asarray(a), np.asarray(b))          # deterministic
    arr, src = np.asarray(a, float), np.asarray(img, float)
    assert np.abs(arr[~mask] - src[~mask]).mean() > 10           # background replaced
    # object pixels: a global affine colour change of the original (correlation stays high)
    assert np.corrcoef(arr[mask].ravel(), src[mask].ravel())[0, 1] > 0.9


def _random_unit_embed(keys):
    """A stand-in embedder: seeded random unit vectors, one per key."""
    r = np.random.default_rng(len(keys)).normal(size=(len(keys), 4))
    return torch.as_tensor(r / np.linalg.norm(r, axis=1, keepdims=True))


def test_build_triplets_on_smoke_world(smoke_world):
    data = smoke_world
    inst = data.identities[data.identities.split == "train"]
    embed = _random_unit_embed
    trip = build_triplets(data, inst, 30, np.random.default_rng(0), embed)
    assert trip.subset.value_counts().to_dict() == {"S1": 10, "S2a": 10, "S2b": 10}
    cls = dict(zip(data.identities.id, data.identities.class_name))
    for _, r in trip.iterrows():
        if r.neg_kind == "mtg_part":
            assert "_inpainted" in r.negative
            continue
        strip = lambda k: k.split(":", 1)[-1]
        assert r.anchor_id in strip(r.anchor) and r.anchor_id in strip(r.positive)
        assert strip(r.anchor) != strip(r.positive)
        if r.neg_kind.startswith("mined"):
            assert r.neg_id != r.anchor_id and cls[r.neg_id] == cls[r.anchor_id]
        else:
            assert r.negative.startswith("dist/") and r.anchor_id in r.negative
    assert not trip.subset.eq("S1").pipe(lambda m: trip[m].anchor.str.startswith("ctx:")).any()


def test_unbalanced_quotas_hand_cases():
    from nearid_lib.idsim.sampling import unbalanced_quotas

    # three datasets, shares 3:2:1 spread in name order -> proportional quotas
    assert unbalanced_quotas({"a": 10, "b": 10, "c": 10}, 12, (1, 3, 2)) == {"a": 6, "b": 4, "c": 2}
    # a capped dataset gives its room to the others (largest share first)
    q = unbalanced_quotas({"a": 2, "b": 10, "c": 10}, 12, (3, 2, 1))
    assert q == {"a": 2, "b": 7, "c": 3}
    # more datasets than shares: dataset i takes share round(i (m-1)/(n-1)) -> 8, 8, 8, 1, 1
    # (90 * 8/26 = 27.69 -> 27 + largest remainder; 90/26 = 3.46 -> 3)
    q = unbalanced_quotas({k: 100 for k in "abcde"}, 90, (8, 1))
    assert q == {"a": 28, "b": 28, "c": 28, "d": 3, "e": 3}
    with pytest.raises(ValueError, match="positive"):
        unbalanced_quotas({"a": 1}, 1, (0,))
    df = pd.DataFrame({"id": [f"i{j}" for j in range(30)], "class_name": ["a"] * 10 + ["b"] * 10 + ["c"] * 10})
    out = balanced_instances(df, 12, np.random.default_rng(0), balanced=False, shares=(3, 2, 1))
    assert out.groupby("class_name").size().to_dict() == {"a": 6, "b": 4, "c": 2}
    with pytest.raises(ValueError, match="shares"):
        balanced_instances(df, 12, np.random.default_rng(0), balanced=False)


def test_build_triplets_mix_and_label_noise(smoke_world):
    data = smoke_world
    inst = data.identities[data.identities.split == "train"]
    embed = _random_unit_embed
    # a zero-weight subset never receives a triplet (largest remainders)
    trip = build_triplets(data, inst, 7, np.random.default_rng(0), embed, mix=(1, 0, 1))
    assert trip.subset.value_counts().to_dict() == {"S1": 4, "S2b": 3}
    noisy = build_triplets(data, inst, 12, np.random.default_rng(0), embed, mix=(1, 0, 0), label_noise=1.0)
    ids = sorted(data.identities.id, key=len, reverse=True)
    cls = dict(zip(data.identities.id, data.identities.class_name))
    owner = lambda key: next(i for i in ids if i in key)
    for _, r in noisy.iterrows():     # every S1 "positive" is another identity of the anchor's class
        assert owner(r.positive) != r.anchor_id and cls[owner(r.positive)] == cls[r.anchor_id]
    clean = build_triplets(data, inst, 12, np.random.default_rng(0), embed, mix=(1, 0, 0))
    assert all(owner(k) == a for k, a in zip(clean.positive, clean.anchor_id))
