"""Evaluation reads the sharded token store that training fills (issue 22, item 2): with a codec as
``train.token_store`` (``int8`` in paper) an Embedder's head embeddings are the head on the decoded
grids, whether read or just computed; the grids go to the same folder as training's, each process
writes its own shards, the group caches keep only pooled outputs, and the profile decides."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from nearid_lib.config import get_profile
from nearid_lib.features import apply_variant
from nearid_lib.features.shards import decode_tokens, encode_tokens
from nearid_lib.models import MAPHead, load_encoder
from nearid_lib.data.groups import group_items
from nearid_lib.features import Embedder
from nearid_lib.features.stream import StreamFeatures, process_writer
from nearid_lib.nearid.train_inputs import train_features

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(0)
    return load_encoder("efficientnet-lite0", tiny=True)[0]


@pytest.fixture(scope="module")
def head(encoder):
    torch.manual_seed(1)
    return MAPHead(encoder.token_dim, num_heads=2, out_dim=16).eval()


def _test_views(data, n=5):
    rels, masks = group_items(data, "positives@test")
    return rels[:n], masks[:n]


def _tokens_by_hand(encoder, data, rels, masks, variant):
    """The backbone's own float tokens, one image at a time."""
    out = []
    for r, m in zip(rels, masks):
        im = apply_variant(data.image(r), data.mask(m) if variant == "fg" else None, variant)
        with torch.no_grad():
            out.append(encoder(encoder.preprocess.batch([im])).tokens.float())
    return torch.cat(out)


def _head_one_at_a_time(head, grids):
    with torch.no_grad():
        return F.normalize(torch.cat([head(g[None]) for g in grids]), dim=-1)


@pytest.mark.parametrize("variant", ["full", "fg"])
def test_head_embeddings_are_the_head_on_decoded_store_grids(smoke_world, encoder, head, tmp_path, variant):
    data = smoke_world
    rels, masks = _test_views(data)
    emb = Embedder(encoder, data, head=head, cache_root=tmp_path, token_store="int8", progress=False)
    got = emb.embed(rels, variant)
    store = emb.stream().store
    # the embeddings are the head on the decoded stored grids (atol: the head's float32 reductions in a
    # batch of 5 against one at a time; nothing else differs)
    stored = store.get([(r, variant) for r in rels])
    assert torch.allclose(got, _head_one_at_a_time(head, stored), atol=1e-5)
    # the stored grids are the int8 code of the backbone's own tokens: within one quantisation step of
    # each token (a batch of 5 and a batch of 1 run the backbone's kernels in another order, and a float
    # that lands on a rounding boundary may round the other way; that is one step, never more)
    t = _tokens_by_hand(encoder, data, rels, masks, variant)
    step = t.abs().amax(dim=-1, keepdim=True) / 127.0
    mine = decode_tokens(encode_tokens(t, "int8"), encoder.n_tokens, encoder.token_dim, "int8")
    assert ((stored - mine).abs() <= 1.01 * step + 1e-6).all()
    assert (stored - mine).abs().gt(1e-6).float().mean() < 0.01      # and a step only at rare boundaries
    assert sorted(store.keys()) == sorted((r, variant) for r in rels)
    assert emb.stream().stats["forwards"] == len(rels)
    # a fresh Embedder (another notebook) reads them: no backbone forward, the same bytes
    again = Embedder(encoder, data, head=head, cache_root=tmp_path, token_store="int8", progress=False)
    assert torch.equal(again.embed(rels, variant), got)
    assert again.stream().stats["forwards"] == 0 and again.stream().stats["hits"] == len(rels)
    # the float16 group caches were never asked for tokens
    assert not list(tmp_path.glob("*tokens*"))


def test_evaluation_reads_what_training_wrote(smoke_world, encoder, head, tmp_path):
    data = smoke_world
    cfg = get_profile("smoke", overrides={"train.token_store": "int8"})
    feats = train_features(cfg, data, encoder, rank=0, cache_root=tmp_path)
    assert isinstance(feats, StreamFeatures)
    rels, masks = _test_views(data, 4)
    fg = np.array([False, True, False, True])
    feats.tokens(rels, masks, fg, np.random.default_rng(0))        # "training" wrote these grids
    emb = Embedder(encoder, data, head=head, profile=cfg, cache_root=tmp_path, token_store="int8",
                   progress=False)
    assert emb.stream().store.root == feats.store.root               # one store for both
    emb.embed([rels[0], rels[2]], "full")
    emb.embed([rels[1], rels[3]], "fg")
    assert emb.stream().stats["forwards"] == 0 and emb.stream().stats["hits"] == 4


def test_each_process_writes_its_own_shards(smoke_world, encoder, tmp_path):
    me = process_writer("rank0")
    other = subprocess.run([sys.executable, "-c", "from nearid_lib.features.stream import process_writer as w;"
                            "print(w('rank0'))"], capture_output=True, text=True, check=True).stdout.strip()
    assert me.startswith("rank0-") and other.startswith("rank0-") and me != other
    data = smoke_world
    cfg = get_profile("smoke", overrides={"train.token_store": "int8"})
    a = train_features(cfg, data, encoder, rank=0, cache_root=tmp_path)
    rels, masks = _test_views(data, 2)
    a.tokens(rels, masks, np.array([False, False]), np.random.default_rng(0))
    b = Embedder(encoder, data, cache_root=tmp_path, token_store="int8", progress=False)
    b.tokens(rels[:1], "fg")
    writers = {p.stem.rsplit("-", 1)[0] for p in a.store.root.glob("*.bin")}
    assert len(writers) == 2 or a.store.writer == b.stream().store.writer   # same process: one writer name
    assert all(w.startswith("rank0-") for w in writers)


def test_profile_decides_where_tokens_live(smoke_world, encoder, tmp_path, monkeypatch):
    monkeypatch.delenv("NEARID_SET", raising=False)
    data = smoke_world
    assert Embedder(encoder, data, profile=get_profile("paper")).token_store == "int8"
    assert Embedder(encoder, data, profile=get_profile("mini")).token_store == "cache"
    assert Embedder(encoder, data).token_store == "cache"
    # the profile as resolved, overrides included (by name, an Embedder would have re-read it without them)
    assert Embedder(encoder, data, profile=get_profile("mini", {"train.token_store": "int8"})).token_store == "int8"
    monkeypatch.setenv("NEARID_SET", "train.token_store=float16")
    assert Embedder(encoder, data, profile=get_profile("smoke")).token_store == "float16"
    with pytest.raises(TypeError, match="get_profile"):
        Embedder(encoder, data, profile="smoke")
    # store mode: pooled outputs (frozen baselines) as in cache mode, from a pooled-only group cache
    rels, _ = _test_views(data)
    a = Embedder(encoder, data, cache_root=tmp_path / "a", token_store="int8", progress=False)
    c = Embedder(encoder, data, cache_root=tmp_path / "c", token_store="cache", progress=False)
    assert torch.equal(a.embed(rels, "full"), c.embed(rels, "full"))
    assert a.cache("positives@test").meta.get("store_tokens") is False
    assert c.cache("positives@test").meta.get("store_tokens") is True
    with pytest.raises(ValueError, match="variants full and fg"):
        a.tokens(rels, "grey")


def test_build_prefills_the_store_and_resumes(smoke_world, encoder, tmp_path):
    data = smoke_world
    emb = Embedder(encoder, data, cache_root=tmp_path, token_store="int8", progress=False)
    emb.build(["positives@test", "dist:" + data.sources[0] + "@test"], variants=("full", "fg"))
    n = len(set(group_items(data, "positives@test")[0])) + len(set(group_items(data, f"dist:{data.sources[0]}@test")[0]))
    assert len(emb.stream().store) == 2 * n
    again = Embedder(encoder, data, cache_root=tmp_path, token_store="int8", progress=False)
    again.build(["positives@test"], variants=("full", "fg"))
    assert again.stream().stats["written"] == 0 and again.stream().stats["forwards"] == 0
