"""Simulated personalization methods follow the procedural world."""
from __future__ import annotations

import numpy as np


def test_simulated_methods_follow_the_world(tmp_path):
    """The simulated generator reproduces the world's reference images pixel for pixel at drift 0
    (same identity parameters), and drift grows the pixel change inside the object."""
    from nearid_lib import get_profile
    from nearid_lib.data import world as W
    from nearid_lib.fpr.methods import fpr_identity, reference_view, render_generated

    cfg = get_profile("smoke", **{"world.image_size": 48})
    ident, _ = fpr_identity(cfg, "fpr_fish_001", "fish")
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
