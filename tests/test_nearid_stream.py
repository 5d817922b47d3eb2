"""Streamed backbone + sharded store as training inputs: the fg decision of each slot selects the
foreground-only grid of exactly that image, store hits equal what was streamed, the disk budget
falls back to streaming, prefill resumes, and the results match TrainFeatures' uncached mode."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from nearid_lib.config import get_profile
from nearid_lib.features import apply_variant
from nearid_lib.features.shards import ShardedTokenStore, record_bytes
from nearid_lib.models import load_encoder
from nearid_lib.nearid.rows import epoch_rows
from nearid_lib.features.stream import StreamFeatures, open_train_store, store_dir
from nearid_lib.nearid.prefill_step import eval_items, train_items
from nearid_lib.nearid.train_inputs import TrainFeatures

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(0)
    return load_encoder("efficientnet-lite0", tiny=True)[0]


def _slots(data, n=6):
    rows = epoch_rows(data, get_profile("smoke"), 0).take(np.arange(n))
    return list(rows.anchor), list(rows.anchor_mask)


def _one(encoder, data, rel, mask, variant):
    im = apply_variant(data.image(rel), data.mask(mask) if variant == "fg" else None, variant)
    with torch.no_grad():
        return encoder(encoder.preprocess.batch([im])).tokens[0].float()


def test_fg_decision_selects_that_images_fg_grid(smoke_world, encoder, tmp_path):
    data = smoke_world
    rels, masks = _slots(data, 4)
    # the same image twice with opposite decisions, and images in a mixed order
    rels, masks = rels + [rels[0]], masks + [masks[0]]
    fg = np.array([True, False, True, False, False])
    for store in (None, ShardedTokenStore(tmp_path, encoder.n_tokens, encoder.token_dim, "float32")):
        feats = StreamFeatures(encoder, data, store=store, batch_size=2)
        for _ in range(2):                       # second pass: every slot comes from the store
            tok = feats.tokens(rels, masks, fg, np.random.default_rng(0))
            assert tok.shape == (5, encoder.n_tokens, encoder.token_dim) and tok.dtype == torch.float32
            for i, (r, m, f) in enumerate(zip(rels, masks, fg)):
                want = _one(encoder, data, r, m, "fg" if f else "full")
                assert torch.allclose(tok[i], want, atol=1e-5), f"slot {i}"
            assert not torch.allclose(tok[0], tok[4], atol=1e-3)   # fg and full of one image differ
    assert feats.stats["hits"] == 5 and feats.stats["forwards"] == 5 and feats.stats["written"] == 5


def test_int8_store_hits_match_streamed_and_train_features(smoke_world, encoder, tmp_path):
    data = smoke_world
    rels, masks = _slots(data, 6)
    fg = np.array([True, False] * 3)
    rng = np.random.default_rng(0)
    live = TrainFeatures(encoder, data, get_profile("smoke", overrides={"train.use_cache": False,
                                                                        "train.augment": False}),
                         cache_root=tmp_path / "cache", progress=False).tokens(rels, masks, fg, rng)
    store = open_train_store(encoder, data, tmp_path, dtype="int8")
    feats = StreamFeatures(encoder, data, store=store)
    first = feats.tokens(rels, masks, fg, rng)          # streamed (misses) and written
    again = feats.tokens(rels, masks, fg, rng)          # int8 store hits
    # a step sees the store's precision whether the grid was stored before or not (cold = warm)
    assert torch.equal(first, again)
    amax = live.abs().amax(-1, keepdim=True)            # int8: within half a step of the live tokens
    assert torch.all((first - live).abs() <= amax / 254 * 1.001 + 1e-5)
    assert not torch.equal(first, live)
    assert feats.stats["forwards"] == 6 and feats.stats["hits"] == 6
    # a store of another backbone/dataset/dtype lives in another folder
    assert store_dir(encoder, data, tmp_path, "int8") != store_dir(encoder, data, tmp_path, "float16")


def test_budget_falls_back_to_streaming(smoke_world, encoder, tmp_path):
    data = smoke_world
    rels, masks = _slots(data, 5)
    fg = np.zeros(5, dtype=bool)
    rb = record_bytes(encoder.n_tokens, encoder.token_dim, "float32")
    store = ShardedTokenStore(tmp_path, encoder.n_tokens, encoder.token_dim, "float32", max_bytes=2 * rb)
    feats = StreamFeatures(encoder, data, store=store)
    a = feats.tokens(rels, masks, fg, None)
    b = feats.tokens(rels, masks, fg, None)
    assert len(store) == 2 and feats.stats["hits"] == 2 and feats.stats["forwards"] == 8
    assert torch.allclose(a, b, atol=1e-5)


def test_prefill_covers_training_and_resumes(smoke_world, encoder, tmp_path):
    data = smoke_world
    cfg = get_profile("smoke")
    items = train_items(data, cfg)
    assert len(items) == len({r for r, _ in items}) and all(m for _, m in items)
    m = data.mtg[data.mtg["split"] == "train"]
    mtg = {r for j in (1, 2) for k in ("original", "inpainted") for r in m[f"image_{j}_{k}"]}
    assert mtg and {r for r, _ in items[:len(mtg)]} == mtg          # most-reused images first
    assert sorted(items) == sorted(train_items(data, cfg, by_reuse=False))
    store = open_train_store(encoder, data, tmp_path, dtype="int8")
    feats = StreamFeatures(encoder, data, store=store, batch_size=8)
    assert feats.prefill(items[:5], progress=False) == 10          # 5 images x (full, fg), then "killed"
    store2 = open_train_store(encoder, data, tmp_path, dtype="int8")
    feats2 = StreamFeatures(encoder, data, store=store2, batch_size=8)
    assert feats2.prefill(items, progress=False) == 2 * len(items) - 10
    rows = epoch_rows(data, cfg, 0)
    rels = list(rows.anchor) + list(rows.distractors[rows.distractors != ""])
    masks = list(rows.anchor_mask) + list(rows.dist_masks[rows.distractors != ""])
    fg = np.random.default_rng(1).random(len(rels)) < 0.5
    feats2.tokens(rels, masks, fg, None)
    assert feats2.stats["hits"] == len(rels)                       # a prefilled store serves every slot
    test = eval_items(data, ("test",))
    assert not {r for r, _ in test} & {r for r, _ in items}


def test_store_and_pixel_augmentation_exclude_each_other(smoke_world, encoder, tmp_path):
    store = ShardedTokenStore(tmp_path, encoder.n_tokens, encoder.token_dim, "int8")
    with pytest.raises(ValueError, match="augmentations"):
        StreamFeatures(encoder, smoke_world, store=store, augment=lambda im, rng: im)
    rels, masks = _slots(smoke_world, 2)
    flip = StreamFeatures(encoder, smoke_world, augment=lambda im, rng: im.transpose(0))
    plain = StreamFeatures(encoder, smoke_world)
    a = flip.tokens(rels * 2, masks * 2, np.zeros(4, bool), np.random.default_rng(0))
    assert flip.stats["forwards"] == 4                              # no deduplication under augmentation
    assert not torch.allclose(a, plain.tokens(rels * 2, masks * 2, np.zeros(4, bool), None), atol=1e-4)


def test_store_keeps_its_disk_reserve_and_streams_the_rest(smoke_world, encoder, tmp_path, monkeypatch, capsys):
    """The store writes while its file system keeps the reserve free, read at every write: two
    writers that never read each other's shards share that one limit; past it the grids are
    streamed (the same numbers on every read) and a prefill stops."""
    import shutil

    from nearid_lib.features import disk

    data = smoke_world
    rels, masks = _slots(data, 5)
    fg = np.zeros(5, dtype=bool)
    rb = record_bytes(encoder.n_tokens, encoder.token_dim, "int8")
    reserve = 10**6

    def usage(path):                      # room for 2.5 grids above the reserve, less what the stores wrote
        used = sum(f.stat().st_size for f in tmp_path.rglob("*.bin"))
        return shutil._ntuple_diskusage(10**9, used, reserve + 2 * rb + rb // 2 - used)

    monkeypatch.setattr(disk.shutil, "disk_usage", usage)
    # the default reserve: 5% of the disk, at most 20 GB
    assert open_train_store(encoder, data, tmp_path, dtype="int8", writer="x").keep_free == 5 * 10**7
    a = StreamFeatures(encoder, data, store=open_train_store(encoder, data, tmp_path, dtype="int8", writer="rank0",
                                                             keep_free_gb=reserve / 1e9))
    b = StreamFeatures(encoder, data, store=open_train_store(encoder, data, tmp_path, dtype="int8", writer="rank1",
                                                             keep_free_gb=reserve / 1e9))
    a.tokens(rels[:1], masks[:1], fg[:1], None)
    first = b.tokens(rels[1:], masks[1:], fg[1:], None)
    assert (len(a.store), len(b.store)) == (1, 1)          # b had room for one more, not two
    assert a.store.room() == 0 and b.store.room() == 0
    again = b.tokens(rels[1:], masks[1:], fg[1:], None)
    assert torch.equal(first, again)                        # refused grids come at the store's precision
    assert b.stats["hits"] == 1 and b.stats["forwards"] == 4 + 3
    assert b.prefill([(r, m) for r, m in zip(rels, masks)], progress=False) == 0
    assert capsys.readouterr().out.count("no more grids are written") == 2     # once per store


def test_the_disk_reserve_is_no_part_of_the_stores_key(monkeypatch):
    """How much a store may write changes no record: the code the store's folder is keyed by
    (store_code) does not reach the reserve, so changing it keeps a filled store."""
    from nearid_lib.features import stream
    from nearid_lib.runtime.code_closure import code_closure

    roots = []
    monkeypatch.setattr(stream, "closure_fingerprint", lambda *r: roots.extend(r) or "")
    stream.store_code()
    mods = code_closure(*roots)
    assert "features/shards.py" in mods and "features/disk.py" not in mods and "features/stream.py" not in mods
