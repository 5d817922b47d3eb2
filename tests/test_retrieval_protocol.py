"""FPR scoring: the one-call API on a tiny fixture, the embedding cache, opt-in remote code,
scores vs brute force, and the simulated methods' drift metadata on the smoke world."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from nearid_lib.retrieval import (EmbeddingCache, RemoteCodeError, embed_images, get_encoder, rank_generator,
                                  score_embeddings, write_fpr_table)
from nearid_lib.retrieval.analysis import drift_agreement, spread


def _fixture(tmp_path):
    """Two species x two identities; identity = a colour, images = noisy squares of it."""
    rng = np.random.default_rng(0)
    cols = {"a": (200, 30, 30), "b": (30, 200, 30), "c": (30, 30, 200), "d": (200, 200, 30)}
    rows = {"train": [], "gallery": [], "generated": []}
    for name, c in cols.items():
        sp = "s1" if name in "ab" else "s2"
        for kind, n in (("train", 2), ("gallery", 3), ("generated", 2)):
            for k in range(n):
                arr = np.clip(np.array(c)[None, None] + rng.normal(0, 20, (32, 32, 3)), 0, 255).astype(np.uint8)
                p = tmp_path / kind / f"{name}__{k}.png"
                p.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(arr).save(p)
                rows[kind].append({"name": name, "species": sp, "file_path": f"{kind}/{name}__{k}.png",
                                   "ref_path": f"train/{name}__0.png", "method": "m1" if k == 0 else "m2"})
    write_fpr_table(pd.DataFrame(rows["train"]).drop(columns="method"), tmp_path / "train_data.csv", "train")
    write_fpr_table(pd.DataFrame(rows["gallery"]).drop(columns="method"), tmp_path / "gallery_data.csv")
    write_fpr_table(pd.DataFrame(rows["generated"]), tmp_path / "generated_data.csv", "generated")
    return tmp_path


def test_rank_generator_one_call_matches_brute_force(tmp_path):
    root = _fixture(tmp_path)
    res = rank_generator(root / "generated_data.csv", root / "gallery_data.csv", encoder="efficientnet-lite0",
                         tiny=True, cache_dir=tmp_path / "cache")
    assert list(res.summary.method) == ["m1", "m2"]
    assert {"map", "sim", "top1", "auc", "ndcg", "n_queries"} <= set(res.summary.columns)
    pq = res.per_query
    # brute force: per query, rank its species' gallery by cosine, AP by the definition
    q, g, gal = res.extra["q_emb"], res.extra["g_emb"], res.extra["gallery"]
    for i in range(len(pq)):
        idx = [j for j in range(len(gal)) if gal.species.iloc[j] == pq.species.iloc[i]]
        s = [float(q[i] @ g[j] / np.linalg.norm(q[i]) / np.linalg.norm(g[j])) for j in idx]
        order = sorted(range(len(idx)), key=lambda t: (-s[t], t))
        hits, precs = 0, []
        for r, t in enumerate(order, 1):
            if gal.name.iloc[idx[t]] == pq.name.iloc[i]:
                hits += 1
                precs.append(hits / r)
        assert pq.ap.iloc[i] == pytest.approx(np.mean(precs), abs=1e-9)
    assert (pq.n_gallery == 6).all()
    for m, d in pq.groupby("method"):
        assert res.summary.set_index("method").loc[m, "map"] == pytest.approx(d.ap.mean())
    # the folder form gives the same scores for one method
    res2 = rank_generator(root / "generated", root, encoder="efficientnet-lite0", tiny=True,
                          cache_dir=tmp_path / "cache")
    assert res2.per_query.ap.mean() == pytest.approx(pq.ap.mean())
    # whole-gallery scope differs (12 gallery images per query)
    res3 = rank_generator(root / "generated_data.csv", root, encoder="efficientnet-lite0", tiny=True,
                          group_by=None, cache_dir=tmp_path / "cache")
    assert (res3.per_query.n_gallery == 12).all()


def test_embedding_cache_hit_and_miss(tmp_path):
    root = _fixture(tmp_path)
    model, _ = get_encoder("efficientnet-lite0", tiny=True)
    cache = EmbeddingCache(tmp_path / "c")
    paths = [str(p) for p in sorted((root / "gallery").glob("*.png"))]
    a = embed_images(model, paths, cache)
    assert (cache.hits, cache.misses) == (0, 1)
    b = embed_images(model, paths, cache)
    assert (cache.hits, cache.misses) == (1, 1) and np.array_equal(a, b)
    embed_images(model, paths[:-1], cache)                      # other image list -> miss
    assert cache.misses == 2
    Image.new("RGB", (32, 32), (1, 2, 3)).save(paths[0])        # same names, new bytes -> miss
    embed_images(model, paths, cache)
    assert cache.misses == 3
    assert np.allclose(np.linalg.norm(a, axis=1), 1, atol=1e-5)


def test_miewid_requires_explicit_opt_in():
    with pytest.raises(RemoteCodeError, match="allow_remote_code=True"):
        get_encoder("miewid")


def test_score_embeddings_missing_identity_is_error():
    q = np.eye(3)[:2]
    with pytest.raises(ValueError, match="no image in the gallery"):
        score_embeddings(q, ["a", "z"], np.eye(3), ["a", "b", "c"])


def test_drift_agreement_and_spread():
    assert drift_agreement([0.9, 0.7, 0.5], [0.0, 0.3, 0.6]) == pytest.approx(1.0)
    assert drift_agreement([0.5, 0.7, 0.9], [0.0, 0.3, 0.6]) == pytest.approx(-1.0)
    assert np.isnan(drift_agreement([0.5, 0.5, 0.5], [0, 1, 2]))
    assert spread([0.8, 0.9, 1.0]) == pytest.approx(0.2 / 0.9)


def test_simulated_methods_follow_the_world(tmp_path):
    """The simulated generator reproduces the world's reference images pixel for pixel at drift 0
    (same identity parameters), and drift grows the pixel change inside the object."""
    from nearid_lib import get_profile
    from nearid_lib.data import world as W
    from nearid_lib.retrieval.methods import fpr_identity, reference_view, render_generated

    cfg = get_profile("smoke", **{"world.image_size": 48})
    ident, _ = fpr_identity(0, "fpr_fish_001", "fish")
    view, bg = reference_view(cfg, "fpr_fish_001", 0)
    ref, mask, _ = W.render_scene(ident, view, bg)
    same, _ = render_generated(cfg, "fpr_fish_001", "fish", 0.0, "reference", 0)
    assert np.array_equal(same, W.to_uint8(ref))
    diffs = []
    for t in (0.0, 0.3, 0.6, 1.0):
        img, _ = render_generated(cfg, "fpr_fish_001", "fish", t, "reference", 0)
        diffs.append(np.abs(img.astype(int) - W.to_uint8(ref).astype(int))[mask].mean())
    assert diffs[0] == 0 and diffs[-1] > diffs[1] > 0
    pasted, pm = render_generated(cfg, "fpr_fish_001", "fish", 0.0, "paste", 0, W.to_uint8(ref), mask)
    assert np.array_equal(pasted[pm], W.to_uint8(ref)[mask])
    assert not np.array_equal(pasted[~pm], W.to_uint8(ref)[~mask])


def test_feature_classifier_encoder_and_bioclip_tiny(tmp_path):
    """The SP-Cars substitute: a classifier trained on frozen features separates its classes, and
    its encoder embeds with the hidden layer; BioCLIP 2's open_clip path builds (tiny, offline)."""
    from PIL import Image as _I

    from nearid_lib.retrieval import train_feature_classifier
    from nearid_lib.retrieval.encoders import FeatureClassifier

    rng = np.random.default_rng(0)
    centres = rng.normal(0, 1, (3, 1280))       # efficientnet-lite0's pooled width
    x = np.concatenate([rng.normal(c, 0.3, (20, 1280)) for c in centres])
    y = ["a"] * 20 + ["b"] * 20 + ["c"] * 20
    clf, acc = train_feature_classifier(x, y, hidden=16, epochs=60, lr=1e-2)
    assert acc > 0.9
    clf.save(tmp_path / "clf", backbone="efficientnet-lite0")
    clf2, meta = FeatureClassifier.load(tmp_path / "clf.safetensors")
    assert meta["classes"] == ["a", "b", "c"]
    model, _ = get_encoder("classifier", tiny=True, checkpoint=str(tmp_path / "clf.safetensors"))
    ims = [_I.new("RGB", (32, 32), (i * 60, 10, 10)) for i in range(3)]
    e = model.embed(ims)
    assert e.shape == (3, 16)
    bio, _ = get_encoder("bioclip2", tiny=True)
    assert bio.embed(ims).shape[0] == 3


def test_paper_profile_path_on_released_layout_fixture(tmp_path):
    """The paper profile reads <root>/<gallery>/{train,gallery,generated}_data.csv (no masks, no
    true drift) and runs the same experiment functions as notebook 10."""
    from nearid_lib import get_profile
    from nearid_lib.retrieval import experiments as X

    _fixture(tmp_path / "reid_zebra")
    cfg = get_profile("paper", **{"retrieval.encoders": ("efficientnet-lite0",), "backbone.tiny": True})
    split, gen, ds = X.prepare_data(cfg, root=tmp_path)
    assert ds == "FPR-released" and set(gen.dataset) == {"reid_zebra"}
    assert all(n.startswith("reid_zebra/") for n in split.gallery.name)
    specs = X.encoder_specs(cfg)
    models = X.load_encoders(specs)
    cache = EmbeddingCache(tmp_path / "cache")
    main, pq, _ = X.main_comparison(models, gen, split.gallery, cfg, cache, ds)
    assert set(main.method) == {"m1", "m2"} and main["map"].between(0, 1).all()
    bg = X.background_ablation(models, split.train, split.gallery, cfg, cache, ds)
    assert set(bg.background) == {"kept"}
    claims = X.retrieval_claims(main, X.per_identity_agreement(pq), bg, specs, "paper")
    assert len(claims) == 1 and claims[0]["holds"] is False and "no true drift" in claims[0]["detail"]


def test_paired_agreement_difference_needs_a_real_margin():
    import numpy as np
    import pandas as pd

    from nearid_lib.retrieval.experiments import paired_agreement_difference

    names = [f"id{i}" for i in range(24)]
    rng = np.random.default_rng(0)
    base = rng.uniform(0.5, 1.0, 24)

    def table(delta):
        return pd.DataFrame([{"encoder": "spec", "names": names, "rhos": list(base + delta)},
                             {"encoder": "gen", "names": names, "rhos": list(base)}])

    # a clear, consistent improvement: interval above 0, mean exactly the mean difference
    up = paired_agreement_difference(table(0.1 + rng.normal(0, 0.02, 24)), "spec", "gen")
    assert up["low"] > 0 and up["n"] == 24 and abs(up["mean"] - 0.1) < 0.02
    # a tie-level difference (noise around 0): the interval straddles 0, so the claim cannot hold
    tie = paired_agreement_difference(table(rng.normal(0, 0.05, 24)), "spec", "gen")
    assert tie["low"] < 0 < tie["high"]
    # pairing is by identity name, not by position
    shuffled = table(0.1)
    shuffled.at[0, "names"] = names[::-1]
    shuffled.at[0, "rhos"] = list((base + 0.1)[::-1])
    assert abs(paired_agreement_difference(shuffled, "spec", "gen")["mean"] - 0.1) < 1e-12
