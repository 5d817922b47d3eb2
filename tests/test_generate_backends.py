"""Fill backends: the tiny real SD inpainting pipeline through the interface, backend registry
and paper defaults, Canny control images, ID-Sim partial masks, quality metrics and prompts."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from nearid_lib.config import get_profile
from nearid_lib.generate import available_backends, get_backend
from nearid_lib.generate.base import FillInputError, FillRequest
from nearid_lib.generate.diffusers_backends import canny_edges, partial_mask
from nearid_lib.generate.specs import DEFAULT_HUB_IDS, NEARID_SOURCES, SPECS
from nearid_lib.generate.tiny_sd import clip_tokenizer_offline
from nearid_lib.generate.prompts import (CONTEXT_EDIT_TEMPLATE, context_edit_prompt,
                                         identity_edit_prompt, near_identity_prompt)
from nearid_lib.generate.quality import QualityFilter, masked_diffs
from nearid_lib.runtime.seeding import make_rng

torch.set_num_threads(1)


def _img(w=64, h=64, seed=0):
    return Image.fromarray((np.random.default_rng(seed).random((h, w, 3)) * 255).astype(np.uint8))


def _mask(w=64, h=64, box=(16, 16, 48, 48)):
    m = np.zeros((h, w), np.uint8)
    m[box[1]:box[3], box[0]:box[2]] = 255
    return Image.fromarray(m, "L")


@pytest.fixture(scope="module")
def tiny():
    return get_backend("tiny_sd", num_inference_steps=2)


def test_tiny_sd_runs_real_pipeline_through_interface(tiny):
    from diffusers import StableDiffusionInpaintPipeline

    assert isinstance(tiny.pipe, StableDiffusionInpaintPipeline)
    img, mask = _img(), _mask()
    a = tiny.fill(img, mask, "a photo of a blue mug", seed=11)
    b = tiny.fill(img, mask, "a photo of a blue mug", seed=11)
    c = tiny.fill(img, mask, "a photo of a blue mug", seed=12)
    assert a.mode == "RGB" and a.size == img.size
    assert np.array_equal(np.asarray(a), np.asarray(b))          # same seed, same bytes
    assert not np.array_equal(np.asarray(a), np.asarray(c))      # the seed matters
    # a batch gives each item the output of its own single call (own generator per item)
    reqs = [FillRequest("x/1", img, mask, "a blue mug", 11), FillRequest("y/1", _img(seed=1),
            _mask(box=(0, 0, 20, 30)), "a red car", 5)]
    batch = tiny.fill_batch(reqs)
    single = [tiny.fill(r.image, r.mask, r.prompt, r.seed) for r in reqs]
    for x, y in zip(batch, single):
        assert np.abs(np.asarray(x, int) - np.asarray(y, int)).max() <= 1


def test_resolution_resampling_and_composite(tiny):
    img, mask = _img(80, 48), _mask(80, 48, (10, 10, 40, 40))
    out = tiny.fill(img, mask, "x", 1)
    assert out.size == (80, 48)                 # worked at 64 px long side, Lanczos back
    low = get_backend("tiny_sd", resolution=32, num_inference_steps=2, pipe=tiny.pipe)
    assert low.resolution == 32 and low.fill(img, mask, "x", 1).size == (80, 48)
    comp = get_backend("tiny_sd", composite=True, num_inference_steps=2, pipe=tiny.pipe)
    o = np.asarray(comp.fill(img, mask, "x", 1)).astype(int)
    m = np.asarray(mask) >= 128
    assert np.array_equal(o[~m], np.asarray(img)[~m]) and np.abs(o[m] - np.asarray(img)[m]).mean() > 1


def test_bad_inputs_name_item_and_field(tiny):
    with pytest.raises(FillInputError, match=r"item 'q/2'.*'mask' has size"):
        tiny.fill_batch([FillRequest("q/2", _img(), _mask(32, 32, (0, 0, 8, 8)), "x", 0)])
    with pytest.raises(FillInputError, match="empty"):
        tiny.fill(_img(), Image.new("L", (64, 64), 0), "x", 0)
    with pytest.raises(FillInputError, match="RGBA"):
        tiny.fill(_img().convert("RGBA"), _mask(), "x", 0)
    with pytest.raises(TypeError, match="unknown settings"):
        tiny.fill(_img(), _mask(), "x", 0, num_steps=3)


def test_registry_and_paper_defaults():
    names = set(available_backends())
    assert {"sdxl", "flux_fill", "flux_canny", "qwen_controlnet", "powerpaint", "qwen_edit",
            "flux_fill_identity", "tiny_sd"} <= names
    with pytest.raises(KeyError, match="valid"):
        get_backend("nope")
    sdxl = get_backend("sdxl")                       # no loading until the first fill
    assert sdxl._pipe is None and sdxl.resolution == 1024
    d = sdxl.defaults
    assert (d["num_inference_steps"], d["guidance_scale"], d["strength"]) == (30, 8.0, 0.99)
    assert "watermark" in d["negative_prompt"] and "low resolution" in d["negative_prompt"]
    assert (SPECS["flux_fill"].defaults["num_inference_steps"],
            SPECS["flux_fill"].defaults["guidance_scale"]) == (50, 30.0)
    fc = SPECS["flux_canny"].defaults
    assert (fc["num_inference_steps"], fc["guidance_scale"], fc["strength"],
            fc["canny_low"], fc["canny_high"]) == (28, 7.0, 0.99, 50.0, 200.0)
    q = SPECS["qwen_controlnet"]
    assert q.native_resolution == 1328 and q.defaults["num_inference_steps"] == 8
    assert q.defaults["true_cfg_scale"] == 1.0
    pp = SPECS["powerpaint"].defaults
    assert (pp["num_inference_steps"], pp["guidance_scale"], pp["brushnet_conditioning_scale"]) == (45, 7.5, 1.0)
    fi = SPECS["flux_fill_identity"].defaults
    assert fi["strength_range"] == (0.5, 0.8) and fi["guidance_scale"] == 2.5
    assert get_backend("flux_fill", resolution=512).resolution == 512
    assert NEARID_SOURCES["SDXL_1024"] == ("sdxl", "native") and NEARID_SOURCES["Qwen"][1] == 512
    cfg = get_profile("paper")
    # the 9 sources are read from the release; regeneration is opt-in (nearid_lib.generate.plan)
    assert cfg.generate.sources == ()
    assert set(NEARID_SOURCES) == set(cfg.world.nearid_sources) == set(cfg.world.distractor_sources)
    for k, v in dict(cfg.generate.hub_ids).items():
        assert DEFAULT_HUB_IDS[k] == v
    with pytest.raises(ValueError, match="resolution"):
        get_backend("sdxl", resolution="big")


def test_powerpaint_is_a_documented_plug_in_point():
    pp = get_backend("powerpaint")
    with pytest.raises(NotImplementedError, match="pipe=") as ei:
        pp.fill(_img(), _mask(), "a mug", 0)
    assert "BrushNet" in str(ei.value)

    calls = []

    class ExternalPipe:   # any callable with the BrushNet pipeline's signature plugs in
        def __call__(self, **kw):
            calls.append(kw)
            return type("Out", (), {"images": [im.copy() for im in kw["image"]]})()

    pp = get_backend("powerpaint", pipe=ExternalPipe())
    out = pp.fill(_img(100, 100), _mask(100, 100), "a mug", 3)
    assert out.size == (100, 100)
    kw = calls[0]
    assert kw["num_inference_steps"] == 45 and kw["brushnet_conditioning_scale"] == 1.0
    assert (kw["width"], kw["height"]) == (512, 512) and kw["generator"][0].initial_seed() == 3


def test_canny_edges_thresholds():
    a = np.zeros((64, 64), np.uint8)
    a[:, 32:] = 200                                   # one vertical step edge
    edges = np.asarray(canny_edges(Image.fromarray(a).convert("RGB"), 50, 200))
    assert edges.shape == (64, 64, 3) and set(np.unique(edges)) <= {0, 255}
    cols = np.nonzero(edges[..., 0].any(axis=0))[0]
    assert set(cols) <= {31, 32} and len(cols) >= 1
    a[:, 32:] = 20                                    # a faint step stays below tau_high
    assert np.asarray(canny_edges(Image.fromarray(a).convert("RGB"), 50, 200)).max() == 0


def test_partial_mask_keeps_40_to_60_percent():
    mask = _mask(64, 64, (10, 20, 50, 60))
    full = np.asarray(mask) >= 128
    for s in range(20):
        pm = np.asarray(partial_mask(mask, make_rng(s, "pm"))) >= 128
        frac = pm.sum() / full.sum()
        assert 0.37 <= frac <= 0.63 and not (pm & ~full).any()
    assert np.array_equal(np.asarray(partial_mask(mask, make_rng(1, "pm"))),
                          np.asarray(partial_mask(mask, make_rng(1, "pm"))))


def test_masked_diffs_hand_computed():
    a = np.zeros((10, 10, 3), np.uint8)
    b = a.copy()
    b[:5] = 255                                       # top half white
    m = np.zeros((10, 10), np.uint8)
    m[:5, :5] = 255                                   # mask: top-left quadrant
    inside, outside = masked_diffs(Image.fromarray(a), Image.fromarray(b), Image.fromarray(m),
                                   margin=0.0)
    assert inside == pytest.approx(1.0)
    assert outside == pytest.approx(25 / 75)          # top-right quadrant changed of 75 px
    qf = QualityFilter(unchanged_below=0.02, drift_above=0.3, margin=0.0)
    r = qf.check(Image.fromarray(a), Image.fromarray(b), Image.fromarray(m))
    assert (r.ok, r.reason) == (False, "drift")
    r = qf.check(Image.fromarray(a), Image.fromarray(a), Image.fromarray(m))
    assert (r.ok, r.reason) == (False, "unchanged")
    # the dilation margin forgives a 1-px seam around the mask
    c = a.copy()
    c[:6, :6] = 255
    assert masked_diffs(Image.fromarray(a), Image.fromarray(c), Image.fromarray(m), margin=0.1)[1] == 0


def test_prompts_same_class_different_instance():
    p = near_identity_prompt("mug", "a red ceramic mug with a round handle", item_id="i1", seed=0)
    assert p == near_identity_prompt("mug", "a red ceramic mug with a round handle", "i1", 0)
    assert "mug" in p and " red " not in f" {p} " and "ceramic" not in p and "round" not in p
    q = near_identity_prompt("toy_car", None, item_id="i2", seed=0)
    assert "toy car" in q and q.startswith("a photo of a ")
    assert len({near_identity_prompt("toy car", "", f"i{i}", 0) for i in range(20)}) > 10
    plain = near_identity_prompt("lamp", "an antique lamp", "i3", 0)
    assert plain.startswith("a photo of an antique lamp, but ")
    with pytest.raises(ValueError, match="class_name"):
        near_identity_prompt("", "x", "i4")
    assert identity_edit_prompt("sneaker") == "Photo of a sneaker"
    c = context_edit_prompt("i5", 0, background="a sandy beach", lighting="candle light")
    assert c == CONTEXT_EDIT_TEMPLATE.format(background="a sandy beach", lighting="candle light")
    assert c.startswith("Replace only the white background pixels with a sandy beach;")


def test_offline_clip_tokenizer_matches_open_clip():
    import open_clip

    tok = clip_tokenizer_offline()
    ids = tok("a photo of a red mug").input_ids
    ref = open_clip.get_tokenizer("ViT-B-32")(["a photo of a red mug"])[0].tolist()
    assert ids == ref[:len(ids)] and len(tok) == 49408


def test_regeneration_plan_is_opt_in_and_excludes_powerpaint_up_front(tmp_path):
    from nearid_lib.config import get_profile
    from nearid_lib.generate.plan import regeneration_plan, regeneration_root, released_source_summary

    cfg = get_profile("paper")
    assert regeneration_plan(cfg) == ([], {})
    cfg = get_profile("paper", {"generate.sources": "Flux,PowerPaint,SDXL_1024,Bogus"})
    runnable, excluded = regeneration_plan(cfg)
    assert runnable == [("Flux", "flux_fill", 512), ("SDXL_1024", "sdxl", "native")]
    assert set(excluded) == {"PowerPaint", "Bogus"}
    assert "BrushNet" in excluded["PowerPaint"] and "valid:" in excluded["Bogus"]
    # regenerated sources never go into the dataset folder
    assert regeneration_root(tmp_path / "nearid") == tmp_path / "nearid_regenerated"

    root = tmp_path / "nearid"
    (root / "distractors").mkdir(parents=True)
    (root / "sources.json").write_text('{"sources": ["A", "B"], "train_sources": ["A"]}')
    (root / "positives.csv").write_text("id,split,img1,mask1,img2,mask2,img3,mask3\n"
                                        "1,train,a,m,b,m,,\n2,test,a,m,b,m,c,m\n")
    (root / "distractors" / "A.csv").write_text("id,split,nimg1,nimg2,nimg3\n1,train,x,,\n2,test,x,y,z\n")
    (root / "distractors" / "B.csv").write_text("id,split,nimg1,nimg2,nimg3\n1,train,,,\n2,test,x,,\n")
    summ = released_source_summary(root).set_index("source")
    assert summ.loc["A"].tolist() == [2, 5, 4, 3, "train + eval"]
    assert summ.loc["B"].tolist() == [2, 5, 1, 1, "eval"]
