"""Scoring builds only what it scores: a test-split build of the world writes byte-identical files
and the full build's table rows of that split; it is never mistaken for the whole world; a user
encoder's embeddings are saved in chunks, so an interrupted run resumes."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest

from nearid_lib import get_profile
from nearid_lib.data import DataError, build_world, load_nearid
from nearid_lib.data.jobs import mtg_split_of


def _digest(root):
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "_progress" not in p.parts
            and p.name != "manifest.json"}


def _is_test_item(rel: str, cfg) -> bool:
    """Whether a file of a full build belongs to the test split's benchmark sets."""
    name = rel.rsplit("/", 1)[-1]
    if rel.startswith(("pos/", "mask/", "dist/")):
        return name.startswith("test_")
    if rel.startswith("mtg/"):
        return mtg_split_of(cfg, int(name.split("_")[1])) == "test"
    return rel.startswith(("grids/", "fpr/"))


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    cfg = get_profile("smoke")
    base = tmp_path_factory.mktemp("worlds")
    full = build_world(cfg, base / "full", progress=False)
    part = build_world(cfg, base / "test", progress=False, splits=("test",))
    return cfg, full, part


def test_test_split_build_is_byte_identical_to_the_full_builds(worlds):
    cfg, full, part = worlds
    df, dp = _digest(full), _digest(part)
    tables = {k for k in df if not k.endswith(".png")}
    images_full = {k: v for k, v in df.items() if k not in tables and _is_test_item(k, cfg)}
    images_part = {k: v for k, v in dp.items() if k.endswith(".png")}
    assert len(images_part) > 100
    assert images_part == images_full                  # every test-split file, same bytes, nothing else
    assert len([k for k in df if k.endswith(".png")]) > len(images_part)   # the full world has more
    # tables: exactly the full build's test rows, in the same order
    for rel in ["identities.csv", "positives.csv", "mtg.csv", "grids.csv", "fpr/train_data.csv",
                "fpr/gallery_data.csv"] + [f"distractors/{s}.csv" for s in cfg.world.distractor_sources]:
        a = pd.read_csv(full / rel, keep_default_na=False, dtype=str)
        b = pd.read_csv(part / rel, keep_default_na=False, dtype=str)
        if "split" in a.columns and not rel.startswith("grids"):
            a = a[a.split == "test"].reset_index(drop=True)
        assert len(b) and b.equals(a), rel
    assert (full / "sources.json").read_bytes() == (part / "sources.json").read_bytes()
    lines = (part / "identity_params.jsonl").read_text().splitlines()
    assert lines and set(lines) <= set((full / "identity_params.jsonl").read_text().splitlines())


def test_a_test_split_world_is_never_taken_for_the_whole_one(worlds, tmp_path):
    cfg, full, part = worlds
    man = json.loads((part / "manifest.json").read_text())
    assert man["complete"] is False and man["partial"] is True and man["splits"] == ["test"]
    assert "splits" not in json.loads((full / "manifest.json").read_text())      # full manifest unchanged
    with pytest.raises(DataError, match="holds only the split"):
        load_nearid(part)                                                        # what notebooks call
    with pytest.raises(DataError, match="holds only the split"):
        load_nearid(part, splits=("train", "test"))
    d = load_nearid(part, splits=("test",))
    assert set(d.identities.split) == {"test"} and len(d.grids) and len(d.fpr_gallery)
    assert set(load_nearid(full, splits=("test",)).identities.split) == {"train", "val", "test"}
    # the full build on top of a test-split world renders the rest and equals a fresh full build
    import shutil

    grown = tmp_path / "grown"
    shutil.copytree(part, grown)
    assert build_world(cfg, grown, progress=False, splits=("test",)) == grown     # reused as it is
    build_world(cfg, grown, progress=False)
    assert json.loads((grown / "manifest.json").read_text())["complete"] is True
    assert _digest(grown) == _digest(full)
    load_nearid(grown)


def test_store_embedder_resumes_after_an_interrupt(worlds, tmp_path):
    from nearid_lib.features import Embedder
    from nearid_lib.models import UserEncoder

    cfg, _, part = worlds
    data = load_nearid(part, splits=("test",))
    rels = data.grids["path"].tolist()
    masks = data.grids["mask"].tolist()
    calls = {"n": 0, "limit": None}

    def enc(images):
        calls["n"] += len(images)
        if calls["limit"] is not None and calls["n"] > calls["limit"]:
            raise KeyboardInterrupt("killed")
        return np.stack([np.asarray(im, float).mean((0, 1)) + 1.0 for im in images])

    ue = UserEncoder(enc, "mean-rgb")
    probe = calls["n"]
    calls["limit"] = probe + 20                       # dies in the 3rd batch of 8
    e1 = Embedder(ue, data, folder=tmp_path / "store", batch_size=8, progress=False, chunk_images=8)
    assert e1.layout == "rows"                        # a callable has no token grids: rows of embeddings
    with pytest.raises(KeyboardInterrupt):
        e1.embed(rels, masks=masks)
    saved = sum(len(np.load(f)["keys"]) for f in (tmp_path / "store").rglob("*.npz"))
    assert saved == 16                                 # two chunks reached the disk before the kill
    calls["limit"], calls["n"] = None, 0
    e2 = Embedder(ue, data, folder=tmp_path / "store", batch_size=8, progress=False)
    got = e2.embed(rels, masks=masks).numpy()
    assert calls["n"] == len(set(rels)) - 16           # only the rest was embedded
    fresh = Embedder(ue, data, batch_size=8, progress=False)
    np.testing.assert_allclose(got, fresh.embed(rels, masks=masks).numpy(), rtol=0, atol=1e-6)


def test_score_builds_leave_out_the_graded_set_until_asked(worlds, tmp_path):
    """``graded=False`` (what score_encoder builds): no graded images or table; a later build that
    asks for the graded set adds exactly the full build's graded files, nothing else changes."""
    cfg, full, part = worlds
    assert cfg.world.n_graded_anchors > 0
    lean = build_world(cfg, tmp_path / "lean", progress=False, splits=("test",), graded=False)
    dl, dp = _digest(lean), _digest(part)
    graded_files = {k for k in dp if "graded_" in k or k == "graded.csv"}
    assert len(graded_files) > 10 and "graded.csv" in graded_files
    assert set(dl) == set(dp) - graded_files
    assert all(dl[k] == dp[k] for k in dl)
    assert load_nearid(lean, splits=("test",)).graded is None
    assert "graded_images" not in json.loads((lean / "manifest.json").read_text())["counts"]
    # a score build reuses a world that has the set; a build asking for it grows a lean one
    assert build_world(cfg, part, progress=False, splits=("test",), graded=False) == part
    build_world(cfg, lean, progress=False, splits=("test",))
    assert _digest(lean) == dp
    assert len(load_nearid(lean, splits=("test",)).graded)


def test_run_bench_prefetches_then_scores_like_evaluate_encoder(worlds, tmp_path):
    """run_bench (notebook 04 and score_encoder): a callable's every image, edit grids included, is
    embedded in the prefetch pass (scoring again embeds nothing more), and the scores equal
    evaluate_encoder's on a fresh embedder that was never prefetched."""
    from dataclasses import replace

    from nearid_lib.nearid.bench import run_bench
    from nearid_lib.nearid.evaluate import evaluate_encoder
    from nearid_lib.nearid.pairs import grid_pairs
    from nearid_lib.features import Embedder
    from nearid_lib.nearid.scorers import EmbeddingBenchEncoder
    from nearid_lib.models import UserEncoder

    cfg, _, part = worlds
    cfg = replace(cfg, eval=replace(cfg.eval, fg_only=True, dbpp_standin=True))
    data = load_nearid(part, splits=("test",))
    calls = {"n": 0}

    def enc(images):
        calls["n"] += len(images)
        return np.stack([np.asarray(im, float).reshape(-1, 3)[::7].mean(0) + np.asarray(im, float)[:8, :8].std()
                         for im in images]) + 1.0

    ue = UserEncoder(enc, "rgb-stats")
    emb = Embedder(ue, data, batch_size=16, progress=False, name="rgb")
    bench = run_bench([emb], data, cfg)                     # an Embedder is taken as it comes
    assert bench.results[0].name == "rgb"
    benc = EmbeddingBenchEncoder(emb)
    assert bench.variants == ("full", "fg") and bench.grid is not None and len(bench.grid)
    calls["n"] = 0
    grid = grid_pairs(data, "test")
    again = evaluate_encoder(benc, data, "test", ("full", "fg"), grid=grid)
    assert calls["n"] == 0                                  # everything was embedded by the prefetch
    fresh = EmbeddingBenchEncoder(Embedder(ue, data, batch_size=16, progress=False, name="rgb"))
    ref = evaluate_encoder(fresh, data, "test", ("full", "fg"), grid=grid)
    assert calls["n"] > 0
    r = bench.results[0]
    for res in (r, again):
        for v in ("full", "fg"):
            assert res.nearid[v]["pooled"] == ref.nearid[v]["pooled"]
            pd.testing.assert_series_equal(pd.Series(res.mtg[v], dtype=float), pd.Series(ref.mtg[v], dtype=float))
        np.testing.assert_array_equal(res.dbpp_scores, ref.dbpp_scores)
        assert repr(res.dbpp) == repr(ref.dbpp) and res.dbpp["kind"] == "procedural"
    assert "total" in r.seconds and list(bench.summary().encoder) == ["rgb"]
