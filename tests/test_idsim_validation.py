"""ID-Sim's validation sets (Supp. B.1) and the embeddings they are scored with: hand cases for the
scores, structure of the sets on the smoke world, the embedding kinds against direct model calls."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from nearid_lib.idsim.validation import score_validation, validation_keys, validation_sets, validation_units


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
                                   "label": [1, 0, 0, 1, 0, 0], "unit": ["u1"] * 3 + ["u2"] * 3})}
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
    assert (p[p.kind == "context_edit"].img2 == "ctx:" + p[p.kind == "context_edit"].img1).all()
    assert (p.label == 1).sum() == 2 * len(val_ids) and (p.label == 0).sum() > 0
    assert p[p.label == 0].kind.str.startswith("distractor:").all()
    with pytest.raises(ValueError, match="no identities"):
        validation_sets(data, embed, "nope")


def test_model_embeddings_kinds(smoke_world):
    from nearid_lib.idsim.embed import model_embeddings
    from nearid_lib.idsim.prefix import PrefixStore
    from nearid_lib.models.idsim import build_idsim

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
