"""PrefixStore.using: another model with the same frozen prefix reads and extends a store for a
``with`` block (what notebook 09 did by reassigning ``store.model``); model_embeddings / token_maps
compute a missing feature with the model they were given."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from nearid_lib.idsim.embed import token_maps
from nearid_lib.idsim.prefix import PrefixStore


class _Model:
    """A fake ID-Sim model: prefix = preprocessed image + ``shift``; tokens = the prefix as one token."""

    def __init__(self, shift: float, key: str = "same"):
        self.shift, self.key = shift, key

    def cache_key(self):
        return self.key

    def preprocess(self, img):
        return torch.tensor(np.asarray(img, dtype=np.float32).mean((0, 1)))      # [3]

    def prefix(self, x):
        return x + self.shift

    def from_prefix(self, f):
        return SimpleNamespace(tokens=f[:, None, :])


_DATA = SimpleNamespace(image=lambda rel, where=None: Image.new("RGB", (4, 4), (10 * len(rel), 20, 30)))


def test_using_swaps_the_computing_model_for_the_block_only():
    a, b = _Model(1.0), _Model(5.0)
    store = PrefixStore(a, _DATA)
    store.ensure(["x"])
    with store.using(b) as s:
        assert s is store and store.model is b
        store.ensure(["yy"])                                    # computed by b
    assert store.model is a
    base = torch.tensor([20.0, 20.0, 30.0])                     # "yy": 10 * 2 = 20 red
    assert torch.equal(store.get(["yy"])[0], (base + 5.0).half().float())
    assert torch.equal(store.get(["x"])[0], (torch.tensor([10.0, 20.0, 30.0]) + 1.0).half().float())
    with pytest.raises(RuntimeError):
        with store.using(b):
            raise RuntimeError("boom")
    assert store.model is a                                     # restored after an error too
    with pytest.raises(ValueError, match="'other'"):
        with store.using(_Model(0.0, key="other")):
            pass


def test_token_maps_compute_missing_features_with_their_model():
    a, b = _Model(1.0), _Model(5.0)
    shared = PrefixStore(a, _DATA)
    got = token_maps(b, shared, ["x", "yy"])
    want = token_maps(b, PrefixStore(b, _DATA), ["x", "yy"])    # a store of b's own
    np.testing.assert_array_equal(got, want)
    assert shared.model is a


def test_a_new_store_on_the_same_folder_reads_the_rows_whichever_call_comes_first(tmp_path):
    """get() and ensure() open one table (features.feature_table): a store reopened on a folder reads
    what an earlier one wrote, even when get() is its first call (it computes nothing)."""
    a = _Model(1.0)
    first = PrefixStore(a, _DATA, path=tmp_path / "p")
    first.ensure(["x", "yy"])
    first.save()
    again = PrefixStore(_Model(1.0), _DATA, path=tmp_path / "p")
    got = again.get(["yy", "x"])
    assert again.n_computed == 0
    assert torch.equal(got, first.get(["yy", "x"]))
    assert len(list((tmp_path / "p").iterdir())) == 1                   # one table folder
