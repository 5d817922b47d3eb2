"""The released ID-Sim loaded into ``transformers`` (:mod:`nearid_lib.idsim.release_model`), proved
against an independent implementation: timm's DINOv3 (``Eva``, Meta's fused-qkv layout, its own
RoPE) with the LoRA applied by ``peft`` itself.

Tiny and offline: width 64, 2 blocks, 4 heads, patch 16, 4 registers, 64 px (16 patches).

* (a) timm and transformers, loaded from the same weights (a converter from timm's Meta-style keys
  to transformers' keys, written here from the published conversion facts), give the same
  last-block tokens before the final norm;
* (b) a random LoRA applied with peft on the timm model inside a module tree shaped like the
  authors' (``extractor.model.blocks.N.attn.qkv``, so peft itself writes the release's keys) and
  merged by our loader into the transformers model give the same ID-Sim embeddings (1e-5);
* (c) errors name the file and key; rsLoRA vs plain scaling by hand on one layer;
* (d) ``load_encoder("idsim-release")`` through a dry-run mirror, ``similarity`` with it, and the
  released ID-Sim rows of the paper tables (``score_released``).
"""
from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from nearid_lib import hub
from nearid_lib.idsim import release_model as RM
from release_parity import head_ref, last_output, random_head  # tests/, beside this file

D, L, HEADS, P, R, S = 64, 2, 4, 16, 4, 64       # width, blocks, heads, patch, registers, image px
RANK, ALPHA = 4, 8


# ----------------------------------------------------------------------------- builders
def _timm_dinov3(seed: int = 0) -> nn.Module:
    """timm's DINOv3 (``_qkvb``: q / v biases, zero k bias, like Meta's masked key bias) at tiny
    size with every parameter random (layer scales O(1) instead of 1e-5, so the blocks matter)."""
    timm = pytest.importorskip("timm")
    m = timm.create_model("vit_large_patch16_dinov3_qkvb", pretrained=False, embed_dim=D, depth=L, num_heads=HEADS,
                          img_size=S, num_classes=0)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if n.endswith(("norm1.weight", "norm2.weight", "norm.weight")):
                p.copy_(1.0 + 0.1 * r)
            elif ".gamma_" in n:
                p.copy_(0.5 + 0.1 * r)
            else:
                p.copy_(0.1 * r)
    for blk in m.blocks:
        # timm folds q/v biases into F.linear(x, qkv.weight) unless asked to add them after
        # qkv(x): only then is the qkv Linear called, so a peft LoRA on it takes effect
        blk.attn.qkv_bias_separate = True
    return m.eval()


def _hf_config():
    from transformers import DINOv3ViTConfig

    return DINOv3ViTConfig(hidden_size=D, intermediate_size=4 * D, num_hidden_layers=L, num_attention_heads=HEADS,
                           patch_size=P, image_size=S, num_register_tokens=R, layer_norm_eps=1e-5, rope_theta=100.0,
                           hidden_act="gelu", query_bias=True, key_bias=False, value_bias=True)


def _timm_to_transformers(sd: dict[str, torch.Tensor], hf_keys) -> dict[str, torch.Tensor]:
    """timm's DINOv3 keys (Meta's names, fused qkv) -> ``DINOv3ViTModel``'s: qkv chunked into
    q/k/v (rows q, k, v), q/v biases to q_proj / v_proj (k has none), attn.proj -> o_proj,
    gamma_{1,2} -> layer_scale{1,2}.lambda1, mlp.fc1/fc2 -> up_proj/down_proj, reg_token ->
    register_tokens; every timm key is used once."""
    layer = "model.layer" if any(k.startswith("model.layer.") for k in hf_keys) else "layer"
    used: set[str] = set()

    def take(k):
        used.add(k)
        return sd[k]

    out = {"embeddings.cls_token": take("cls_token"), "embeddings.register_tokens": take("reg_token"),
           "embeddings.mask_token": torch.zeros(1, 1, D),
           "embeddings.patch_embeddings.weight": take("patch_embed.proj.weight"),
           "embeddings.patch_embeddings.bias": take("patch_embed.proj.bias"),
           "norm.weight": take("norm.weight"), "norm.bias": take("norm.bias")}
    for n in range(L):
        b, t = f"blocks.{n}.", f"{layer}.{n}."
        q, k, v = take(b + "attn.qkv.weight").chunk(3, 0)
        out.update({
            t + "attention.q_proj.weight": q, t + "attention.k_proj.weight": k, t + "attention.v_proj.weight": v,
            t + "attention.q_proj.bias": take(b + "attn.q_bias"), t + "attention.v_proj.bias": take(b + "attn.v_bias"),
            t + "attention.o_proj.weight": take(b + "attn.proj.weight"),
            t + "attention.o_proj.bias": take(b + "attn.proj.bias"),
            t + "layer_scale1.lambda1": take(b + "gamma_1"), t + "layer_scale2.lambda1": take(b + "gamma_2"),
            t + "norm1.weight": take(b + "norm1.weight"), t + "norm1.bias": take(b + "norm1.bias"),
            t + "norm2.weight": take(b + "norm2.weight"), t + "norm2.bias": take(b + "norm2.bias"),
            t + "mlp.up_proj.weight": take(b + "mlp.fc1.weight"), t + "mlp.up_proj.bias": take(b + "mlp.fc1.bias"),
            t + "mlp.down_proj.weight": take(b + "mlp.fc2.weight"),
            t + "mlp.down_proj.bias": take(b + "mlp.fc2.bias")})
    assert used == set(sd), f"timm keys not converted: {sorted(set(sd) - used)}"
    return {k: v.clone() for k, v in out.items()}


def _hf_from_timm(tm: nn.Module):
    from transformers import DINOv3ViTModel

    hf = DINOv3ViTModel(_hf_config())
    hf.load_state_dict(_timm_to_transformers(tm.state_dict(), hf.state_dict().keys()), strict=True)
    return hf.eval()


class _Extractor(nn.Module):
    def __init__(self, vit):
        super().__init__()
        self.model = vit


class _Perceptual(nn.Module):
    """The module tree the authors wrap with peft (``extractor.model`` = the ViT, heads beside it),
    so peft's own ``save_pretrained`` writes the release's key names."""

    def __init__(self, vit):
        super().__init__()
        self.extractor = _Extractor(vit)
        self.mlp_cls = RM.ResidualHead(D, 32)
        self.mlp_patch = RM.ResidualHead(D, 32)


def _random_head(seed: int, hidden: int = 32) -> dict[str, torch.Tensor]:
    return random_head(seed, D, hidden, 8, 6)


def _centre_l2(x):
    x = x - x.mean(-1, keepdim=True)
    return x / x.norm(dim=-1, keepdim=True)


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """A base (timm weights converted to a transformers folder) and a release whose adapter peft
    wrote from LoRA on the timm model; returns the folders, the peft model and the head dicts."""
    from peft import LoraConfig, get_peft_model

    tmp = tmp_path_factory.mktemp("release")
    tm = _timm_dinov3(0)
    base_dir = tmp / "base"
    _hf_from_timm(tm).save_pretrained(base_dir)
    pm = get_peft_model(_Perceptual(tm), LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=["qkv"], bias="none",
                                                    lora_dropout=0.0))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():        # a trained adapter: B is not zero
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif "lora_A" in n:
                p.copy_(torch.randn(p.shape, generator=g) / 8)
    rel_dir = tmp / "rel"
    pm.save_pretrained(rel_dir)
    heads = {"mlp_cls": _random_head(2), "mlp_patch": _random_head(3)}
    for name, sd in heads.items():
        torch.save(sd, rel_dir / f"{name}.pth")
    pm.eval()
    return {"base": base_dir, "rel": rel_dir, "peft": pm, "heads": heads, "timm": tm}


def _pixels(n=2, seed=5):
    return torch.randn(n, 3, S, S, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- (a) timm == transformers
def test_timm_and_transformers_same_last_block_tokens_before_the_norm():
    """Tolerance 2e-5 absolute on tokens of magnitude up to ~10 (observed: ~1e-6, float32 rounding
    at that magnitude): the two libraries compute the same maths in a different order (RoPE angles
    as coords / periods in timm, coords * inv_freq in transformers; q/v biases added after the
    matmul in timm, inside it in transformers; SDPA over differently laid-out tensors), so they
    agree to float32 rounding, not bit for bit."""
    tm = _timm_dinov3(0)
    hf = _hf_from_timm(tm)
    x = _pixels()
    a = last_output(tm.blocks[-1], lambda: tm(x))
    b = last_output(RM.encoder_layers(hf)[-1], lambda: hf(pixel_values=x))
    assert a.shape == b.shape == (2, 1 + R + (S // P) ** 2, D)
    assert (a - b).abs().max().item() < 2e-5
    # the tokens ID-Sim reads are *before* the final norm: the model's own output is norm(tokens)
    with torch.no_grad():
        out = hf(pixel_values=x, output_hidden_states=True)
        torch.testing.assert_close(hf.norm(b), out.last_hidden_state, rtol=0, atol=1e-6)
        assert (b - out.last_hidden_state).abs().max() > 0.1
        # what transformers' hidden_states[-1] is depends on its version (the 4.5x sources replace it
        # by the post-norm output): the loader hooks the last layer; in 5.x it is the pre-norm tensor
        import transformers

        last = out.hidden_states[-1]
        if int(transformers.__version__.split(".")[0]) >= 5:
            assert torch.equal(last, b)
        else:
            assert torch.equal(last, b) or torch.allclose(last, out.last_hidden_state)
    # and timm's final norm is the same norm (a check that the converter moved it too)
    with torch.no_grad():
        torch.testing.assert_close(tm.norm(a), out.last_hidden_state, rtol=0, atol=5e-5)


# ----------------------------------------------------------------------------- (b) peft on timm == our merge
def test_peft_lora_on_timm_equals_our_merge_into_transformers(release):
    """The same ID-Sim CLS / patch embeddings to 1e-5 (the release's features, heads and
    normalisation written out here; the LoRA applied unmerged by peft on the fused qkv)."""
    keys = json.loads((release["rel"] / "adapter_config.json").read_text())
    assert keys["target_modules"] == ["qkv"] and keys["r"] == RANK
    from safetensors.torch import load_file

    saved = sorted(load_file(str(release["rel"] / "adapter_model.safetensors")))
    assert saved[0] == "base_model.model.extractor.model.blocks.0.attn.qkv.lora_A.weight" and len(saved) == 2 * L

    model = RM.load_idsim_release(release["rel"], base=release["base"], image_size=S)
    x = _pixels()
    vit = release["peft"].base_model.model.extractor.model
    tok = last_output(vit.blocks[-1], lambda: vit(x))                          # [B, 1 + R + N, D]
    cls_ref = _centre_l2(head_ref(release["heads"]["mlp_cls"], tok[:, 0]))
    patch_ref = _centre_l2(head_ref(release["heads"]["mlp_patch"], tok[:, 1 + R:]))
    with torch.no_grad():
        out = model(x)
    assert out.pooled.shape == (2, D) and out.tokens.shape == (2, (S // P) ** 2, D)
    torch.testing.assert_close(out.pooled, cls_ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.tokens, patch_ref, rtol=0, atol=1e-5)
    # the LoRA matters at this size (the comparison is not of two unadapted models) ...
    with release["peft"].disable_adapter():
        tok0 = last_output(vit.blocks[-1], lambda: vit(x))
    assert (tok - tok0).abs().max() > 1e-2
    # ... and adapters_disabled() gives the base back exactly as peft's disable_adapter does
    with model.adapters_disabled(), torch.no_grad():
        cls0, patches0 = model.raw_from_prefix(model.prefix(x))
    torch.testing.assert_close(cls0, tok0[:, 0], rtol=0, atol=2e-5)
    torch.testing.assert_close(patches0, tok0[:, 1 + R:], rtol=0, atol=2e-5)
    with torch.no_grad():
        torch.testing.assert_close(model(x).pooled, out.pooled, rtol=0, atol=0)   # restored exactly


def test_metric_matches_the_release_definitions(release):
    """Distances: cls = 1 - cos(CLS), patch = 1 - cos(mean of the normalised patch embeddings),
    joint = their sum; joint embedding cosine = the mean of the two cosines; preprocessing =
    torchvision's Resize((448, 448), BICUBIC) + ToTensor + ImageNet Normalize on a PIL image."""
    model = RM.load_idsim_release(release["rel"], base=release["base"], image_size=S)
    rng = np.random.default_rng(0)
    ims = [Image.fromarray(rng.integers(0, 256, (40 + 7 * i, 52, 3), dtype=np.uint8)) for i in range(4)]
    e = model.embeddings(ims, batch_size=3, kinds=("cls", "patch", "joint", "tokens"))
    with torch.no_grad():
        out = model(model.preprocess.batch(ims))
    cls, tok = out.pooled, out.tokens
    mean = tok.mean(1) / tok.mean(1).norm(dim=-1, keepdim=True)
    torch.testing.assert_close(e["cls"], cls, rtol=0, atol=1e-6)
    torch.testing.assert_close(e["patch"], mean, rtol=0, atol=1e-6)
    a, b = [0, 1], [2, 3]
    dc = 1 - (cls[a] * cls[b]).sum(-1)
    dp = 1 - (mean[a] * mean[b]).sum(-1)
    first, second = [ims[i] for i in a], [ims[i] for i in b]
    np.testing.assert_allclose(model.distance(first, second, "cls"), dc.numpy(), atol=1e-6)
    np.testing.assert_allclose(model.distance(first, second, "patch"), dp.numpy(), atol=1e-6)
    np.testing.assert_allclose(model.distance(first, second), (dc + dp).numpy(), atol=1e-6)
    cj = (e["joint"][a] * e["joint"][b]).sum(-1)
    torch.testing.assert_close(cj, 1 - (dc + dp) / 2, rtol=0, atol=1e-6)
    assert np.allclose(model.distance(first, first), 0, atol=1e-6)
    with pytest.raises(ValueError, match="mode must be"):
        model.distance(first, second, "sinkhorn")
    # the library's patch scorer reads the release's patch similarity
    from nearid_lib.idsim.public_eval import pair_scores

    np.testing.assert_allclose(pair_scores(model, first, second, kind="patch"), 1 - dp.numpy(), atol=1e-6)
    np.testing.assert_allclose(pair_scores(model, first, second), 1 - dc.numpy(), atol=1e-6)

    pre = RM.load_idsim_release(release["rel"], base=release["base"]).preprocess
    assert pre.image_size == RM.RELEASE_IMAGE_SIZE == 448
    tv = pytest.importorskip("torchvision.transforms")
    ref = tv.Compose([tv.Resize((448, 448), interpolation=tv.InterpolationMode.BICUBIC), tv.ToTensor(),
                      tv.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    torch.testing.assert_close(pre(ims[1]), ref(ims[1].convert("RGB")), rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------- (c) errors and scaling
def _copy_release(release, tmp_path):
    d = tmp_path / "rel"
    shutil.copytree(release["rel"], d)
    return d


def _rewrite_adapter(d, fn):
    from safetensors.torch import load_file, save_file

    f = d / "adapter_model.safetensors"
    t = load_file(str(f))
    fn(t)
    save_file(t, str(f))


def test_every_adapter_key_is_consumed(release, tmp_path):
    d = _copy_release(release, tmp_path)
    a0 = "base_model.model.extractor.model.blocks.0.attn.qkv.lora_A.weight"
    extra = "base_model.model.mlp_cls.fc1.lora_A.weight"
    _rewrite_adapter(d, lambda t: t.update({extra: torch.zeros(RANK, D)}))
    with pytest.raises(RM.ReleaseFormatError, match=rf"adapter_model.safetensors: key '{re_(extra)}' is not consumed"):
        RM.load_idsim_release(d, base=release["base"], image_size=S)
    d = _copy_release(release, tmp_path / "b")
    far = "base_model.model.extractor.model.blocks.7.attn.qkv.lora_A.weight"
    _rewrite_adapter(d, lambda t: t.update({far: t[a0].clone()}))
    with pytest.raises(RM.ReleaseFormatError, match=rf"key '{re_(far)}': block 7 is out of range .*2 blocks"):
        RM.load_idsim_release(d, base=release["base"], image_size=S)
    d = _copy_release(release, tmp_path / "c")
    _rewrite_adapter(d, lambda t: t.update({a0: torch.zeros(RANK, D + 1)}))
    with pytest.raises(RM.ReleaseFormatError, match=rf"key '{re_(a0)}' has shape \(4, 65\)"):
        RM.load_idsim_release(d, base=release["base"], image_size=S)
    d = _copy_release(release, tmp_path / "d")
    _rewrite_adapter(d, lambda t: t.pop("base_model.model.extractor.model.blocks.1.attn.qkv.lora_B.weight"))
    with pytest.raises(RM.ReleaseFormatError, match=r"blocks.1.attn.qkv.lora_A.weight' has no lora_B partner"):
        RM.load_idsim_release(d, base=release["base"], image_size=S)
    # a module the config does not target, under a name the map knows
    d = _copy_release(release, tmp_path / "e")
    fc1 = "base_model.model.extractor.model.blocks.0.mlp.fc1.lora_A.weight"
    _rewrite_adapter(d, lambda t: t.update({fc1: torch.zeros(RANK, D)}))
    with pytest.raises(RM.ReleaseFormatError, match=r"module mlp.fc1 is not among target_modules \('qkv',\)"):
        RM.load_idsim_release(d, base=release["base"], image_size=S)
    # an adapter-name segment (older PEFT files) is read like the plain key
    d = _copy_release(release, tmp_path / "f")
    _rewrite_adapter(d, lambda t: t.update({k.replace(".weight", ".default.weight"): t.pop(k) for k in list(t)}))
    m = RM.load_idsim_release(d, base=release["base"], image_size=S)
    ref = RM.load_idsim_release(release["rel"], base=release["base"], image_size=S)
    x = _pixels(1)
    with torch.no_grad():
        assert torch.equal(m(x).pooled, ref(x).pooled)


def re_(s: str) -> str:
    import re

    return re.escape(s)


def test_head_files_are_loaded_strictly(release, tmp_path):
    d = _copy_release(release, tmp_path)
    sd = dict(release["heads"]["mlp_patch"])
    del sd["beta_logit"]
    torch.save(sd, d / "mlp_patch.pth")
    with pytest.raises(RM.ReleaseFormatError, match=r"mlp_patch.pth: key 'beta_logit' missing"):
        RM.load_idsim_release(d, base=release["base"], image_size=S)
    torch.save({**release["heads"]["mlp_patch"], "fc3.weight": torch.zeros(1)}, d / "mlp_patch.pth")
    with pytest.raises(RM.ReleaseFormatError, match=r"mlp_patch.pth: unexpected key 'fc3.weight'"):
        RM.load_idsim_release(d, base=release["base"], image_size=S)
    torch.save({**release["heads"]["mlp_cls"], "ln.weight": torch.ones(D + 1)}, d / "mlp_cls.pth")
    with pytest.raises(RM.ReleaseFormatError, match=r"mlp_cls.pth: key 'ln.weight' has shape \(65,\)"):
        RM.load_idsim_release(d, base=release["base"], image_size=S)
    (d / "mlp_cls.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(RM.ReleaseFormatError, match=r"mlp_cls.pth: not a tensor state dict"):
        RM.load_idsim_release(d, base=release["base"], image_size=S)
    (d / "mlp_cls.pth").unlink()
    with pytest.raises(FileNotFoundError, match=r"mlp_cls.pth missing in .*download"):
        RM.load_idsim_release(d, base=release["base"], image_size=S)


@pytest.mark.parametrize("setting, match", [
    ({"bias": "all"}, r"key 'bias' is 'all'"),
    ({"use_dora": True}, r"key 'use_dora' = True \(DoRA"),
    ({"modules_to_save": ["mlp_cls"]}, r"key 'modules_to_save'"),
    ({"rank_pattern": {"qkv": 8}}, r"key 'rank_pattern'"),
    ({"init_lora_weights": "pissa"}, r"key 'init_lora_weights' = 'pissa' rewrites the base"),
    ({"peft_type": "IA3"}, r"peft_type 'IA3' is not a LoRA"),
    ({"r": None}, r"key 'r' missing"),
])
def test_adapter_settings_that_cannot_be_merged_are_refused(release, tmp_path, setting, match):
    d = _copy_release(release, tmp_path)
    f = d / "adapter_config.json"
    f.write_text(json.dumps({**json.loads(f.read_text()), **setting}))
    with pytest.raises(RM.ReleaseFormatError, match=rf"adapter_config.json: {match}"):
        RM.load_idsim_release(d, base=release["base"], image_size=S)


@pytest.mark.parametrize("rslora", [False, True])
def test_scaling_by_hand_on_one_layer(release, rslora):
    """q/k/v of block 1 after the merge = before + scale * B[rows] @ A, scale = alpha / r (plain)
    or alpha / sqrt(r) (rsLoRA); a failed merge changes nothing."""
    from safetensors.torch import load_file
    from transformers import DINOv3ViTModel

    t = load_file(str(release["rel"] / "adapter_model.safetensors"))
    A = t["base_model.model.extractor.model.blocks.1.attn.qkv.lora_A.weight"].double()
    B = t["base_model.model.extractor.model.blocks.1.attn.qkv.lora_B.weight"].double()
    hf = DINOv3ViTModel.from_pretrained(release["base"]).float()
    att = RM.encoder_layers(hf)[1].attention
    before = [getattr(att, n).weight.detach().double().clone() for n in ("q_proj", "k_proj", "v_proj")]
    cfg = RM.AdapterConfig(r=RANK, lora_alpha=ALPHA, use_rslora=rslora)
    scale = ALPHA / math.sqrt(RANK) if rslora else ALPHA / RANK
    assert cfg.scale == scale and scale == (4.0 if rslora else 2.0)
    with pytest.raises(RM.ReleaseFormatError):        # checked before any weight moves
        RM.merge_adapter(hf, cfg, {**t, "base_model.model.extractor.model.blocks.9.attn.qkv.lora_A.weight": A.float()})
    assert all(torch.equal(getattr(att, n).weight.double(), w) for n, w in zip(("q_proj", "k_proj", "v_proj"), before))
    RM.merge_adapter(hf, cfg, t)
    for i, n in enumerate(("q_proj", "k_proj", "v_proj")):
        want = before[i] + scale * B[i * D:(i + 1) * D] @ A
        torch.testing.assert_close(getattr(att, n).weight.double(), want, rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- (d) the registry, a mirror
@pytest.fixture
def tiny_mirror(tmp_path, monkeypatch):
    from tools.paper_fixtures.idsim import write_idsim_backbones

    d = tmp_path / "hub"
    assert write_idsim_backbones(d) == [RM.BASE_REPO, RM.RELEASE_REPO]
    assert sorted(p.name for p in (d / RM.RELEASE_REPO).iterdir()) == sorted(RM.RELEASE_FILES)
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(d))
    return d


def test_load_encoder_idsim_release_through_the_mirror(tiny_mirror, monkeypatch, tmp_path):
    from tools.paper_fixtures.idsim import TINY_DINOV3
    from nearid_lib.models import load_encoder

    hub.clear_reads()
    model, pre = load_encoder("idsim-release", tiny=True)
    assert isinstance(model, RM.IDSimRelease) and pre is model.preprocess
    assert model.image_size == TINY_DINOV3["image_size"] and model.embed_dim == TINY_DINOV3["hidden_size"]
    assert model.n_tokens == (TINY_DINOV3["image_size"] // TINY_DINOV3["patch_size"]) ** 2
    assert model.info["n_lora_tensors"] == 2 * TINY_DINOV3["num_hidden_layers"]
    assert model.info["n_merged"] == 3 * TINY_DINOV3["num_hidden_layers"]
    assert {RM.RELEASE_REPO, RM.BASE_REPO} <= set(hub.reads())
    assert RM.RELEASE_REPO in model.weights and RM.RELEASE_REPO in model.cache_key()
    assert not any(p.requires_grad for p in model.parameters())
    # the full-size name without tiny reads the same mirror (the dry run's release) at 448 px
    full, _ = load_encoder("idsim-release", image_size=16)
    ims = [Image.new("RGB", (20, 30), (200, 10, 10)), Image.new("RGB", (30, 20), (10, 10, 200))]
    assert full.embed(ims).shape == (2, TINY_DINOV3["hidden_size"])
    with pytest.raises(ValueError, match="not a multiple of the patch size"):
        load_encoder("idsim-release", image_size=30)
    with pytest.raises(ValueError, match="weights='random' is not supported"):
        load_encoder("idsim-release", weights="random")
    # `nearid sim` / similarity() with it, loaded the way the smoke profile loads encoders
    import nearid_lib

    sims = nearid_lib.similarity(ims, ims[::-1], encoder="idsim-release", profile="smoke", verbose=False)
    e = model.embed(ims)
    np.testing.assert_allclose(sims.similarity, [float(e[0] @ e[1])] * 2, atol=1e-5)
    # not in the mirror: the hub's error with the download command
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(tmp_path / "empty"))
    with pytest.raises(hub.HubError, match=r"download chaenayo/id-sim_dinov3_vitl16_cls_patch"):
        load_encoder("idsim-release", tiny=True)
    monkeypatch.delenv(hub.HUB_DIR_ENV)
    with pytest.raises(OSError, match=r"tiny=True reads the tiny release of a dry-run mirror"):
        load_encoder("idsim-release", tiny=True)


def test_released_idsim_rows_in_the_paper_tables(tiny_mirror, tmp_path, monkeypatch):
    """``score_released`` with the dry-run mirror scores the released ID-Sim: Figure 25's ``ID-Sim``
    rows, Table 2a's ``Ours (ViT-L)``, Table 2b's ``ours`` beside ``dinov3``; its reasons are gone."""
    import datasets

    from nearid_lib.config import get_profile
    from tools.paper_fixtures.idsim import write_dreambenchpp, write_subjects2k
    from nearid_lib.features.profile_encoders import idsim_release_row
    from nearid_lib.data.eval_datasets import load_subjects2k
    from nearid_lib.idsim import released as REL

    write_subjects2k(tiny_mirror / "chaenayo" / "Subjects2k", n_pairs=8)
    write_dreambenchpp(tmp_path / "dl" / "dreambenchpp")
    monkeypatch.setenv("NEARID_DOWNLOADS", str(tmp_path / "dl"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    cfg = get_profile("paper", **{"idsim.mllm_judge": None, "idsim.frozen_rows": ("dinov3-vitl16",),
                                  "idsim.image_size": 32, "idsim.eval_batch_size": 8, "device": "cpu"})
    assert REL.released_idsim_reason(cfg.idsim.released_model) is None
    sc = REL.score_released(cfg, log=lambda m: None)
    assert REL.RELEASE_ROW in sc.results and REL.RELEASE_KEY not in sc.missing
    assert set(sc.results[REL.RELEASE_ROW]) >= {"subjects2k_ap", "dreambench_spearman"}
    # its CLS row is the release's CLS cosine
    enc = idsim_release_row(cfg)
    s2k = load_subjects2k(cfg.idsim.subjects2k_repo)
    res, _ = REL.subjects2k_metrics(enc, s2k, 8)
    assert sc.results[REL.RELEASE_ROW]["subjects2k_ap"] == pytest.approx(res["subjects2k_ap"])
    t = REL.released_table(sc, "paper")
    assert set(t.model) == {"DINOv3", "ID-Sim"}
    assert "released ID-Sim" in t.set_index("model").ours_label["ID-Sim"].iloc[0]
    m = REL.released_mllm_table(sc, "paper").set_index("scorer")
    assert m.row[REL.RELEASE_ROW] == "Ours (ViT-L)" and np.isfinite(m.subjects2k_ap[REL.RELEASE_ROW])
    p = REL.released_patch_table(sc, "paper")
    assert {"dinov3", "ours"} <= set(p.columns) and np.isfinite(p[["dinov3", "ours"]].to_numpy()).all()
    why = REL.not_scored(cfg, sc)
    assert "cannot" not in why[REL.RELEASE_KEY] and "ours_no_patch" in why[REL.RELEASE_KEY]
    assert "released ID-Sim" not in REL.world_only_tables(cfg)["09_idsim_persam"]
    # the release gone from the mirror: the reason is the missing download, with its command
    shutil.rmtree(tiny_mirror / RM.RELEASE_REPO)
    sc2 = REL.score_released(cfg, log=lambda m: None)
    assert REL.RELEASE_ROW not in sc2.results and "ours" not in REL.released_patch_table(sc2, "paper").columns
    why2 = REL.not_scored(cfg, sc2)[REL.RELEASE_KEY]
    assert "not in the hub mirror" in why2 and "download chaenayo/id-sim_dinov3_vitl16_cls_patch" in why2
