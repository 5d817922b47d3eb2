"""What the world builder draws for each item, derived in one place so that generators which
re-render an item (``nearid_lib.data.world_sources``) get exactly the builder's identity list,
views, backgrounds and distractor instances. The FPR galleries' draws live in :mod:`.galleries`.

Every draw takes its randomness from ``make_rng(seed, <stage>, <item id>, ...)``, never from the
order of work.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime.seeding import make_rng
from . import backgrounds as B
from . import world as W
from .generators import draw_kind, source_family, source_kinds

__all__ = ["parse_source", "positive_view", "reshoot_view", "reshoot_background", "background_for", "view_background",
           "scene_of", "distractor_instance", "MAX_PERTURB_TRIES", "source_splits"]

WORLD_SPLITS = ("train", "val", "test")


def parse_source(name: str) -> tuple[str, bool]:
    """``"marking_hr"`` -> (``"marking"``, True): the source's family (a perturbation family or a
    fill generator, :mod:`nearid_lib.data.generators`) and its high-resolution flag."""
    source_kinds(name)                                   # unknown families raise here
    return source_family(name), name.endswith("_hr")


def world_classes(wc) -> tuple[str, ...]:
    if not 1 <= wc.n_classes <= len(W.CLASSES):
        raise ValueError(f"world.n_classes={wc.n_classes}: must be in 1..{len(W.CLASSES)}")
    return W.CLASSES[:wc.n_classes]


def draw_background(cfg, held_out: bool, *keys, spec: dict | None = None) -> np.ndarray:
    """The float RGB background of ``keys`` (or of ``spec``) at the world's image size, with the
    world's depth of field (``world.bg_blur``) and salience (``world.bg_salience``) applied."""
    if spec is None:
        spec = B.sample_background_spec(make_rng(cfg.seed, "bg", *keys), held_out=held_out)
    wc = cfg.world
    img = B.defocus(B.render_background(spec, wc.image_size), float(wc.bg_blur) * wc.image_size)
    return B.desaturate_scene(img, float(wc.bg_salience))


def _scene_draw(cfg, identity_id: str, k: int):
    """``(shared, rng)``: whether view ``k`` is shot in view 1's scene, and the stream that
    re-frames it (None when it is not)."""
    p = float(cfg.world.shared_scene_p)
    if k > 1 and p > 0:
        rng = make_rng(cfg.seed, "scene", identity_id, k)
        if rng.random() < p:
            return True, rng
    return False, None


def scene_of(cfg, identity_id: str, k: int) -> int:
    """The scene of positive view ``k`` (1-based) of an identity: 1 when the view is shot in view 1's
    scene (:func:`view_background`), else ``k`` (a scene of its own). Two views of an identity share
    a scene exactly when their ``scene_of`` are equal."""
    return 1 if k == 1 or _scene_draw(cfg, identity_id, k)[0] else int(k)


def view_background(cfg, held_out: bool, identity_id: str, k: int) -> np.ndarray:
    """The background of positive view ``k`` (1-based) of an identity. With probability
    ``world.shared_scene_p`` a view after the first is shot in view 1's scene, re-framed
    (:func:`~nearid_lib.data.backgrounds.reframe`), like a multi-view capture; otherwise it gets a
    scene of its own."""
    shared, rng = _scene_draw(cfg, identity_id, k)
    if shared:
        first = B.sample_background_spec(make_rng(cfg.seed, "bg", identity_id, 1), held_out=held_out)
        return draw_background(cfg, held_out, spec=B.reframe(first, rng))
    return draw_background(cfg, held_out, identity_id, k)


def positive_view(cfg, identity_id: str, k: int) -> dict[str, float]:
    """The pose + lighting of view ``k`` (1-based) of identity ``identity_id``: the one place
    that derives it, so generators re-rendering a distractor use exactly the builder's view."""
    wc = cfg.world
    return W.sample_view(make_rng(cfg.seed, "view", identity_id, k), tuple(wc.object_frac),
                         wc.view_strength)


def reshoot_view(cfg, identity_id: str) -> dict[str, float]:
    """The pose + lighting of an identity's **re-shoot** (``world.scene_reshoots``): a new shot of
    the object in view 1's scene, stored apart from its positive views (ID-Sim's CUTE-easy
    analogue needs two shots of one scene; NearID's positives stay in scenes of their own)."""
    wc = cfg.world
    return W.sample_view(make_rng(cfg.seed, "reshoot-view", identity_id), tuple(wc.object_frac),
                         wc.view_strength)


def reshoot_background(cfg, held_out: bool, identity_id: str) -> np.ndarray:
    """View 1's scene re-framed (:func:`~nearid_lib.data.backgrounds.reframe`) for the re-shoot."""
    first = B.sample_background_spec(make_rng(cfg.seed, "bg", identity_id, 1), held_out=held_out)
    return draw_background(cfg, held_out, spec=B.reframe(first, make_rng(cfg.seed, "reshoot-scene", identity_id)))


MAX_PERTURB_TRIES = 20


def source_splits(wc, source: str) -> tuple[str, ...]:
    """Splits whose identities get distractors of ``source``: every split for a training source,
    ``world.unseen_source_splits`` for the others."""
    return WORLD_SPLITS if source in wc.train_sources else tuple(wc.unseen_source_splits)


def distractor_instance(cfg, ident: dict[str, Any], source: str, identity_id: str, k: int,
                        view: dict[str, float], ref_layer: dict[str, Any] | None = None
                        ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The near-identity instance of ``source`` for view ``k`` of an identity and its object layer
    (rendered at the source's resolution): the one derivation shared by the builder and by
    generators that re-render a source. The perturbation is redrawn (same rng stream, so the
    result is deterministic) until it changes at least ``world.min_visible_px`` pixels of the view
    at the stored resolution: a distractor nobody could tell apart measures nothing."""
    wc = cfg.world
    fam, hr = parse_source(source)
    S = int(wc.image_size)
    size = int(wc.source_resolutions[-1]) if hr else S
    ref = ref_layer if ref_layer is not None else W.render_object(ident, view, S, with_parts=False)
    need = W.min_visible_px(S)
    rng = make_rng(cfg.seed, "perturb", source, identity_id, k)
    kind = draw_kind(source, rng, wc.fill_kinds)         # a generator's edit kind for this item
    for _ in range(MAX_PERTURB_TRIES):
        d_ident, _ = W.perturb(ident, kind, rng, mag=float(wc.distractor_mag))
        layer = W.render_object(d_ident, view, size, with_parts=False)
        if W.visible_change(ref, layer) >= need:
            return d_ident, layer
    raise RuntimeError(f"{identity_id} view {k} source {source}: no visible {kind!r} perturbation in "
                       f"{MAX_PERTURB_TRIES} draws (>= {need} changed pixels at {S} px)")


def background_for(cfg, held_out: bool, *keys) -> np.ndarray:
    """The float RGB background the builder draws for ``keys`` (e.g. ``(identity_id, k)``)."""
    return draw_background(cfg, held_out, *keys)


def identity_list(cfg) -> list[dict[str, Any]]:
    wc = cfg.world
    classes = world_classes(wc)
    out = []
    for split, n in zip(WORLD_SPLITS, (wc.n_train_ids, wc.n_val_ids, wc.n_test_ids)):
        for i in range(n):
            iid = f"{split}_{i:05d}"
            rng = make_rng(cfg.seed, "identity", iid)
            # Round-robin classes keep them balanced in every split (small smoke splits too).
            cls = classes[i % len(classes)]
            three = len(wc.views_per_id) > 1 and rng.random() < wc.p_three_views
            n_views = max(wc.views_per_id) if three else min(wc.views_per_id)
            out.append({"id": iid, "split": split, "class_name": cls, "n_views": int(n_views),
                        "params": W.sample_identity(rng, cls)})
    return out
