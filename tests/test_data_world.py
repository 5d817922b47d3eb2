"""NearID-mini world: determinism, exact matched context, exact MTG oracle, resumability."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from PIL import Image

from nearid_lib import get_profile
from nearid_lib.data import DataError, build_world, load_nearid
from nearid_lib.data import backgrounds as B
from nearid_lib.data import parts as P
from nearid_lib.data import world as W
from nearid_lib.generate.base import FillInputError, get_backend

TINY = {"world.n_train_ids": 3, "world.n_val_ids": 1, "world.n_test_ids": 2,
        "world.n_mtg_pairs": 3, "world.n_grid_anchors": 1, "world.grid_levels": 2,
        "world.n_species": 2, "world.ids_per_species": 2, "world.refs_per_id": 1,
        "world.gallery_per_id": 2, "world.image_size": 48, "world.source_resolutions": (48, 80)}


def _tiny(**kw):
    return get_profile("smoke", **{**TINY, **kw})


def _digest(root):
    h = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and "_progress" not in p.parts and p.name != "manifest.json":
            h[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return h


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("w") / "nearid"
    build_world(_tiny(), root, progress=False)
    return root


def test_same_seed_identical_bytes_and_worker_independent(built, tmp_path):
    other = build_world(_tiny(), tmp_path / "b", progress=False, n_workers=2)
    assert _digest(built) == _digest(other)
    assert len(_digest(built)) > 50
    third = build_world(_tiny(seed=1), tmp_path / "c", progress=False)
    a, c = _digest(built), _digest(third)
    assert a["pos/train_00000_1.png"] != c["pos/train_00000_1.png"]


def test_schema_loads_and_counts(built):
    d = load_nearid(built, check_images=True)
    cfg = _tiny()
    assert len(d.identities) == 6 and set(d.identities.split) == {"train", "val", "test"}
    assert d.sources == list(cfg.world.distractor_sources)
    assert set(d.train_sources) <= set(d.sources)
    assert len(d.mtg) == 3 and len(d.grids) == 3 * 2 * 2
    assert set(d.fpr_train.file_path).isdisjoint(d.fpr_gallery.file_path)
    im = d.image(d.positives.img1[0])
    assert im.mode == "RGB" and im.size == (48, 48)
    assert d.mask(d.positives.mask1[0]).dtype == np.bool_
    assert d.manifest["counts"]["positive_images"] == int(d.identities.n_views.sum())


def test_unseen_sources_only_in_their_splits(built):
    d = load_nearid(built)
    cfg = _tiny()
    for s in d.sources:
        has = (d.distractors[s].nimg1 != "").to_numpy()
        want = d.positives.split.isin(d.source_splits[s]).to_numpy()
        assert (has == want).all(), s
        if s not in d.train_sources:
            assert set(d.source_splits[s]) == set(cfg.world.unseen_source_splits)
        else:
            assert set(d.source_splits[s]) == {"train", "val", "test"}


def test_every_distractor_is_visibly_different_at_stored_resolution(built):
    """A distractor nobody could tell from its positive view measures nothing: every stored
    distractor changes >= world.min_visible_px pixels of its view by > VISIBLE_DELTA."""
    d = load_nearid(built)
    size = d.image(d.positives.img1[0]).size[0]
    need = W.min_visible_px(size)
    for s in d.sources:
        for i in range(len(d.positives)):
            for k in (1, 2, 3):
                rel = d.distractors[s].at[i, f"nimg{k}"]
                if not rel:
                    continue
                p = np.asarray(d.image(d.positives.at[i, f"img{k}"]), dtype=float) / 255
                n = np.asarray(d.image(rel), dtype=float) / 255
                changed = (np.abs(p - n).max(-1) > W.VISIBLE_DELTA).sum()
                assert changed >= need, (s, i, k, changed, need)


def test_distractor_only_changes_inside_mask(built):
    d = load_nearid(built)
    for s in d.sources:
        for i in range(len(d.positives)):
            if not d.distractors[s].nimg1[i]:
                continue
            p = np.asarray(d.image(d.positives.img1[i]))
            n = np.asarray(d.image(d.distractors[s].nimg1[i]))
            m = d.mask(d.positives.mask1[i])
            inside = np.abs(p.astype(int) - n.astype(int))[m].mean()
            if s.endswith("_hr"):   # resampled: outside differs by resampling blur only
                assert np.abs(p.astype(int) - n.astype(int))[~m].mean() < inside
            else:
                assert (p[~m] == n[~m]).all(), (s, i)
            assert inside > 0, (s, i)


def test_mtg_oracle_is_exact(built):
    d = load_nearid(built)
    for _, r in d.mtg.iterrows():
        for k in (1, 2):
            o = np.asarray(d.image(r[f"image_{k}_original"])).astype(int)
            e = np.asarray(d.image(r[f"image_{k}_inpainted"])).astype(int)
            obj = d.mask(r[f"image_{k}_object_mask"])
            part = np.asarray(Image.open(d.path(r[f"image_{k}_part_mask"]))) >= 128
            changed = (o != e).any(-1)
            assert changed.any()
            assert not (changed & ~part).any()            # the edit stays inside the part
            assert r[f"oracle_{k}"] == pytest.approx(1 - part.sum() / obj.sum(), abs=1e-12)


def test_perturbations_change_enough():
    rng = np.random.default_rng(0)
    for cls in W.CLASSES:
        ident = W.sample_identity(rng, cls)
        assert ident["marking"]["r"] >= 0.2
        for fam in W.PERTURBATIONS:
            new, changed = W.perturb(ident, fam, rng)
            assert new != ident
            assert len(changed) >= (1 if fam == "hard" else 2), (fam, changed)
            if fam == "marking":
                assert new["marking"]["r"] >= 0.2 and new["marking"]["shape"] != ident["marking"]["shape"]
        assert W.perturb_strength(ident, W.sample_identity(rng, cls), 0.0) == ident


def test_render_resolution_independent_and_mask_exact():
    rng = np.random.default_rng(1)
    ident = W.sample_identity(rng, "fish")
    view = W.sample_view(rng)
    a = W.render_object(ident, view, 64)
    b = W.render_object(ident, view, 128)
    # Same pose at two resolutions: coverage fraction agrees closely.
    assert abs(a["alpha"].mean() - b["alpha"].mean()) < 0.01
    bg = np.zeros((64, 64, 3), np.float32)
    img, mask, parts = W.render_scene(ident, view, bg, with_parts=True)
    assert (img[~mask] == 0).all() and mask.any()
    assert set(parts) == {n for n, _, _ in P.part_list(ident)} | {"marking"}


def test_backgrounds_held_out_disjoint():
    tr_p, tr_t = B.available_sources(False)
    te_p, te_t = B.available_sources(True)
    assert set(tr_p).isdisjoint(te_p) and set(tr_t).isdisjoint(te_t)
    assert te_t and tr_t
    rng = np.random.default_rng(0)
    for held in (False, True):
        for _ in range(10):
            spec = B.sample_background_spec(rng, held)
            name = spec.get("name", spec.get("tex", {}).get("family"))
            assert (name in B.HELD_OUT) == held
            assert spec.get("mix", {}).get("family", "checker" if held else "noise") in (te_t if held else tr_t)
            out = B.render_background(spec, 32)
            assert out.shape == (32, 32, 3) and out.min() >= 0 and out.max() <= 1


def test_procedural_fill_backend():
    fill = get_backend("procedural")
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8))
    m = np.zeros((40, 40), np.uint8)
    m[10:25, 12:30] = 255
    out = np.asarray(fill.fill(img, Image.fromarray(m), "", 3))
    assert (out[m == 0] == np.asarray(img)[m == 0]).all()
    assert (out[m > 0] != np.asarray(img)[m > 0]).any()
    with pytest.raises(FillInputError, match="size"):
        fill.fill(img, Image.fromarray(m[:30]), "", 0)
    with pytest.raises(FillInputError, match="empty"):
        fill.fill(img, Image.fromarray(np.zeros_like(m)), "", 0)


def test_resume_after_interruption(built, tmp_path):
    root = tmp_path / "r"
    build_world(_tiny(), root, progress=False)
    # Simulate a crash mid-build: no manifest, half the identity jobs unlogged, files missing.
    (root / "manifest.json").unlink()
    log = root / "_progress" / "identities.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:3]) + "\n{\"id\": \"torn")   # torn last line
    (root / "pos" / "test_00001_1.png").unlink()
    with pytest.raises(DataError, match="incomplete"):
        load_nearid(root)
    build_world(_tiny(), root, progress=False)
    assert _digest(root) == _digest(built)
    load_nearid(root)


def test_config_errors():
    with pytest.raises(ValueError, match="unknown family"):
        build_world(_tiny(**{"world.distractor_sources": ("blur",)}), "/tmp/never", progress=False)


def test_code_change_rebuilds_the_world(built, monkeypatch):
    """The world is keyed by the code that renders it: same code -> returned untouched; a
    changed fingerprint of that code -> rebuilt, never a stale world."""
    from nearid_lib.data import build as Bd

    man = json.loads((built / "manifest.json").read_text())
    assert man["fingerprint"]["code"] == Bd.code_fingerprint(*Bd.WORLD_CODE)
    before = (built / "manifest.json").stat().st_mtime_ns
    build_world(_tiny(), built, progress=False)
    assert (built / "manifest.json").stat().st_mtime_ns == before
    monkeypatch.setattr(Bd, "code_fingerprint", lambda *parts: "edited-code")
    build_world(_tiny(), built, progress=False)
    assert json.loads((built / "manifest.json").read_text())["fingerprint"]["code"] == "edited-code"


def test_code_fingerprint_follows_the_named_sources(tmp_path):
    from nearid_lib.runtime.runmeta import code_fingerprint

    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    f_all, f_a = code_fingerprint(package=pkg), code_fingerprint("a.py", package=pkg)
    (pkg / "sub" / "b.py").write_text("y = 3\n")
    assert code_fingerprint(package=pkg) != f_all          # any edit under the package
    assert code_fingerprint("a.py", package=pkg) == f_a    # a part that did not change
    with pytest.raises(FileNotFoundError, match="nope"):
        code_fingerprint("nope", package=pkg)


def test_world_levers_scene_sharing_defocus_and_distractor_magnitude():
    """The calibration levers (benchmarks/calibrate_world.py): at their neutral values the world is
    unchanged; shared_scene_p=1 puts every later view in view 1's scene, re-framed; bg_blur blurs
    the background only; distractor_mag scales the distractors' colour shifts."""
    from nearid_lib.data.draws import draw_background, distractor_instance, view_background

    cfg = _tiny()
    own = [draw_background(cfg, False, "val_00000", k) for k in (1, 2)]
    assert all(np.array_equal(view_background(cfg, False, "val_00000", k), b) for k, b in zip((1, 2), own))
    shared = _tiny(**{"world.shared_scene_p": 1.0})
    v1, v2 = (view_background(shared, False, "val_00000", k) for k in (1, 2))
    assert np.array_equal(v1, own[0]) and not np.array_equal(v2, own[1]) and not np.array_equal(v2, v1)
    rng = np.random.default_rng(0)
    spec = B.sample_background_spec(np.random.default_rng(3))
    re = B.reframe(spec, rng)
    assert re["kind"] == spec["kind"] and re["cmix"] == spec["cmix"] and re["gain"] == spec["gain"]
    # the re-framed scene is closer to its original than an unrelated scene is (mean colour)
    a, b = B.render_background(spec, 48), B.render_background(re, 48)
    other = B.render_background(B.sample_background_spec(np.random.default_rng(4)), 48)
    assert np.abs(a.mean((0, 1)) - b.mean((0, 1))).sum() < np.abs(a.mean((0, 1)) - other.mean((0, 1))).sum()
    assert B.defocus(a, 0.0) is a
    blurred = B.defocus(a, 2.0)
    assert blurred.shape == a.shape and blurred.std() < a.std() and abs(blurred.mean() - a.mean()) < 0.01
    ident = W.sample_identity(np.random.default_rng(1), W.CLASSES[0])
    view = W.sample_view(np.random.default_rng(2))
    base = distractor_instance(cfg, ident, "recolor", "val_00000", 1, view)[0]
    strong = distractor_instance(_tiny(**{"world.distractor_mag": 2.0}), ident, "recolor", "val_00000", 1, view)[0]

    def hue_gap(d):
        return np.abs(np.subtract(d["colors"]["body"], ident["colors"]["body"])).sum()
    assert hue_gap(strong) > hue_gap(base) > 0


def test_reshoots_give_cute_easy_its_same_scene_anchor_with_distinct_positive_scenes(tmp_path):
    """NearID's protocol keeps every positive view in a scene of its own (shared_scene_p = 0); the
    re-shoot (world.scene_reshoots) is the object shot again in view 1's scene, stored apart, and is
    what ID-Sim's CUTE-easy analogue anchors on."""
    from nearid_lib.data.draws import reshoot_background, scene_of, view_background
    from nearid_lib.idsim.eval_suite import mini_benchmark_sets

    cfg = _tiny(**{"world.shared_scene_p": 0.0, "world.scene_reshoots": ("test",)})
    d = load_nearid(build_world(cfg, tmp_path / "w", progress=False))
    ids = d.identities.set_index("id")
    test = ids[ids.split == "test"]
    assert (test.reshoot.fillna("") != "").all() and (ids[ids.split != "test"].reshoot.fillna("") == "").all()
    for iid, r in test.iterrows():
        assert Image.open(d.path(r.reshoot)).size == (48, 48)
        assert all(scene_of(cfg, iid, k) == k for k in (1, 2, 3))        # positives: distinct scenes
        bg1, shot_bg = view_background(cfg, True, iid, 1), reshoot_background(cfg, True, iid)
        assert bg1.shape == shot_bg.shape and not np.array_equal(bg1, shot_bg)   # view 1's scene, re-framed
    t = mini_benchmark_sets(d, cfg, "test", seed=0)["triplets"]
    easy = t[t["mode"] == "easy"]
    assert len(easy) == len(test) and easy.anchor.isin(test.reshoot).all()
