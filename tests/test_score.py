"""score_encoder: a user callable's SSR/PA equal the ones computed by hand from its embeddings, the
report card is written with provenance, a callable's embeddings are cached by its fingerprint,
registered names go through the library's caches, and bad encoders get clear errors."""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from nearid_lib import metrics, score_encoder
from nearid_lib.features.variants import apply_variant
from nearid_lib.nearid.evaluate import main_sources, source_groups
from nearid_lib.models import EncoderOutputError, EncoderSpecError, load_encoder


def colour_hist(images):
    """A hand-crafted encoder: per-channel 8-bin histograms (deterministic, no weights)."""
    out = []
    for im in images:
        a = np.asarray(im)
        out.append(np.concatenate([np.histogram(a[..., c], bins=8, range=(0, 256))[0] for c in range(3)]) + 1.0)
    return np.stack(out)


@pytest.fixture
def tmp_env(tmp_path, monkeypatch):
    for var in ("NEARID_CACHE", "NEARID_OUT", "NEARID_FIGURES"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.delenv("NEARID_SET", raising=False)
    return tmp_path


def _by_hand(fn, data, variant: str, split: str = "test") -> dict[str, dict]:
    """ssr_pa per source from ``fn``'s embeddings of each image, computed image by image."""
    pos = data.positives[data.positives.split == split]

    def emb(rel, mask):
        im = data.image(rel)
        if variant == "fg":
            im = apply_variant(im, data.mask(mask), "fg")
        e = np.asarray(fn([im]), float)[0]
        return e / np.linalg.norm(e)

    def stack(table, col):
        out = np.full((len(pos), 3, 24), np.nan)
        for i, (idx, r) in enumerate(pos.iterrows()):
            for k in (1, 2, 3):
                rel = table.at[idx, f"{col}{k}"]
                if rel:
                    out[i, k - 1] = emb(rel, r[f"mask{k}"])
        return out

    P = stack(data.positives, "img")
    return {s: metrics.ssr_pa(*metrics.nearid_similarities(P, stack(data.distractors[s], "nimg")))
            for s in data.sources}


def test_callable_ssr_pa_equal_the_hand_computed_ones(smoke_world, tmp_env):
    rep = score_encoder(colour_hist, ("nearid",), "smoke", data=smoke_world, baselines=False, progress=False,
                        write=False)
    t5 = rep.nearid
    for variant in ("full", "fg"):
        want = _by_hand(colour_hist, smoke_world, variant)
        for s, w in want.items():
            got = t5[(t5.kind == "yours") & (t5.variant == variant) & (t5.source_label == s)].iloc[0]
            assert got.ssr == pytest.approx(100 * w["ssr"], abs=1e-9), (variant, s)
            assert got.pa == pytest.approx(100 * w["pa"], abs=1e-9), (variant, s)
            assert got.n_trials == w["n_trials"]
        main = main_sources(source_groups(smoke_world.sources, smoke_world.train_sources))
        pooled = metrics.pool_sources(want, main)
        key = "nearid" if variant == "full" else "nearid_fg"
        assert rep.row()[f"{key}_ssr"] == pytest.approx(100 * pooled["ssr"], abs=1e-9)
        assert rep.row()[f"{key}_pa"] == pytest.approx(100 * pooled["pa"], abs=1e-9)


def test_report_card_beside_baselines_and_papers(smoke_world, tmp_env):
    rep = score_encoder(colour_hist, profile="smoke", data=smoke_world, name="colour histogram", progress=False)
    t = rep.table
    assert list(t.kind[:2]) == ["yours", "frozen"] and t.row.iloc[0] == "colour histogram"
    assert {"SigLIP2 (NearID paper)", "NearID (Ours) (NearID paper)", "CLIP (FPR paper)"} <= set(t.row)
    paper = t[t.row == "NearID (Ours) (NearID paper)"].iloc[0]
    assert (paper.nearid_ssr, paper.nearid_fg_ssr) == (99.17, 95.3)          # read from paper_values/
    ours = t[t.kind != "paper"]
    for col in ("nearid_ssr", "nearid_fg_pa", "idsim_identity", "idsim_background", "fpr_map", "fpr_sim",
                "fpr_rho_map"):
        assert ours[col].notna().all(), col
    for f in ("identity", "background"):
        assert (ours[f"idsim_{f}_low"] <= ours[f"idsim_{f}"] + 1e-12).all()
        assert (ours[f"idsim_{f}"] <= ours[f"idsim_{f}_high"] + 1e-12).all()
    assert ours.fpr_map.between(0, 1).all()
    # the notes say what is missing and how to get it
    assert any("03_train_nearid" in n and "nearid train --profile smoke" in n for n in rep.notes)
    card = rep.files["card"].read_text()
    assert card.startswith("# Report card: colour histogram") and "| colour histogram | yours |" in card
    for name in ("score_nearid", "score_idsim", "score_idsim_anchors", "score_fpr"):
        assert rep.files[name].exists() and f"({name}.png)" in card
    meta = json.loads(rep.files["table"].with_name("score_table.meta.json").read_text())
    assert meta["profile"] == "smoke" and meta["notebook"] == "score_encoder" and "commit" in meta
    back = pd.read_csv(rep.files["table"])
    assert back.row.tolist() == t.row.tolist()


def test_callable_embeddings_are_cached_by_fingerprint(smoke_world, tmp_env):
    calls = []

    def counted(images):
        calls.append(len(images))
        return colour_hist(images)

    kw = dict(protocols=("nearid",), profile="smoke", data=smoke_world, baselines=False, progress=False, write=False)
    first = score_encoder(counted, **kw)
    n_first = len(calls)
    second = score_encoder(counted, **kw)
    assert calls[n_first:] == [2]                  # only the two probe images: everything else from the cache
    pd.testing.assert_frame_equal(first.table, second.table)
    # another model (other outputs on the probe images) never reads those embeddings
    scaled = []
    score_encoder(lambda ims: (scaled.append(len(ims)), colour_hist(ims) ** 2)[1], **kw)
    assert sum(scaled) > 2
    # cache=False embeds again
    before = len(calls)
    score_encoder(counted, cache=False, **kw)
    assert sum(calls[before:]) > 2


def test_registered_name_uses_the_library_path_and_equals_the_baseline(smoke_world, tmp_env):
    fast = {"eval.fg_only": False, "eval.dbpp_standin": False}     # full images only: seconds
    rep = score_encoder("efficientnet-lite0", ("nearid",), "smoke", data=smoke_world, progress=False, write=False,
                        overrides=fast)
    yours, frozen = rep.table.iloc[0], rep.table.iloc[1]
    assert yours.kind == "yours" and frozen.kind == "frozen"
    for c in ("nearid_ssr", "nearid_pa", "mtg_mo"):
        assert yours[c] == frozen[c] or (np.isnan(yours[c]) and np.isnan(frozen[c])), c
    assert "nearid_fg_ssr" not in rep.table.columns or rep.table.nearid_fg_ssr.iloc[:2].isna().all()


def test_bad_encoders_get_clear_errors(smoke_world, tmp_env):
    with pytest.raises(EncoderOutputError, match="^" + re.escape(
            "encoder 'callable' returned shape (1, 4) for the probe images (2 images); expected one row per "
            "image, [2, D]") + "$"):
        score_encoder(lambda ims: np.ones((1, 4)), profile="smoke", data=smoke_world, write=False)
    with pytest.raises(EncoderOutputError, match=re.escape("encoder 'nan' returned non-finite values")):
        load_encoder(lambda ims: np.full((len(ims), 3), np.nan), name="nan")[0]
    with pytest.raises(ValueError, match=re.escape("protocols: unknown ['nearidd']; choose from nearid, idsim, fpr")):
        score_encoder(colour_hist, ("nearidd",), "smoke", data=smoke_world, write=False)
    with pytest.raises(EncoderSpecError, match="encoder must be a name, 'module:function'"):
        load_encoder(42)


def test_hub_identifiers_offline(tmp_path, monkeypatch):
    from PIL import Image

    ims = [Image.new("RGB", (40, 30), (200, 10, 10)), np.zeros((16, 16, 3), np.uint8)]
    timm_enc = load_encoder("timm:resnet18", pretrained=False)[0]
    assert timm_enc.embed(ims).shape == (2, 512) and timm_enc.name == "timm:resnet18"
    # a transformers model folder (what from_pretrained reads after a download)
    from transformers import Dinov2Config, Dinov2Model, ViTImageProcessor

    folder = tmp_path / "tiny-dino"
    Dinov2Model(Dinov2Config(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                             image_size=32, patch_size=8)).save_pretrained(folder)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    assert load_encoder(str(folder))[0].embed(ims).shape == (2, 16)
    # "module:function" names a callable (the command line's way)
    mod = tmp_path / "my_encoder.py"
    mod.write_text("import numpy as np\ndef embed(images):\n    return np.ones((len(images), 3)) + "
                   "np.arange(len(images))[:, None]\n")
    assert load_encoder(f"{mod}:embed")[0].embed(ims).shape == (2, 3)
    # a hub id that is not in the local cache, offline: the error says what to do
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OSError, match="^" + re.escape("encoder 'nobody-here/no-such-model': cannot load its "
                                                      "weights (")):
        load_encoder("nobody-here/no-such-model")[0]
