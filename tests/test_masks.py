"""CLIPSeg object masks for the released NearID views (nearid_lib.data.masks), on a tiny random-init
CLIPSeg saved offline into a temporary hub mirror: loading through NEARID_HUB_DIR, mask sizes, the
never-empty rule against hand-computed cases, batching, fingerprints and the missing-model error."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from nearid_lib import hub
from nearid_lib.data.masks import DEFAULT_REPO, ObjectMasker, binarize, identity_prompt, masker_fingerprint
from tools.tiny_models.clipseg import save_tiny_clipseg

from _tolerance import assert_close_across_batching, decisions_agree


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """A hub mirror holding the tiny CLIPSeg at the real repository's path."""
    root = tmp_path_factory.mktemp("hub")
    save_tiny_clipseg(root / DEFAULT_REPO)
    return root


@pytest.fixture(scope="module")
def masker(mirror):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(hub.HUB_DIR_ENV, str(mirror))
        return ObjectMasker.from_pretrained(batch_size=4)


def _images():
    # Two different sizes, non-square both ways, plus a grayscale and an RGBA view.
    rs = np.random.RandomState(0)
    sizes = [(37, 53), (80, 48), (37, 53), (61, 29), (80, 48)]  # (H, W)
    ims = [Image.fromarray(rs.randint(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sizes]
    ims[2] = ims[2].convert("L")
    ims[3] = ims[3].convert("RGBA")
    return ims


PROMPTS = ["a red ceramic mug", "a wooden chair", "a mug", "a toy car with four wheels", "chair"]


def test_tiny_fixture_has_real_repo_layout(mirror):
    folder = mirror / DEFAULT_REPO
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "preprocessor_config.json", "tokenizer.json",
            "tokenizer_config.json"} <= names
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["architectures"] == ["CLIPSegForImageSegmentation"]
    assert cfg["vision_config"]["hidden_size"] == 32 and cfg["vision_config"]["num_hidden_layers"] == 2


def test_loads_through_mirror(masker, mirror):
    from transformers import CLIPSegForImageSegmentation, CLIPSegProcessor

    assert isinstance(masker.model, CLIPSegForImageSegmentation)
    assert isinstance(masker.processor, CLIPSegProcessor)
    assert masker.source == str((mirror / DEFAULT_REPO).resolve())
    assert hub.reads()[DEFAULT_REPO]["source"] == "mirror"
    assert not masker.model.training


def test_masks_have_each_image_size_and_are_never_empty(masker):
    ims = _images()
    before = masker.counts["images"]
    masks = masker(ims, PROMPTS)
    assert len(masks) == len(ims)
    for im, m in zip(ims, masks):
        assert m.dtype == bool
        assert m.shape == (im.size[1], im.size[0])
        assert m.any()
    assert masker.counts["images"] == before + len(ims)
    assert len(masker.last_fallback) == len(ims)


def test_batching_matches_one_by_one_and_is_deterministic(mirror, masker):
    ims = _images()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(hub.HUB_DIR_ENV, str(mirror))
        single = ObjectMasker.from_pretrained(batch_size=1)
    batched = masker(ims, PROMPTS)
    assert not any(masker.last_fallback)
    one = [single([im], [p])[0] for im, p in zip(ims, PROMPTS)]
    probs = masker.probabilities(ims, PROMPTS)
    # batched vs one by one: another batch composition, so the probabilities agree to the batching
    # tolerance (tests/_tolerance.py, item 2) and the masks wherever the probability is not within
    # that tolerance of the threshold (this fixture never falls back to the top-k rule)
    for a, b, p in zip(batched, one, probs):
        assert decisions_agree(a, b, p, masker.threshold)
    for a, b in zip(probs, single.probabilities(ims, PROMPTS)):
        assert_close_across_batching(a, b, "CLIPSeg probabilities, batched vs one by one")
    # the same batch again: the same order of computation, so exactly the same masks (item 1)
    assert all(np.array_equal(a, b) for a, b in zip(batched, masker(ims, PROMPTS)))
    # The masks depend on the prompt (the tiny model is random, but conditioned on the text).
    p1 = masker.probabilities(ims[:1], ["a red ceramic mug"])[0]
    p2 = masker.probabilities(ims[:1], ["a wooden chair"])[0]
    assert not np.allclose(p1, p2)


def test_rule_on_the_real_model_at_the_extremes(mirror):
    ims = _images()[:2]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(hub.HUB_DIR_ENV, str(mirror))
        # threshold 1: no probability passes "p > 1", so every mask is the fallback.
        none_pass = ObjectMasker.from_pretrained(threshold=1.0, min_frac=0.05)
        # min_frac 1: the fallback (unless all pass) keeps every pixel.
        everything = ObjectMasker.from_pretrained(threshold=0.5, min_frac=1.0)
    masks = none_pass(ims, PROMPTS[:2])
    for im, m in zip(ims, masks):
        w, h = im.size
        assert m.sum() == int(np.ceil(0.05 * h * w))
    assert none_pass.counts == {"images": 2, "fallback": 2}
    assert none_pass.last_fallback == [True, True]
    assert all(m.all() for m in everything(ims, PROMPTS[:2]))
    none_pass.reset_counts()
    assert none_pass.counts == {"images": 0, "fallback": 0}


def test_binarize_hand_computed():
    p = np.array([[0.9, 0.1, 0.6, 0.2],
                  [0.3, 0.7, 0.4, 0.5],
                  [0.0, 0.8, 0.1, 0.2]])
    # 12 pixels, min_frac 0.25 -> k = 3. Four pass (> 0.5; 0.5 itself does not): thresholded mask.
    m, fell = binarize(p, 0.5, 0.25)
    assert not fell
    assert np.array_equal(m, p > 0.5) and m.sum() == 4
    # At threshold 0.75 only 0.9 and 0.8 pass: fewer than 3, so the 3 most probable (0.9, 0.8, 0.7).
    m, fell = binarize(p, 0.75, 0.25)
    assert fell
    expect = np.zeros_like(m)
    expect[0, 0] = expect[2, 1] = expect[1, 1] = True
    assert np.array_equal(m, expect)
    # 0.07 * 100 = 7.000000000000001 in floating point: still k = 7, not 8.
    m, fell = binarize(np.zeros((10, 10)), 0.5, 0.07)
    assert fell and m.sum() == 7
    # Ties are broken in raster order: the first 7 pixels of row 0.
    assert m[0, :7].all() and not m[0, 7:].any() and not m[1:].any()
    # k is at least one pixel, however small min_frac is.
    m, fell = binarize(np.zeros((3, 3)), 0.5, 1e-9)
    assert fell and m.sum() == 1 and m[0, 0]


def _stub_model(logits: torch.Tensor):
    """Stands in for CLIPSeg's forward: returns ``logits`` for the batch, in order."""
    def forward(**inputs):
        assert inputs["input_ids"].shape == (logits.shape[0], 77)
        return SimpleNamespace(logits=logits[: inputs["pixel_values"].shape[0]].clone())
    return forward


def test_rule_through_constructed_logits(masker, monkeypatch):
    big, neg = 10.0, -10.0
    # Image 0 (4x4, logit grid 4x4: resize is the identity): two positive logits of 16 pixels,
    # min_frac 0.25 -> k = 4 -> the fallback keeps the 4 largest logits.
    l0 = torch.full((4, 4), -20.0)
    l0[0, 0], l0[3, 3] = 5.0, 3.0      # pass (sigmoid > 0.5)
    l0[1, 2], l0[2, 1] = -1.0, -2.0    # most probable of the rest
    l0[0, 1] = 0.0                     # sigmoid(0) = 0.5 does not pass, and -3 < 0 ranks below it
    l0[1, 1] = -3.0
    # Image 1 (4x4): five positive logits -> the thresholded mask as it is.
    l1 = torch.full((4, 4), neg)
    l1[2, :] = big
    l1[0, 3] = big
    monkeypatch.setattr(masker, "model", _stub_model(torch.stack([l0, l1])))
    monkeypatch.setattr(masker, "min_frac", 0.25)
    masker.reset_counts()
    ims = [Image.new("RGB", (4, 4)), Image.new("RGB", (4, 4))]
    m0, m1 = masker(ims, ["a mug", "a chair"])
    e0 = np.zeros((4, 4), bool)
    e0[0, 0] = e0[3, 3] = e0[0, 1] = e0[1, 2] = True
    assert np.array_equal(m0, e0)
    e1 = np.zeros((4, 4), bool)
    e1[2, :] = True
    e1[0, 3] = True
    assert np.array_equal(m1, e1)
    assert masker.last_fallback == [True, False]
    assert masker.counts == {"images": 2, "fallback": 1}


def test_upsampling_is_bilinear_on_probabilities_to_image_size(masker, monkeypatch):
    # A 2x2 logit grid resized to an image of H=2, W=4: rows stay, columns sample at
    # -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to 1) -> weights (1,0), (.75,.25), (.25,.75), (0,1).
    lg = torch.tensor([[[10.0, -10.0], [-10.0, -10.0]]])
    monkeypatch.setattr(masker, "model", _stub_model(lg))
    monkeypatch.setattr(masker, "min_frac", 0.01)
    im = Image.new("RGB", (4, 2))
    s = torch.sigmoid(torch.tensor(10.0)).item()
    expect = np.array([[s, .75 * s + .25 * (1 - s), .25 * s + .75 * (1 - s), 1 - s],
                       [1 - s] * 4], dtype=np.float32)
    np.testing.assert_allclose(masker.probabilities([im], ["a mug"])[0], expect, atol=1e-6)
    m = masker([im], ["a mug"])[0]
    assert m.shape == (2, 4)
    assert np.array_equal(m, np.array([[True, True, False, False], [False] * 4]))


def test_fingerprint_keys_model_threshold_and_rule(mirror, masker, tmp_path, monkeypatch):
    fp = masker_fingerprint(masker)
    assert isinstance(fp, str) and len(fp) == 16
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(mirror))
    assert masker_fingerprint(ObjectMasker.from_pretrained(batch_size=2)) == fp  # batch size: same masks
    assert masker_fingerprint(ObjectMasker.from_pretrained(threshold=0.4)) != fp
    assert masker_fingerprint(ObjectMasker.from_pretrained(min_frac=0.02)) != fp
    # Other weights under the same repo id (e.g. a tiny fixture vs the real download): another key.
    other = tmp_path / "hub2"
    save_tiny_clipseg(other / DEFAULT_REPO, seed=1)
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(other))
    assert masker_fingerprint(ObjectMasker.from_pretrained()) != fp
    prov = masker.provenance()
    assert prov["repo_id"] == DEFAULT_REPO and prov["threshold"] == 0.5 and "rule" in prov


def test_missing_model_names_repo_and_download_command(tmp_path, monkeypatch):
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(tmp_path))
    with pytest.raises(hub.HubError) as err:
        ObjectMasker.from_pretrained()
    msg = str(err.value)
    assert DEFAULT_REPO in msg
    assert f"hf download {DEFAULT_REPO} " in msg and f"--local-dir {tmp_path}/{DEFAULT_REPO}" in msg
    # A half-copied mirror folder (config only, no weights): same kind of error.
    folder = tmp_path / DEFAULT_REPO
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    with pytest.raises(hub.HubError) as err:
        ObjectMasker.from_pretrained()
    assert DEFAULT_REPO in str(err.value) and "hf download" in str(err.value)


def test_input_validation(masker):
    im = Image.new("RGB", (8, 8))
    with pytest.raises(ValueError, match="prompts"):
        masker([im, im], ["a mug"])
    with pytest.raises(ValueError, match="empty"):
        masker([im], ["  "])
    for bad in ({"min_frac": 0.0}, {"min_frac": 1.5}, {"threshold": -0.1}, {"batch_size": 0}):
        with pytest.raises(ValueError):
            ObjectMasker(masker.model, masker.processor, **bad)


def test_identity_prompt():
    assert identity_prompt("a red  ceramic\nmug", "mug") == "a red ceramic mug"
    assert identity_prompt("", "mug") == "mug"
    assert identity_prompt(None, "mug") == "mug"
    with pytest.raises(ValueError):
        identity_prompt(None, " ")
