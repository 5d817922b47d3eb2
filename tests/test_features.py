"""Feature cache: same numbers as encoding on the fly, keyed correctly, resumable, fg variant."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from nearid_lib.features import OnTheFlyFeatures, TokenCache, apply_variant
from nearid_lib.models import load_encoder

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def encoder():
    model, _ = load_encoder("siglip2-so400m-patch14-384", tiny=True)
    return model


@pytest.fixture()
def dataset(tmp_path):
    """Seven 40x40 RGB PNGs with a square foreground mask each (mode L, 255 = object)."""
    root = tmp_path / "nearid"
    (root / "img").mkdir(parents=True)
    rng = np.random.default_rng(0)
    rels, masks = [], []
    for i in range(7):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(root / f"img/{i}.png")
        m = np.zeros((40, 40), dtype=np.uint8)
        m[8 + i:28 + i, 10:30] = 255
        Image.fromarray(m, mode="L").save(root / f"img/{i}_m.png")
        rels.append(f"img/{i}.png")
        masks.append(f"img/{i}_m.png")
    (root / "manifest.json").write_text(json.dumps({"complete": True, "seed": 0}))
    return root, rels, masks


def _direct(encoder, root, rels, masks=None, variant="full"):
    imgs = []
    for i, r in enumerate(rels):
        im = Image.open(root / r).convert("RGB")
        m = np.asarray(Image.open(root / masks[i]).convert("L")) > 127 if masks else None
        imgs.append(apply_variant(im, m, variant))
    with torch.no_grad():
        return encoder(encoder.preprocess.batch(imgs))


def test_cache_matches_direct_encoding_and_is_reused(encoder, dataset, tmp_path):
    root, rels, _ = dataset
    cache = TokenCache.build_or_load(encoder, rels, root=root, cache_root=tmp_path / "c", batch_size=3,
                                     chunk_size=4, progress=False)
    assert len(cache) == 7 and cache.n_tokens == encoder.n_tokens and cache.token_dim == encoder.token_dim
    ref = _direct(encoder, root, rels)
    rows = cache.rows([rels[5], rels[1]])
    assert rows.tolist() == [5, 1]
    # float16 storage: relative error ~1e-3
    assert torch.allclose(cache.tokens(rows), ref.tokens[[5, 1]], rtol=2e-3, atol=2e-3)
    assert torch.allclose(cache.pooled_for(rels), ref.pooled, rtol=2e-3, atol=2e-3)
    assert cache.tokens(np.array([[0, 6], [6, 0]])).shape == (2, 2, encoder.n_tokens, encoder.token_dim)
    # second call: loaded, not rebuilt (the file is not rewritten)
    mtime = (cache.dir / "tokens.npy").stat().st_mtime_ns
    again = TokenCache.build_or_load(encoder, rels, root=root, cache_root=tmp_path / "c", progress=False)
    assert again.dir == cache.dir and (again.dir / "tokens.npy").stat().st_mtime_ns == mtime
    with pytest.raises(KeyError, match="'img/nope.png' is not in feature cache"):
        cache.rows(["img/nope.png"])


def test_key_changes_with_variant_list_preprocessing_and_dataset(encoder, dataset, tmp_path):
    root, rels, masks = dataset
    kw = dict(root=root, cache_root=tmp_path / "c", progress=False)
    a = TokenCache.build_or_load(encoder, rels, **kw)
    b = TokenCache.build_or_load(encoder, rels, masks=masks, variant="fg", **kw)
    c = TokenCache.build_or_load(encoder, rels[:5], **kw)
    other, _ = load_encoder("siglip2-so400m-patch14-384", tiny=True)
    other.preprocess = type(other.preprocess)(32, resample="bicubic")   # different normalisation
    d = TokenCache.build_or_load(other, rels, **kw)
    (root / "manifest.json").write_text(json.dumps({"complete": True, "seed": 1}))   # regenerated data
    e = TokenCache.build_or_load(encoder, rels, **kw)
    assert len({x.dir for x in (a, b, c, d, e)}) == 5


def test_fg_variant_blacks_out_the_background(encoder, dataset, tmp_path):
    root, rels, masks = dataset
    cache = TokenCache.build_or_load(encoder, rels, root=root, masks=masks, variant="fg",
                                     cache_root=tmp_path / "c", progress=False)
    ref = _direct(encoder, root, rels, masks, "fg")
    assert torch.allclose(cache.pooled_for(rels), ref.pooled, rtol=2e-3, atol=2e-3)
    full = _direct(encoder, root, rels)
    assert not torch.allclose(full.pooled, ref.pooled, atol=1e-2)
    im = apply_variant(Image.open(root / rels[0]).convert("RGB"),
                       np.asarray(Image.open(root / masks[0])) > 127, "fg")
    arr = np.asarray(im)
    assert arr[0, 0].sum() == 0 and arr[:8].max() == 0        # outside the mask: black
    with pytest.raises(ValueError, match="needs a mask"):
        TokenCache.build_or_load(encoder, rels, root=root, variant="fg", cache_root=tmp_path / "c",
                                 progress=False)


def test_interrupted_build_resumes(encoder, dataset, tmp_path):
    root, rels, _ = dataset
    kw = dict(root=root, cache_root=tmp_path / "c", batch_size=2, chunk_size=2, progress=False)
    calls = []

    def loader(rel):
        calls.append(rel)
        return Image.open(root / rel).convert("RGB")

    assert TokenCache.build_or_load(encoder, rels, loader=loader, max_chunks=2, **kw) is None
    assert len(calls) == 4                                  # two chunks of two
    assert not list((tmp_path / "c").glob("*/meta.json"))  # nothing complete is visible yet
    calls.clear()
    cache = TokenCache.build_or_load(encoder, rels, loader=loader, **kw)
    assert calls == rels[4:]                                # only the missing chunks were encoded
    ref = _direct(encoder, root, rels)
    assert torch.allclose(cache.tokens(np.arange(7)), ref.tokens, rtol=2e-3, atol=2e-3)
    assert not list((tmp_path / "c").glob("*.partial"))


def test_bad_inputs_name_the_problem(encoder, dataset, tmp_path):
    root, rels, masks = dataset
    with pytest.raises(FileNotFoundError, match="img/missing.png"):
        TokenCache.build_or_load(encoder, rels + ["img/missing.png"], root=root, cache_root=tmp_path / "c",
                                 progress=False)
    with pytest.raises(ValueError, match="two masks"):
        TokenCache.build_or_load(encoder, [rels[0], rels[0]], masks=[masks[0], masks[1]], root=root,
                                 cache_root=tmp_path / "c", progress=False)
    with pytest.raises(KeyError, match="unknown feature variant"):
        TokenCache.build_or_load(encoder, rels, root=root, variant="blur", cache_root=tmp_path / "c")


def test_on_the_fly_equals_cache_and_applies_augmentation(encoder, dataset, tmp_path):
    root, rels, masks = dataset
    fly = OnTheFlyFeatures(encoder, root=root, variant="fg")
    out = fly.features(rels[:3], masks[:3])
    cache = TokenCache.build_or_load(encoder, rels, masks=masks, root=root, variant="fg",
                                     cache_root=tmp_path / "c", progress=False)
    assert torch.allclose(out.tokens, cache.tokens_for(rels[:3]), rtol=2e-3, atol=2e-3)
    flip = OnTheFlyFeatures(encoder, root=root, augment=lambda im, m, rng: im.transpose(Image.FLIP_LEFT_RIGHT))
    assert not torch.allclose(flip.features(rels[:2]).pooled, OnTheFlyFeatures(encoder, root=root)
                              .features(rels[:2]).pooled, atol=1e-4)


def test_reads_through_the_data_helpers_nearid_data(encoder, dataset, tmp_path):
    """``data=`` (the schema's NearIDData) supplies root, images and masks."""
    schema = pytest.importorskip("nearid_lib.data.schema")
    import pandas as pd

    root, rels, masks = dataset
    data = schema.NearIDData(root=root, manifest={}, identities=pd.DataFrame(), positives=pd.DataFrame(),
                             distractors={}, sources=[], train_sources=[])
    via_data = TokenCache.build_or_load(encoder, rels, masks=masks, variant="fg", data=data,
                                        cache_root=tmp_path / "a", progress=False)
    via_root = TokenCache.build_or_load(encoder, rels, masks=masks, variant="fg", root=root,
                                        cache_root=tmp_path / "b", progress=False)
    assert via_data.dir.name == via_root.dir.name       # same key: same root fingerprint
    assert torch.equal(via_data.tokens(np.arange(7)), via_root.tokens(np.arange(7)))


def test_one_definition_of_foreground_only():
    """fg (black) and fg_grey (FPR's background removal) are fill_background with two fills: every
    pixel outside the mask is the fill, every pixel inside is unchanged (checked pixel by pixel);
    a 0-255 mask means > 127; a mask of another size is an error naming the variant."""
    import numpy as np
    from PIL import Image

    from nearid_lib.features.variants import BG_GREY, apply_variant, fill_background, needs_mask
    from nearid_lib.fpr.encoders import remove_background

    rng = np.random.default_rng(0)
    arr = rng.integers(0, 256, (9, 7, 3), dtype=np.uint8)
    mask = rng.random((9, 7)) > 0.5
    im = Image.fromarray(arr)
    for variant, fill in (("fg", (0, 0, 0)), ("fg_grey", BG_GREY)):
        out = np.asarray(apply_variant(im, mask, variant))
        for y in range(9):
            for x in range(7):
                want = arr[y, x] if mask[y, x] else np.array(fill, np.uint8)
                assert (out[y, x] == want).all()
        assert needs_mask(variant)
    np.testing.assert_array_equal(np.asarray(remove_background(im, mask)), np.asarray(apply_variant(im, mask, "fg_grey")))
    as_l = (mask * 255).astype(np.uint8)
    as_l[0, 0] = 100 if mask[0, 0] else 0                     # <= 127 is background
    ref = mask.copy()
    ref[0, 0] = False
    np.testing.assert_array_equal(np.asarray(fill_background(im, as_l)), np.asarray(fill_background(im, ref)))
    with pytest.raises(ValueError, match="variant 'fg': mask size"):
        apply_variant(im, mask[:5], "fg")
    with pytest.raises(ValueError, match=r"^views/a\.png: mask size \(7, 5\) differs"):   # names the image
        apply_variant(im, mask[:5], "fg", where="views/a.png")
    with pytest.raises(ValueError, match="needs a mask"):
        apply_variant(im, None, "fg_grey")


def _build_counting(encoder, root, rels, cache_root, barrier, log):
    def loader(rel):
        with open(log, "a") as f:         # one line per image this process encodes
            f.write(rel + "\n")
        return Image.open(root / rel).convert("RGB")

    barrier.wait()                        # both processes ask for the cache at the same moment
    TokenCache.build_or_load(encoder, rels, root=root, cache_root=cache_root, loader=loader, batch_size=2,
                             chunk_size=2, progress=False)


def test_two_processes_asking_for_one_cache_build_it_once(encoder, dataset, tmp_path):
    """Two sweep workers needing the same cache take turns (a lock per cache): the second loads the
    first's. Without it both wrote one partial folder, and one read a half-created pooled.npy
    (EOFError, seen in a mini run with two workers and empty caches)."""
    import multiprocessing as mp

    root, rels, _ = dataset
    ctx = mp.get_context("fork")
    barrier, log = ctx.Barrier(2, timeout=20), tmp_path / "loads.txt"
    procs = [ctx.Process(target=_build_counting, args=(encoder, root, rels, tmp_path / "c", barrier, log))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert sorted(log.read_text().split()) == sorted(rels)          # every image encoded once, in all
    cache = TokenCache.build_or_load(encoder, rels, root=root, cache_root=tmp_path / "c", progress=False)
    np.testing.assert_allclose(cache.pooled_for(rels).numpy(), _direct(encoder, root, rels)[1], rtol=0, atol=2e-3)
