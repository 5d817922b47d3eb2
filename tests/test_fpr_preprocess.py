"""Each FPR evaluation encoder's input equals the FPR authors' (``evaluation/Evaluate.py`` of
OSU-MLB/Finer-Personalization-Rank): sizes, value range and channel order on a fixed image, against
references written here from each library's documented definition (albumentations is not installed:
its ``Resize`` + ``Normalize`` formula is reimplemented below; the ``transformers`` 4.57 slow PIL
processors likewise; open_clip's transform is the installed library's own).

The fixed images are chosen so that the discriminating detail matters: 313 x 250 (DINOv2: 256 * 313 /
250 = 320.512, truncated to 320, rounded to 321) and 301 x 250 (CLIP: 224 * 301 / 250 = 269.696 ->
269 vs 270), and an odd crop margin for open_clip's rounded centre crop.

Tolerance: 1e-6 absolute where two float32 computations of the same formula are compared (the
order of a subtraction and a division differs between the libraries), exact elsewhere.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from PIL import Image

from nearid_lib.models import load_encoder
from nearid_lib.models.authors_preprocess import (
    ALBU_MAX_PIXEL,
    ALBU_MEAN,
    ALBU_STD,
    MIEWID_SIZE,
    ResizeNormalize,
    ShortestEdgeCrop,
    inter_linear_resize,
)
from nearid_lib.models.encoder_base import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD
from nearid_lib.models.specialised import MIEWID_HUB_ID, MIEWID_MSV3_HUB_ID, RemoteCodeError, open_clip_preprocess

ATOL = 1e-6          # float32 rounding of one formula computed in a different order


def _image(w: int, h: int, seed: int = 0) -> Image.Image:
    """A fixed RGB image: a distinct ramp per channel plus seeded noise (channel order detectable)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    r = (xx * 255 // max(1, w - 1))
    g = (yy * 255 // max(1, h - 1))
    b = ((xx + yy) * 7) % 256
    arr = np.stack([r, g, b], -1) + rng.integers(-20, 21, (h, w, 3))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")


# ----------------------------------------------------------------------------- MiewID (albumentations)
def _inter_linear_reference(img: Image.Image, size: int) -> np.ndarray:
    """OpenCV ``INTER_LINEAR`` (albumentations ``Resize``'s default) before the final rounding, from
    its documented geometry: output pixel ``d`` samples ``(d + 0.5) * in / out - 0.5``, clamped to
    the image (edges repeated), its two neighbours weighted linearly, rows then columns. Float64."""
    src = np.asarray(img, dtype=np.float64)
    h, w = src.shape[:2]
    xs = np.clip((np.arange(size) + 0.5) * w / size - 0.5, 0.0, w - 1)
    x0 = np.floor(xs).astype(int)
    x1, fx = np.minimum(x0 + 1, w - 1), (xs - np.floor(xs))[:, None]
    out = np.empty((size, size, 3))
    for y in range(size):
        sy = min(max((y + 0.5) * h / size - 0.5, 0.0), h - 1)
        y0 = int(math.floor(sy))
        y1, fy = min(y0 + 1, h - 1), sy - y0
        row = (1 - fy) * src[y0] + fy * src[y1]                      # [w, 3]
        out[y] = (1 - fx) * row[x0] + fx * row[x1]
    return out


def _albu_normalize(u8: np.ndarray) -> np.ndarray:
    """albumentations ``Normalize()`` with its defaults, ``(x - mean * max_pixel_value) / (std *
    max_pixel_value)``, then ``ToTensorV2`` (HWC -> CHW)."""
    mean = np.array([0.485, 0.456, 0.406]) * 255.0
    std = np.array([0.229, 0.224, 0.225]) * 255.0
    return ((u8.astype(np.float64) - mean) / std).transpose(2, 0, 1)


def _check_resize(ours_u8: np.ndarray, ref: np.ndarray) -> None:
    """Rounded half up, except where the reference sits on a half (1e-9): there the summation order
    decides, and either neighbour is the definition's value."""
    want = np.floor(ref + 0.5)
    tie = np.abs(ref - np.floor(ref) - 0.5) < 1e-9
    d = np.abs(ours_u8.astype(np.float64) - want)
    assert (d[~tie] == 0).all() and (d[tie] <= 1).all()


def test_miewid_input_is_albumentations_resize_and_normalize():
    assert (ALBU_MEAN, ALBU_STD, ALBU_MAX_PIXEL, MIEWID_SIZE) == ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225),
                                                                  255.0, 440)
    pre = ResizeNormalize(MIEWID_SIZE)
    for img in (_image(301, 250), _image(440, 440, 3)):           # resized, and passed unresized at 440
        u8 = np.asarray(pre.resize_image(img))
        assert u8.shape == (440, 440, 3) and u8.dtype == np.uint8
        _check_resize(u8, _inter_linear_reference(img, 440))
        t = pre(img)
        assert t.dtype == torch.float32 and tuple(t.shape) == (3, 440, 440)
        np.testing.assert_allclose(t.numpy(), _albu_normalize(u8), rtol=0, atol=ATOL)
    # channel order: a pure red image is high in channel 0 only (RGB, as PIL's convert("RGB"))
    red = pre(Image.new("RGB", (50, 70), (255, 0, 0)))
    np.testing.assert_allclose(red[:, 0, 0].numpy(), [(255 - 0.485 * 255) / (0.229 * 255), -0.456 / 0.224,
                                                      -0.406 / 0.225], rtol=0, atol=ATOL)
    # value range: ImageNet-standardised, not [0, 1] and not [0, 255]
    lo = (0 - np.array(ALBU_MEAN) * 255) / (np.array(ALBU_STD) * 255)
    hi = (255 - np.array(ALBU_MEAN) * 255) / (np.array(ALBU_STD) * 255)
    assert (t.amin(dim=(1, 2)).numpy() >= lo - ATOL).all() and (t.amax(dim=(1, 2)).numpy() <= hi + ATOL).all()


def test_miewid_resize_matches_opencv_within_one_grey_level():
    """OpenCV's own INTER_LINEAR (fixed-point weights, SIMD rounding) against the definition: at most
    one grey level apart, on a minority of pixels; exactly equal for an exact 2x reduction."""
    cv2 = pytest.importorskip("cv2")
    for w, h in ((301, 250), (900, 600), (37, 53)):
        arr = np.asarray(_image(w, h, 1))
        ours = inter_linear_resize(arr, 440, 440).astype(int)
        ref = cv2.resize(arr, (440, 440), interpolation=cv2.INTER_LINEAR).astype(int)
        d = np.abs(ours - ref)
        assert d.max() <= 1 and (d > 0).mean() < 0.2, (w, h, d.max(), (d > 0).mean())
    arr = np.asarray(_image(880, 880, 2))
    assert np.array_equal(inter_linear_resize(arr, 440, 440), cv2.resize(arr, (440, 440),
                                                                         interpolation=cv2.INTER_LINEAR))


_MIEW_CONFIG = '''from transformers import PretrainedConfig


class TinyMiewConfig(PretrainedConfig):
    model_type = "tiny_miew_standin"

    def __init__(self, dim=8, **kw):
        self.dim = dim
        super().__init__(**kw)
'''
_MIEW_MODEL = '''import torch
from transformers import PreTrainedModel

from .configuration_tiny_miew import TinyMiewConfig


class TinyMiewModel(PreTrainedModel):
    config_class = TinyMiewConfig

    def __init__(self, config):
        super().__init__(config)
        self.proj = torch.nn.Linear(3, config.dim)
        self.post_init()

    def extract_feat(self, x):
        self.seen = tuple(x.shape)
        return self.proj(x.mean(dim=(2, 3)))

    def forward(self, x):
        raise RuntimeError("the FPR authors call extract_feat, not forward")
'''


def _remote_code_repo(path):
    """A tiny hub repo whose model class is remote code (``auto_map``), shaped like MiewID's:
    ``config.json`` + configuration / modeling files + weights, loaded with ``trust_remote_code``."""
    from transformers import AutoConfig, AutoModel

    path.mkdir(parents=True)
    (path / "configuration_tiny_miew.py").write_text(_MIEW_CONFIG)
    (path / "modeling_tiny_miew.py").write_text(_MIEW_MODEL)
    (path / "config.json").write_text(json.dumps({
        "model_type": "tiny_miew_standin", "dim": 8, "architectures": ["TinyMiewModel"],
        "auto_map": {"AutoConfig": "configuration_tiny_miew.TinyMiewConfig",
                     "AutoModel": "modeling_tiny_miew.TinyMiewModel"}}))
    config = AutoConfig.from_pretrained(str(path), trust_remote_code=True)
    AutoModel.from_config(config, trust_remote_code=True).save_pretrained(str(path))
    return path


def test_miewid_msv2_is_the_paper_row_and_embeds_with_extract_feat(tmp_path):
    assert MIEWID_HUB_ID == "conservationxlabs/miewid-msv2" and MIEWID_MSV3_HUB_ID.endswith("miewid-msv3")
    repo = _remote_code_repo(tmp_path / "miew")
    with pytest.raises(RemoteCodeError, match="allow_remote_code=True"):
        load_encoder("miewid", weights=str(repo))
    for name in ("miewid", "miewid-msv2", "miewid-msv3"):
        model, pre = load_encoder(name, weights=str(repo), allow_remote_code=True)
        assert isinstance(pre, ResizeNormalize) and pre.image_size == 440
        emb = model.embed([_image(120, 90)])
        assert emb.shape == (1, 8) and model.model.seen == (1, 3, 440, 440)      # extract_feat ran


# ----------------------------------------------------------------------------- DINO / CLIP-I (HF slow)
def _hf_slow_reference(img: Image.Image, shortest: int, crop: int, mean, std) -> np.ndarray:
    """``transformers``' slow ``BitImageProcessor`` / ``CLIPImageProcessor``: the shorter side to
    ``shortest`` and the longer to ``int(shortest * long / short)`` with PIL bicubic (resample=3),
    a centre crop at ``(size - crop) // 2``, ``* (1 / 255)`` and ``(x - mean) / std``."""
    w, h = img.size
    nw, nh = (shortest, int(shortest * h / w)) if w <= h else (int(shortest * w / h), shortest)
    r = np.asarray(img.resize((nw, nh), Image.BICUBIC), dtype=np.float64)
    top, left = (nh - crop) // 2, (nw - crop) // 2
    a = (r[top:top + crop, left:left + crop] * (1 / 255)).astype(np.float32)
    return ((a - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)).transpose(2, 0, 1)


def _save_tiny(kind: str, path):
    """A tiny random model of the real class at the full model's input size (224), saved as a
    ``save_pretrained`` folder: ``load_encoder(name, weights=folder)`` takes the full-size path."""
    torch.manual_seed(0)
    if kind == "dino":
        from transformers import Dinov2Config, Dinov2Model

        Dinov2Model(Dinov2Config(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, mlp_ratio=2,
                                 image_size=224, patch_size=32)).save_pretrained(path)
    else:
        from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

        CLIPVisionModelWithProjection(CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                       num_attention_heads=2, image_size=224, patch_size=32,
                                                       projection_dim=8)).save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("name, kind, size, shortest, mean, std", [
    ("dinov2-base", "dino", (313, 250), 256, IMAGENET_MEAN, IMAGENET_STD),
    ("clip-vit-b32", "clip", (301, 250), 224, CLIP_MEAN, CLIP_STD),
])
def test_dino_and_clip_inputs_are_the_transformers_processors(tmp_path, name, kind, size, shortest, mean, std):
    w, h = size
    assert int(shortest * w / h) != round(shortest * w / h)      # the case that tells truncation from rounding
    model, pre = load_encoder(name, weights=_save_tiny(kind, tmp_path / kind))
    for img in (_image(w, h), _image(h, w, 1)):                 # landscape and portrait
        t = pre(img)
        assert tuple(t.shape) == (3, 224, 224) and t.dtype == torch.float32
        np.testing.assert_allclose(t.numpy(), _hf_slow_reference(img, shortest, 224, mean, std), rtol=0, atol=ATOL)
    red = pre(Image.new("RGB", (300, 260), (255, 0, 0)))[:, 100, 100].numpy()
    np.testing.assert_allclose(red, [(1 - mean[0]) / std[0], -mean[1] / std[1], -mean[2] / std[2]], atol=1e-5)


# ----------------------------------------------------------------------------- BioCLIP 2 (open_clip)
def test_bioclip2_input_is_open_clips_evaluation_transform():
    """The library's own transform (``create_model_and_transforms``' third value, what the authors
    call) and a hand reference (shorter side 224 truncated, bicubic, centre crop at rounded offsets)
    on images whose crop margins are odd (round-half-even differs from floor there)."""
    import open_clip

    model = open_clip.CLIP(embed_dim=8, vision_cfg={"image_size": 224, "layers": 1, "width": 16, "patch_size": 32,
                                                    "head_width": 8},
                           text_cfg={"context_length": 8, "vocab_size": 64, "width": 16, "heads": 2, "layers": 1})
    pre = open_clip_preprocess(model)
    assert isinstance(pre, ShortestEdgeCrop) and pre.crop == "round" and pre.image_size == 224
    pc = open_clip.get_model_preprocess_cfg(model)
    theirs = open_clip.image_transform(224, is_train=False, mean=pc.get("mean"), std=pc.get("std"))
    for w, h in ((301, 250), (250, 301), (299, 224), (339, 260)):
        img = _image(w, h, 4)
        t = pre(img)
        assert tuple(t.shape) == (3, 224, 224)
        np.testing.assert_allclose(t.numpy(), theirs(img).numpy(), rtol=0, atol=ATOL)
        # by hand: 299 x 224 keeps 299 wide, margin 75 -> round(37.5) = 38 (floor would give 37)
        nw, nh = (224, int(224 * h / w)) if w <= h else (int(224 * w / h), 224)
        r = np.asarray(img.resize((nw, nh), Image.BICUBIC), dtype=np.float32) / 255.0
        top, left = int(round((nh - 224) / 2.0)), int(round((nw - 224) / 2.0))
        a = r[top:top + 224, left:left + 224]
        ref = ((a - np.asarray(CLIP_MEAN, np.float32)) / np.asarray(CLIP_STD, np.float32)).transpose(2, 0, 1)
        np.testing.assert_allclose(t.numpy(), ref, rtol=0, atol=ATOL)
    assert int(round(75 / 2.0)) != 75 // 2
