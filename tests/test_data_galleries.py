"""The FPR galleries of the procedural world (nearid_lib.data.galleries): fine-grained species,
knobs of their own, val and test galleries apart, and a world whose NearID items never move when a
gallery knob does (issue 53, item 7)."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from nearid_lib import get_profile
from nearid_lib.data import build_world, load_nearid
from nearid_lib.data import galleries as G
from nearid_lib.data import world as W

TINY = {"world.n_train_ids": 2, "world.n_val_ids": 1, "world.n_test_ids": 1, "world.n_mtg_pairs": 2,
        "world.n_grid_anchors": 1, "world.n_graded_anchors": 0, "world.grid_levels": 2, "world.n_species": 2,
        "world.ids_per_species": 2, "world.refs_per_id": 1, "world.gallery_per_id": 2, "world.image_size": 48,
        "world.source_resolutions": (48, 80), "world.distractor_sources": ("sharp", "soft"),
        "world.train_sources": ("sharp",)}


def _cfg(**kw):
    return get_profile("smoke", **{**TINY, **kw})


def _digests(root, fpr: bool):
    """sha256 of every data file under ``root``, the galleries' (``fpr/``) or all others."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and "_progress" not in rel.parts and p.name != "manifest.json" and (rel.parts[0] == "fpr") == fpr:
            out[rel.as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_members_share_species_traits_and_spread_scales_their_distance():
    spreads = (0.0, 0.2, 0.6)
    names = [f"fpr_fish_{j:03d}" for j in range(4)]
    members = {s: [G.gallery_member(0, n, "fish", s)[0] for n in names] for s in spreads}
    proto = G.species_prototype(0, "fish")
    for m in members[0.6]:
        assert m["pattern"]["type"] == proto["pattern"]["type"]
        assert m["marking"]["shape"] == proto["marking"]["shape"]
        assert m["geom"]["v1"] == proto["geom"]["v1"]
    assert all(m == proto for m in members[0.0])          # spread 0: every member is the prototype

    def colour_gap(ms):
        return np.mean([np.abs(np.subtract(a["colors"]["body"], b["colors"]["body"])).sum()
                        for i, a in enumerate(ms) for b in ms[i + 1:]])

    # the members' differences grow linearly with the spread (rounding to 5 decimals aside)
    assert colour_gap(members[0.6]) == pytest.approx(3 * colour_gap(members[0.2]), rel=1e-3)
    assert colour_gap(members[0.2]) > 0


def test_blend_members_is_continuous_and_refuses_two_species():
    a, _ = G.gallery_member(0, "fpr_bird_000", "bird", 0.5)
    b, _ = G.gallery_member(0, "fpr_bird_001", "bird", 0.5)
    assert G.blend_members(a, b, 0.0) == a
    end = G.blend_members(a, b, 1.0)
    assert end["colors"] == b["colors"] and end["geom"] == b["geom"]
    assert end["marking"]["x"] == b["marking"]["x"] and end["pattern"]["phase"] == b["pattern"]["phase"]
    half = G.blend_members(a, b, 0.5)
    assert half["geom"]["aw"] == pytest.approx((a["geom"]["aw"] + b["geom"]["aw"]) / 2, abs=1e-4)
    other = G.species_prototype(0, "fish")
    with pytest.raises(ValueError, match="not one species"):
        G.blend_members(a, other, 0.5)


def test_val_and_test_galleries_are_drawn_apart():
    cfg = _cfg()
    val, test = G.gallery_items(cfg, "val"), G.gallery_items(cfg, "test")
    assert len(val) == len(test) == 4 and {n for n, _ in val}.isdisjoint(n for n, _ in test)
    assert [s for _, s in val] == [s for _, s in test]
    assert G.species_prototype(0, "fish", "val") != G.species_prototype(0, "fish", "test")
    with pytest.raises(ValueError, match="gallery split"):
        G.gallery_items(cfg, "train")


def test_gallery_knobs_are_the_galleries_own():
    """The galleries read their own view, size and background knobs, never the NearID world's."""
    base = _cfg()
    moved = _cfg(**{"world.view_strength": 0.05, "world.object_frac": (0.3, 0.35), "world.bg_salience": 0.1,
                    "world.bg_blur": 0.05})
    assert G.fpr_view(base, "fpr_fish_000", 1) == G.fpr_view(moved, "fpr_fish_000", 1)
    assert np.array_equal(G.gallery_background(base, True, "fpr_fish_000", 1),
                          G.gallery_background(moved, True, "fpr_fish_000", 1))
    own = _cfg(**{"world.gallery_view_strength": 0.05, "world.gallery_bg_salience": 0.1})
    assert G.fpr_view(own, "fpr_fish_000", 1) != G.fpr_view(base, "fpr_fish_000", 1)
    assert not np.array_equal(G.gallery_background(own, True, "fpr_fish_000", 1),
                              G.gallery_background(base, True, "fpr_fish_000", 1))


def test_a_gallery_knob_re_renders_the_galleries_only(tmp_path):
    """Changing a gallery knob keeps every NearID file byte for byte (not re-rendered: same mtime)
    and renders the galleries again, equal to a fresh build with that knob."""
    root = build_world(_cfg(), tmp_path / "a", progress=False)
    nearid = _digests(root, fpr=False)
    mtimes = {p: p.stat().st_mtime_ns for p in (root / "pos").rglob("*.png")}
    galleries = _digests(root, fpr=True)
    assert len(nearid) > 20 and len(galleries) > 10
    knob = {"world.gallery_spread": 0.2}
    build_world(_cfg(**knob), root, progress=False)
    assert _digests(root, fpr=False) == nearid
    assert {p: p.stat().st_mtime_ns for p in (root / "pos").rglob("*.png")} == mtimes
    after = _digests(root, fpr=True)
    assert after != galleries
    fresh = build_world(_cfg(**knob), tmp_path / "b", progress=False)
    assert _digests(fresh, fpr=True) == after and _digests(fresh, fpr=False) == nearid
    man = json.loads((root / "manifest.json").read_text())
    assert man["fingerprint"]["galleries"]["world"]["gallery_spread"] == 0.2
    assert "gallery_spread" not in man["fingerprint"]["world"]
    d = load_nearid(root)
    assert d.fpr_train.name.nunique() == 4 and len(d.fpr_gallery) == 4 * 2


def test_stored_reference_is_the_member_rendered(tmp_path):
    """The builder's gallery image is the member rendered with the galleries' view and background
    (what the simulated methods re-render at drift 0)."""
    cfg = _cfg(**{"world.gallery_spread": 0.3})
    root = build_world(cfg, tmp_path / "w", progress=False)
    d = load_nearid(root)
    row = d.fpr_train.iloc[0]
    ident, _ = G.gallery_member(cfg.seed, row["name"], row["species"], 0.3)
    img, _, _ = W.render_scene(ident, G.fpr_view(cfg, row["name"], 0),
                               G.gallery_background(cfg, True, row["name"], G.fpr_scene(cfg, row["name"], 0)))
    stored = np.asarray(d.image(row["file_path"]))
    assert np.array_equal(stored, W.to_uint8(img))
