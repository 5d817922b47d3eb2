"""The one feature path: embed() over a FeatureStore (keys, chunks, resumption, errors)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from nearid_lib.features import FeatureStore, ImageRef, embed, file_refs
from nearid_lib.features.variants import BG_GREY


class _Mean:
    """An encoder whose embedding is the image's mean colour + 1 (L2-normalised), counting images."""

    name, frozen, tiny, embed_dim = "mean", True, False, 3

    def __init__(self):
        self.seen: list[int] = []

    def cache_key(self):
        return "mean-colour"

    def embed(self, images, batch_size=32):
        self.seen.append(len(images))
        x = torch.tensor(np.stack([np.asarray(im, np.float32).mean((0, 1)) + 1.0 for im in images]))
        return torch.nn.functional.normalize(x, dim=-1)


def _refs(n, start=0):
    return [ImageRef(f"k{i}", lambda i=i: Image.new("RGB", (6, 4), (10 * i, 3 * i, 7))) for i in range(start, start + n)]


def test_embed_equals_the_encoder_batch_by_batch_and_computes_each_row_once():
    enc, store = _Mean(), FeatureStore()
    refs = _refs(7)
    got = embed(enc, refs + refs[:2], store=store, batch_size=3, progress=False)   # repeats: one row each
    assert enc.seen == [3, 3, 1]
    want = np.concatenate([enc.embed([r.load() for r in refs[i:i + 3]]).numpy() for i in (0, 3, 6)])
    np.testing.assert_array_equal(got[:7], want)
    np.testing.assert_array_equal(got[7:], want[:2])
    enc.seen.clear()
    again = embed(enc, _refs(3, start=5), store=store, batch_size=3, progress=False)  # k5, k6 read; k7 new
    assert enc.seen == [1] and (store.hits, store.misses, store.n_computed) == (0, 2, 8)
    np.testing.assert_array_equal(again[:2], want[5:7])


def test_tables_are_keyed_by_encoder_variant_payload_and_scope(tmp_path):
    enc, store = _Mean(), FeatureStore(tmp_path)
    refs = [ImageRef("a", lambda: Image.new("RGB", (4, 4), (200, 0, 0)), lambda: np.eye(4, dtype=bool))]
    full = embed(enc, refs, "full", store, progress=False)
    grey = embed(enc, refs, "fg_grey", store, progress=False)
    other = embed(enc, refs, "full", store, scope="dataset=2", progress=False)
    assert store.n_computed == 3 and len(list(tmp_path.iterdir())) == 3
    np.testing.assert_array_equal(full, other)
    # fg_grey: 4 of 16 pixels red, the rest BG_GREY
    mean = (np.array([200, 0, 0]) * 4 + np.array(BG_GREY) * 12) / 16 + 1.0
    np.testing.assert_allclose(grey[0], mean / np.linalg.norm(mean), rtol=1e-6)


def test_a_killed_run_keeps_its_full_chunks_and_resumes(tmp_path):
    class Dies(_Mean):
        def embed(self, images, batch_size=32):
            if sum(self.seen) >= 4:
                raise KeyboardInterrupt("killed")
            return super().embed(images, batch_size)

    with pytest.raises(KeyboardInterrupt):
        embed(Dies(), _refs(10), store=FeatureStore(tmp_path, chunk_items=4), batch_size=2, progress=False)
    assert sum(len(np.load(f)["keys"]) for f in tmp_path.rglob("*.npz")) == 4
    enc = _Mean()
    got = embed(enc, _refs(10), store=FeatureStore(tmp_path, chunk_items=4), batch_size=2, progress=False)
    assert sum(enc.seen) == 6
    np.testing.assert_allclose(got, embed(_Mean(), _refs(10), progress=False), rtol=0, atol=0)


def test_bad_rows_and_damaged_chunks_are_errors_naming_them(tmp_path):
    class NaN(_Mean):
        def embed(self, images, batch_size=32):
            out = super().embed(images, batch_size)
            out[1] = float("nan")
            return out

    with pytest.raises(ValueError, match=r"non-finite features .*\['k1'\]"):
        embed(NaN(), _refs(3), store=FeatureStore(tmp_path), progress=False)
    embed(_Mean(), _refs(2), store=FeatureStore(tmp_path), progress=False)
    chunk = next(tmp_path.rglob("*.npz"))
    chunk.write_bytes(chunk.read_bytes()[:40])
    with pytest.raises(ValueError, match=rf"{chunk.name} cannot be read"):
        embed(_Mean(), _refs(2), store=FeatureStore(tmp_path), progress=False)
    with pytest.raises(ValueError, match=r"k0: variant 'fg' needs a mask"):
        embed(_Mean(), _refs(1), "fg", progress=False)


def test_file_refs_are_keyed_by_content_and_name_the_file_in_errors(tmp_path):
    a, b, m = tmp_path / "a.png", tmp_path / "b.png", tmp_path / "m.png"
    Image.new("RGB", (8, 8), (1, 2, 3)).save(a)
    Image.new("RGB", (8, 8), (1, 2, 3)).save(b)                # same bytes, other name: one row
    Image.fromarray(np.full((4, 4), 255, np.uint8)).save(m)    # half size
    ra, rb = file_refs([a, b])
    assert ra.key == rb.key and ra.where == str(a)
    enc = _Mean()
    embed(enc, [ra, rb], progress=False)
    assert enc.seen == [1]
    with pytest.raises(ValueError, match=r"a\.png \(mask .*m\.png\): mask size \(4, 4\) differs"):
        embed(enc, file_refs([a], [m]), "fg_grey", progress=False)


def test_rows_come_back_in_c_order_whatever_layout_the_encoder_returned():
    """A CNN prefix comes out channels_last; the rows must not carry that layout into the next
    model (a conv over another layout takes other kernels: other low bits, another training run)."""
    class ChannelsLast:
        name = "cl"

        def cache_key(self):
            return "cl"

        def preprocess(self, im):
            return torch.tensor(np.asarray(im, np.float32)).permute(2, 0, 1)

        def prefix(self, x):
            return x.contiguous(memory_format=torch.channels_last)

    refs = [ImageRef(f"k{i}", lambda i=i: Image.new("RGB", (3, 2), (i, 2 * i, 3 * i))) for i in range(4)]
    got = embed(ChannelsLast(), refs, payload="prefix", progress=False)
    assert got.flags["C_CONTIGUOUS"] and got.shape == (4, 3, 2, 3) and got.dtype == np.float16
    assert torch.from_numpy(got).is_contiguous()
    np.testing.assert_array_equal(got[2, :, 0, 0], [2, 4, 6])
