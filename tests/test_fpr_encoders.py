"""FPR encoders: the embedding cache, MiewID's remote-code opt-in, the feature classifier encoder."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from nearid_lib.fpr import FeatureStore, RemoteCodeError, embed_images
from nearid_lib.models import load_encoder

from _fpr_cases import _fixture


def test_embedding_store_reads_rows_by_content(tmp_path):
    """Rows are keyed by each file's bytes: the same list is read, a subset is read (no new row),
    new bytes under an old name are computed again, and a new store on the folder reads them all."""
    root = _fixture(tmp_path)
    model, _ = load_encoder("efficientnet-lite0", tiny=True, cache=True)
    cache = FeatureStore(tmp_path / "c")
    paths = [str(p) for p in sorted((root / "gallery").glob("*.png"))]
    a = embed_images(model, paths, cache)
    assert (cache.hits, cache.misses, cache.n_computed) == (0, 1, len(paths))
    b = embed_images(model, paths, cache)
    assert (cache.hits, cache.misses) == (1, 1) and np.array_equal(a, b)
    sub = embed_images(model, paths[:-1], cache)                # a subset: its rows are read
    assert (cache.hits, cache.n_computed) == (2, len(paths)) and np.array_equal(sub, a[:-1])
    Image.new("RGB", (32, 32), (1, 2, 3)).save(paths[0])        # same name, new bytes -> one new row
    c = embed_images(model, paths, cache)
    assert (cache.misses, cache.n_computed) == (2, len(paths) + 1)
    assert not np.allclose(c[0], a[0]) and np.array_equal(c[1:], a[1:])
    assert np.allclose(np.linalg.norm(a, axis=1), 1, atol=1e-5)
    again = FeatureStore(tmp_path / "c")                        # another process: reads the chunks
    assert np.array_equal(embed_images(model, paths, again), c) and again.n_computed == 0


def test_miewid_requires_explicit_opt_in():
    with pytest.raises(RemoteCodeError, match="allow_remote_code=True"):
        load_encoder("miewid", cache=True)


def test_feature_classifier_encoder_and_bioclip_tiny(tmp_path):
    """The SP-Cars substitute: a classifier trained on frozen features separates its classes, and
    its encoder embeds with the hidden layer; BioCLIP 2's open_clip path builds (tiny, offline)."""
    from PIL import Image as _I

    from nearid_lib.fpr import train_feature_classifier
    from nearid_lib.fpr.encoders import FeatureClassifier

    rng = np.random.default_rng(0)
    centres = rng.normal(0, 1, (3, 1280))       # efficientnet-lite0's pooled width
    x = np.concatenate([rng.normal(c, 0.3, (20, 1280)) for c in centres])
    y = ["a"] * 20 + ["b"] * 20 + ["c"] * 20
    clf, acc = train_feature_classifier(x, y, hidden=16, epochs=60, lr=1e-2)
    assert acc > 0.9
    clf.save(tmp_path / "clf", backbone="efficientnet-lite0")
    clf2, meta = FeatureClassifier.load(tmp_path / "clf.safetensors")
    assert meta["classes"] == ["a", "b", "c"]
    model, _ = load_encoder("classifier", tiny=True, checkpoint=str(tmp_path / "clf.safetensors"), cache=True)
    ims = [_I.new("RGB", (32, 32), (i * 60, 10, 10)) for i in range(3)]
    e = model.embed(ims)
    assert e.shape == (3, 16)
    bio, _ = load_encoder("bioclip2", tiny=True, cache=True)
    assert bio.embed(ims).shape[0] == 3
