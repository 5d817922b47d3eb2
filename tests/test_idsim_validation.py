"""ID-Sim's validation sets (Supp. B.1) and the embeddings they are scored with: hand cases for the
scores, structure of the sets on the smoke world (Identity Validation = edits of one base image),
the edit keys and their errors, the embedding kinds against direct model calls."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from PIL import Image

from nearid_lib.idsim.sampling import CTX, EDIT, PRESERVING_EDITS, edit_key, load_key, preserving_edit
from nearid_lib.idsim.validation import (POSITIVE_EDITS, kind_auc, preserving_pairs, score_validation, validation_keys,
                                         validation_sets, validation_units)


def _unit(v):
    v = np.asarray(v, float)
    return v / np.linalg.norm(v)


def test_scores_hand_case():
    emb = {"a": _unit([1, 0]), "p": _unit([1, 0.1]), "n": _unit([1, 0.5]),
           "b": _unit([0, 1]), "q": _unit([1, 1]), "m": _unit([0.1, 1])}
    sets = {"triplets": pd.DataFrame({"anchor": ["a", "b"], "positive": ["p", "q"], "negative": ["n", "m"],
                                      "unit": ["u1", "u2"]}),
            "pairs": pd.DataFrame({"img1": ["a", "a", "a", "b", "b", "b"],
                                   "img2": ["p", "n", "b", "q", "m", "a"],
                                   "label": [1, 0, 0, 1, 0, 0], "unit": ["u1"] * 3 + ["u2"] * 3,
                                   "kind": ["e", "d1", "d2"] * 2})}
    # u1: cos(a,p)=0.995 > cos(a,n)=0.894 -> correct; u2: cos(b,q)=0.707 < cos(b,m)=0.995 -> wrong
    units = validation_units(sets, emb).set_index("unit")
    assert units.correct.to_dict() == {"u1": 1.0, "u2": 0.0}
    # u1: pos 0.995 vs negs {0.894, 0} -> 1; u2: pos 0.707 vs negs {0.995, 0} -> 1/2
    assert units.auc_anchor.to_dict() == pytest.approx({"u1": 1.0, "u2": 0.5})
    s = score_validation(sets, emb)
    assert s["real_instance_val_acc"] == pytest.approx(0.5)
    assert s["identity_val_anchor_auc"] == pytest.approx(0.75)
    # pooled: positives {0.995, 0.707} vs negatives {0.894, 0, 0.995, 0}: 0.995 beats 3 (+ tie 1/2),
    # 0.707 beats 2 -> (3.5 + 2) / 8
    assert s["identity_val_roc_auc"] == pytest.approx(5.5 / 8)
    assert set(validation_keys(sets)) == set(emb)
    # by kind, against all pairs of the other label: e = the pooled case; d1 {0.894, 0.995} vs
    # positives {0.995, 0.707}: 0.995 > 0.894, tie 0.995, 0.707 loses twice -> 1.5 / 4; d2 {0, 0} -> 1
    k = kind_auc(sets, emb).set_index("kind")
    assert k.auc.to_dict() == pytest.approx({"e": 5.5 / 8, "d1": 1.5 / 4, "d2": 1.0})
    assert k.n.to_dict() == {"e": 2, "d1": 2, "d2": 2} and k.label.to_dict() == {"e": 1, "d1": 0, "d2": 0}


def test_validation_sets_on_smoke_world(smoke_world):
    data = smoke_world
    def embed(keys):
        r = np.random.default_rng(len(keys)).normal(size=(len(keys), 4))
        return r / np.linalg.norm(r, axis=1, keepdims=True)
    sets = validation_sets(data, embed, "val")
    t, p = sets["triplets"], sets["pairs"]
    val_ids = set(data.positives[data.positives.split == "val"].id)
    cls = dict(zip(data.identities.id, data.identities.class_name))
    assert len(t) and set(t.unit) <= val_ids
    ids = sorted(data.identities.id, key=len, reverse=True)
    owner = lambda k: next(i for i in ids if i in k)
    for _, r in t.iterrows():
        assert owner(r.anchor) == owner(r.positive) == r.unit != owner(r.negative)
        assert cls[owner(r.negative)] == cls[r.unit]
    assert set(p.unit) == val_ids
    pos = data.positives[data.positives.split == "val"]
    srcs = [s for s in data.sources if "val" in data.source_splits.get(s, ["val"]) and s in data.distractors]
    for i, r in pos.iterrows():
        u = p[p.unit == r.id]
        assert (u.img1 == r.img1).all()                            # every pair starts from the base, view 1
        assert r.img2 not in set(u.img2)                           # no (view 1, view 2) pair any more
        # positives: exactly the identity-preserving edits of the same base
        assert list(zip(u[u.label == 1].kind, u[u.label == 1].img2)) == preserving_pairs(r.img1)
        assert set(u[u.label == 1].img2) == {edit_key(e, r.img1) for e in PRESERVING_EDITS} | {CTX + r.img1}
        # negatives: the unit's own view-1 distractors (the base with the object's identity altered)
        want = [(f"distractor:{s}", data.distractors[s].at[i, "nimg1"]) for s in srcs
                if data.distractors[s].at[i, "nimg1"]]
        assert list(zip(u[u.label == 0].kind, u[u.label == 0].img2)) == want and want
    assert tuple(p[p.label == 1].kind.unique()) == POSITIVE_EDITS
    assert (p.label == 1).sum() == len(POSITIVE_EDITS) * len(val_ids)
    with pytest.raises(ValueError, match="no identities"):
        validation_sets(data, embed, "nope")


def test_edit_keys_load_deterministic_edits(smoke_world):
    data = smoke_world
    base_key = data.positives.img1.iloc[0]
    base = np.asarray(data.image(base_key))
    for kind, key in preserving_pairs(base_key):
        a, b = np.asarray(load_key(data, key, 0)), np.asarray(load_key(data, key, 0))
        assert a.shape == base.shape, kind                                 # the base's size
        assert not np.array_equal(a, base), kind                           # an actual edit
        assert a.tobytes() == b.tobytes(), kind                            # deterministic
        if kind != "edit:flip":                                            # a mirror has no randomness
            assert not np.array_equal(a, np.asarray(load_key(data, key, 1))), kind
    np.testing.assert_array_equal(np.asarray(load_key(data, edit_key("flip", base_key))), base[:, ::-1])


def test_crop_keeps_the_object_whole():
    img = np.zeros((40, 60, 3), np.uint8)
    img[:8, :6] = (255, 0, 0)                       # object in the top-left corner
    mask = img[..., 0] > 0
    for seed in range(5):
        out = np.asarray(preserving_edit(Image.fromarray(img), "crop", seed, mask))
        assert out.shape == img.shape
        # the window must start at (0, 0) to hold the object: it grows by 1 / (0.8..0.9) in place
        assert tuple(out[0, 0]) == (255, 0, 0) and out[:8, :6, 0].min() > 200 and out[-1, -1, 0] == 0
    with pytest.raises(ValueError, match="needs the object's non-empty mask"):
        preserving_edit(Image.fromarray(img), "crop", 0)


def test_load_key_errors_name_the_key(smoke_world):
    data = smoke_world
    base_key = data.positives.img1.iloc[0]
    for key in ("foo:" + base_key, EDIT + "blur:" + base_key, EDIT + "flip:", "pos/missing.png",
                edit_key("flip", "pos/missing.png"), CTX + "pos/missing.png"):
        with pytest.raises(ValueError, match=re.escape(repr(key))):
            load_key(data, key)
    with pytest.raises(ValueError, match="unknown edit 'blur'"):
        edit_key("blur", base_key)


def test_model_embeddings_kinds(smoke_world):
    from nearid_lib.idsim.embed import model_embeddings
    from nearid_lib.idsim.prefix import PrefixStore
    from nearid_lib.idsim.model import build_idsim

    torch.manual_seed(0)
    model = build_idsim(backbone="efficientnet-lite0", tiny=True, head_hidden=16, head_out=8, adapt_stages=1)
    with torch.no_grad():                          # move the adapters off zero so frozen != adapted
        for n, prm in model.named_parameters():
            if "lora_B" in n:
                prm.normal_(0, 0.5)
    store = PrefixStore(model, smoke_world)
    keys = smoke_world.positives.img1.tolist()[:3]
    e = model_embeddings(model, store, keys, kinds=("cls", "patch", "joint", "frozen"), batch_size=2)
    f = store.get(keys)
    with torch.no_grad():
        o = model.from_prefix(f)
        with model.adapters_disabled():
            c0, _ = model.raw_from_prefix(f)
    c = F.normalize(o.pooled.float(), dim=-1).numpy()
    np.testing.assert_allclose(np.stack([e["cls"][k] for k in keys]), c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.stack([e["frozen"][k] for k in keys]),
                               F.normalize(c0.float(), dim=-1).numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(e["frozen"][keys[0]][:4], e["cls"][keys[0]][:4])
    # cosine of the joint embedding = mean of the CLS and patch cosines
    k0, k1 = keys[:2]
    joint = e["joint"][k0] @ e["joint"][k1]
    assert joint == pytest.approx(0.5 * (e["cls"][k0] @ e["cls"][k1] + e["patch"][k0] @ e["patch"][k1]), rel=1e-5)
    with pytest.raises(ValueError, match="unknown kind"):
        model_embeddings(model, store, keys, kinds=("nope",))
