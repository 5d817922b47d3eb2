"""Token grids through the one feature path (issue 24, item 1): ``features.embed`` with payloads
``tokens`` / ``pooled`` over the layouts of ``features.layouts`` (group arrays, the int8 shard
store) gives the same numbers as the caches and the store read directly, fills whole groups, and
is what ``Embedder`` reads."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from nearid_lib.features import FeatureStore, TokenCache, apply_variant, dataset_refs, embed
from nearid_lib.features.layouts import GroupArrays, ShardGrids
from nearid_lib.features.shards import ShardedTokenStore, decode_tokens, encode_tokens
from nearid_lib.models import load_encoder
from nearid_lib.data.groups import group_items, image_groups
from nearid_lib.features import Embedder
from nearid_lib.features.stream import StreamFeatures

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(0)
    return load_encoder("efficientnet-lite0", tiny=True)[0]


def _arrays(encoder, data, root, store_tokens=True):
    return GroupArrays(encoder, data, image_groups(data), lambda g: group_items(data, g),
                       dict(cache_root=root, batch_size=8, store_tokens=store_tokens), progress=False)


def _backbone(encoder, data, rels, masks, variant):
    ims = [apply_variant(data.image(r), data.mask(m) if variant == "fg" else None, variant) for r, m in zip(rels, masks)]
    with torch.no_grad():
        out = encoder(encoder.preprocess.batch(ims))
    return out.tokens.float(), out.pooled.float()


@pytest.mark.parametrize("variant", ["full", "fg"])
def test_group_arrays_serve_the_cache_bytes_and_fill_whole_groups(smoke_world, encoder, tmp_path, variant):
    data = smoke_world
    group = f"dist:{data.sources[0]}@test"
    rels, masks = group_items(data, group)
    arrays = _arrays(encoder, data, tmp_path)
    store = FeatureStore(layouts={"tokens": arrays, "pooled": arrays})
    pick = [rels[3], rels[0]]
    refs = dataset_refs(data, pick, [masks[3], masks[0]])
    tok = embed(encoder, refs, variant, store, payload="tokens")
    # asking for two images built their whole group, in its own order and batches
    assert store.n_computed == len(dict.fromkeys(rels))
    direct = TokenCache.build_or_load(encoder, rels, masks=masks, variant=variant, data=data, cache_root=tmp_path,
                                      batch_size=8, progress=False)
    assert [c.dir for c in arrays.caches.values()] == [direct.dir]          # the same cache, not a second one
    assert np.array_equal(tok, direct.tokens_for(pick).numpy())
    pooled = embed(encoder, refs, variant, store, payload="pooled", tensor=True)
    assert torch.equal(pooled, direct.pooled_for(pick))
    assert store.hits == 1 and store.misses == 1                            # pooled was read, not computed
    # and the numbers are the backbone's on those images (float16 storage)
    t, p = _backbone(encoder, data, pick, [masks[3], masks[0]], variant)
    assert torch.allclose(torch.from_numpy(tok), t, atol=2e-3, rtol=2e-3)
    assert torch.allclose(pooled, p, atol=2e-3, rtol=2e-3)


def test_images_outside_every_group_get_one_cache_of_their_own(smoke_world, encoder, tmp_path):
    data = smoke_world
    grids = data.grids if getattr(data, "grids", None) is not None and len(data.grids) else None
    if grids is None:
        pytest.skip("the smoke world has no edit grids")
    rels = list(dict.fromkeys(grids["path"].tolist()))[:5]
    masks = [""] * len(rels)
    arrays = _arrays(encoder, data, tmp_path)
    assert not any(r in arrays.owners() for r in rels)
    store = FeatureStore(layouts={"pooled": arrays})
    got = embed(encoder, dataset_refs(data, rels, masks), "full", store, payload="pooled")
    assert len(arrays.caches) == 1 and len(next(iter(arrays.caches.values()))) == len(rels)
    direct = TokenCache.build_or_load(encoder, rels, masks=masks, data=data, cache_root=tmp_path, batch_size=8,
                                      progress=False)
    assert np.array_equal(got, direct.pooled_for(rels).numpy())


def test_a_layout_refuses_another_backbone_and_unknown_payloads(smoke_world, encoder, tmp_path):
    data = smoke_world
    other = load_encoder("siglip2-so400m-patch14-384", tiny=True)[0]
    arrays = _arrays(encoder, data, tmp_path, store_tokens=False)
    store = FeatureStore(layouts={"tokens": arrays, "pooled": arrays})
    refs = dataset_refs(data, *[x[:2] for x in group_items(data, "positives@test")])
    with pytest.raises(ValueError, match="holds the grids of"):
        embed(other, refs, "full", store, payload="pooled")
    with pytest.raises(ValueError, match="store_tokens=False"):
        embed(encoder, refs, "full", store, payload="tokens")
    with pytest.raises(KeyError, match="unknown feature variant"):
        embed(encoder, refs, "sepia", store, payload="pooled")


def test_row_store_tokens_and_pooled_are_the_backbone_outputs(smoke_world, encoder):
    """Without a layout (an uncached Embedder) the payloads are computed into memory rows."""
    data = smoke_world
    rels, masks = [x[:6] for x in group_items(data, "positives@test")]
    store = FeatureStore()
    tok = embed(encoder, dataset_refs(data, rels, masks), "fg", store, payload="tokens", batch_size=4)
    pooled = embed(encoder, dataset_refs(data, rels, masks), "fg", store, payload="pooled", batch_size=4)
    t, p = _backbone(encoder, data, rels, masks, "fg")
    assert tok.shape == tuple(t.shape) and np.allclose(tok, t.numpy(), atol=1e-5)
    assert np.allclose(pooled, p.numpy(), atol=1e-5)
    empty = embed(encoder, [], "full", store, payload="tokens")
    assert empty.shape == (0, encoder.n_tokens, encoder.token_dim)


def test_shard_grids_stream_what_the_disk_budget_refuses(smoke_world, encoder, tmp_path):
    data = smoke_world
    rels, masks = [x[:5] for x in group_items(data, "positives@test")]
    st = ShardedTokenStore(tmp_path / "s", encoder.n_tokens, encoder.token_dim, "int8", writer="w")
    st.max_bytes = 2 * st.rb                         # room for two grids
    stream = StreamFeatures(encoder, data, store=st, batch_size=4, amp_dtype=None)
    store = FeatureStore(layouts={"tokens": ShardGrids(stream)})
    got = embed(encoder, dataset_refs(data, rels, masks), "fg", store, payload="tokens", tensor=True)
    assert len(st) == 2 and stream.stats["written"] == 2
    t, _ = _backbone(encoder, data, rels, masks, "fg")
    want = decode_tokens(encode_tokens(t, "int8"), encoder.n_tokens, encoder.token_dim, "int8")
    assert torch.allclose(got, want, atol=1e-5)        # stored and kept grids: the store's precision
    assert not store.layouts["tokens"].overflow                # nothing piles up in memory
    again = embed(encoder, dataset_refs(data, rels, masks), "fg", store, payload="tokens", tensor=True)
    # past the budget the store streams: the 3 refused grids are computed again, the 2 stored read
    assert torch.equal(again, got) and stream.stats["forwards"] == len(rels) + 3 and len(st) == 2
    with pytest.raises(ValueError, match="variants full and fg"):
        embed(encoder, dataset_refs(data, rels, masks), "fg_grey", store, payload="tokens")


def test_embedder_reads_through_embed(smoke_world, encoder, tmp_path):
    """Embedder's tokens / pooled / embed are features.embed over its store: same rows."""
    data = smoke_world
    rels, masks = [x[:7] for x in group_items(data, "positives@val")]
    emb = Embedder(encoder, data, cache_root=tmp_path, progress=False, batch_size=8)
    refs = dataset_refs(data, rels, masks)
    assert torch.equal(emb.tokens(rels, "fg"), embed(encoder, refs, "fg", emb.store, payload="tokens", tensor=True))
    assert emb.store.layouts["tokens"] is emb.arrays and emb.store.hits >= 1
    unc = Embedder(encoder, data, use_cache=False, progress=False, batch_size=8)
    assert torch.allclose(unc.embed(rels, "fg"), emb.embed(rels, "fg"), atol=5e-3)
    with pytest.raises(KeyError, match="not an image of the dataset"):
        emb.embed(["img/nope.png"])
