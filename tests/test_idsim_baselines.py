"""Colour-histogram baseline: Bhattacharyya coefficients by hand, bin edges, the loop reference."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from nearid_lib.idsim.baselines import colour_histogram


def _img(rgb_left, rgb_right=None, n=8):
    a = np.zeros((n, n, 3), np.uint8)
    a[:, : n // 2] = rgb_left
    a[:, n // 2:] = rgb_right if rgb_right is not None else rgb_left
    return Image.fromarray(a)


def test_bhattacharyya_hand_cases():
    red, blue = colour_histogram(_img((255, 0, 0)), size=8), colour_histogram(_img((0, 0, 255)), size=8)
    half = colour_histogram(_img((255, 0, 0), (0, 0, 255)), size=8)
    assert red @ red == pytest.approx(1.0) and red @ blue == pytest.approx(0.0)
    assert red @ half == pytest.approx(np.sqrt(0.5))              # sqrt(1 * 0.5)
    # 31 and 32 fall in different bins of 8 (width 32), 0 and 31 in the same one
    assert colour_histogram(_img((0, 0, 0)), size=8) @ colour_histogram(_img((31, 31, 31)), size=8) == pytest.approx(1.0)
    assert colour_histogram(_img((31, 0, 0)), size=8) @ colour_histogram(_img((32, 0, 0)), size=8) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="bins"):
        colour_histogram(_img((0, 0, 0)), bins=0)


def test_matches_pixel_loop():
    rng = np.random.default_rng(0)
    arr = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
    got = colour_histogram(Image.fromarray(arr), bins=4, size=16)
    h = np.zeros(64)
    for px in arr.reshape(-1, 3):
        r, g, b = (int(v) * 4 // 256 for v in px)
        h[(r * 4 + g) * 4 + b] += 1
    np.testing.assert_allclose(got, np.sqrt(h / h.sum()), atol=1e-12)


def test_baseline_embeddings_load_each_image_once_and_match_the_separate_rows(smoke_world, monkeypatch):
    """Both reference rows from one load of the images: the vectors of the two functions that each
    load every image themselves (the slow reference), in the order colour_hist, random."""
    from nearid_lib.config import get_profile
    from nearid_lib.idsim import baselines as B
    from nearid_lib.idsim.sampling import CTX

    cfg = get_profile("smoke")
    rels = smoke_world.positives.img1.tolist()[:3]
    keys = rels + [CTX + rels[0], rels[1]]                  # a context edit and a repeated key
    want_hist = B.histogram_embeddings(smoke_world, keys, seed=3)
    want_rand = B.random_init_embeddings(cfg, smoke_world, keys, seed=3)
    loads = []
    real = B.load_key
    monkeypatch.setattr(B, "load_key", lambda data, k, seed=0: loads.append(k) or real(data, k, seed))
    got = B.baseline_embeddings(cfg, smoke_world, keys, seed=3)
    assert sorted(loads) == sorted(dict.fromkeys(keys))     # every distinct key loaded once
    assert list(got) == ["colour_hist", "random"]
    for name, want in (("colour_hist", want_hist), ("random", want_rand)):
        assert list(got[name]) == list(want)
        for k in want:
            np.testing.assert_array_equal(got[name][k], want[k])
