"""Fill generators of the procedural world (issue 38, item 4): NearID's sources are generators that
each render every kind of edit in a look of their own, so the held-out ("unseen fill") generators
draw the same edit kinds as the training ones and differ in their look only."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from nearid_lib.config import get_profile
from nearid_lib.data import world as W
from nearid_lib.data.draws import distractor_instance, parse_source
from nearid_lib.data.generators import GENERATORS, draw_kind, fill_backend, source_kinds
from nearid_lib.generate.base import get_backend
from nearid_lib.nearid.evaluate import source_groups


def test_held_out_generators_draw_the_training_generators_kinds():
    wc = get_profile("mini").world
    g = source_groups(wc.distractor_sources, wc.train_sources)
    assert len(g["training"]) == 4 and len(g["unseen_fill"]) == 3 and len(g["unseen_canny"]) == 2
    assert g["apart"] == ["hard"]
    train_kinds = {k for s in g["training"] for k in source_kinds(s, wc.fill_kinds)}
    for s in g["unseen_fill"]:
        assert set(source_kinds(s, wc.fill_kinds)) == train_kinds == set(wc.fill_kinds)
        assert parse_source(s)[0] not in {parse_source(t)[0] for t in g["training"]}   # a new generator
    rng = np.random.default_rng(0)
    drawn = {draw_kind("poster_hr", rng, wc.fill_kinds) for _ in range(200)}
    assert drawn == set(wc.fill_kinds)


def test_one_family_sources_keep_their_draws_and_unknown_names_raise():
    rng, ref = np.random.default_rng(5), np.random.default_rng(5)
    assert draw_kind("marking_hr", rng, ("recolor", "shape")) == "marking" and rng.random() == ref.random()
    with pytest.raises(ValueError, match="unknown family 'blurry'.*sharp"):
        parse_source("blurry_hr")
    with pytest.raises(ValueError, match="world.fill_kinds.*'blur'"):
        source_kinds("soft", ("recolor", "blur"))
    with pytest.raises(ValueError, match="fill_kinds is empty"):
        draw_kind("soft", rng, ())


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 255, (48, 48, 3), dtype=np.uint8))
    m = np.zeros((48, 48), bool)
    m[8:40, 10:38] = True
    a = m.astype(np.float32)
    yy, xx = np.mgrid[:48, :48] / 48.0
    prem = np.stack([0.2 + 0.6 * xx, 0.3 + 0.4 * yy, 0.5 + 0.0 * xx], -1).astype(np.float32) * a[..., None]
    return img, Image.fromarray(m.astype(np.uint8) * 255), {"prem": prem, "alpha": a}, m


def test_generator_looks_change_the_fill_inside_the_mask_only():
    img, mask, inst, m = _inputs()
    plain = np.asarray(get_backend("procedural").fill(img, mask, "", 7, instance=inst))
    assert np.array_equal(np.asarray(fill_backend("sharp").fill(img, mask, "", 7, instance=inst)), plain)
    assert np.array_equal(np.asarray(fill_backend("recolor").fill(img, mask, "", 7, instance=inst)), plain)
    outs = {}
    for name in GENERATORS:
        out = np.asarray(fill_backend(name).fill(img, mask, "", 7, instance=inst))
        assert np.array_equal(out[~m], np.asarray(img)[~m]), name          # matched context kept
        outs[name] = out
        again = np.asarray(fill_backend(name).fill(img, mask, "", 7, instance=inst))
        assert np.array_equal(out, again), name                            # seeded
    for name in ("soft", "lifted", "poster"):
        diff = np.abs(outs[name][m].astype(int) - plain[m].astype(int))
        # a look, not a new identity: a few grey levels on average, never the object replaced
        assert 0.5 < diff.mean() < 25, (name, diff.mean())
    # the backend's grain (no world generator uses it: a CNN reads it as a cue) is drawn from the fill seed
    grain = get_backend("procedural", grain=0.02)
    a, b = (np.asarray(grain.fill(img, mask, "", s, instance=inst)) for s in (7, 8))
    assert not np.array_equal(a[m], b[m]) and np.array_equal(a, np.asarray(grain.fill(img, mask, "", 7, instance=inst)))


def test_a_generator_source_draws_several_kinds_across_items():
    cfg = get_profile("smoke")
    ident = W.sample_identity(np.random.default_rng(1), W.CLASSES[0])
    view = W.sample_view(np.random.default_rng(2))
    changed = set()
    for i in range(24):
        d, _ = distractor_instance(cfg, ident, "soft_hr", f"val_{i:05d}", 1, view)
        changed.add(tuple(sorted(k for k in ("colors", "pattern", "marking", "geom") if d[k] != ident[k])))
    assert len(changed) >= 3, changed


def test_a_views_generators_share_one_removal_fill_and_fill_as_without_it(monkeypatch):
    """The seed-free removal fill is computed once per view and removal blur for all its generators
    (the world build's 10 mini sources: 6 fills a view instead of 10); every fill equals the one
    computed without the shared cache."""
    from nearid_lib.generate import procedural
    img, mask, inst, _ = _inputs(3)
    calls = []
    real = procedural._smooth_fill
    monkeypatch.setattr(procedural, "_smooth_fill", lambda *a: calls.append(1) or real(*a))
    procedural._SMOOTH_CACHE.clear()
    shared = {g: np.asarray(fill_backend(g).fill(img, mask, "", 11, instance=inst)) for g in GENERATORS}
    blurs = {fill_backend(g).blur for g in GENERATORS}
    assert len(calls) == len(blurs) < len(GENERATORS)
    monkeypatch.setattr(procedural, "_SMOOTH_CACHE_SIZE", 0)
    alone = {g: np.asarray(fill_backend(g).fill(img, mask, "", 11, instance=inst)) for g in GENERATORS}
    assert len(calls) == len(blurs) + len(GENERATORS)
    for g in GENERATORS:
        assert np.array_equal(shared[g], alone[g]), g
    # another image is another fill, not the cached one
    other = _inputs(4)[0]
    assert not np.array_equal(np.asarray(fill_backend("sharp").fill(other, mask, "", 11, instance=inst)),
                              shared["sharp"])
