"""The ID-Sim model: LoRA on ViTs and the CNN, frozen equivalence of untrained adapters, training a
few steps, checkpoints."""
from __future__ import annotations

import pytest
import torch

from nearid_lib.idsim.losses import idsim_loss
from nearid_lib.idsim.model import build_idsim, load_idsim, save_idsim


VIT = dict(backbone="dinov2-base", tiny=True, head_hidden=16, head_out=8)


@pytest.fixture(scope="module")
def vit():
    torch.manual_seed(0)
    return build_idsim(**VIT)


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(0)
    return build_idsim(backbone="efficientnet-lite0", tiny=True, head_hidden=16, head_out=8, adapt_stages=1)


def _lora_names(model):
    return [n for n, _ in model.named_parameters() if "lora_" in n]


@pytest.mark.parametrize("which", ["vit", "cnn"])
def test_lora_attached_and_only_lora_and_heads_train(which, request):
    model = request.getfixturevalue(which)
    names = _lora_names(model)
    assert names, "peft attached no LoRA weights"
    train = {n for n, p in model.named_parameters() if p.requires_grad}
    assert train == set(names) | {n for n, _ in model.named_parameters() if n.startswith(("cls_head.", "patch_head."))}
    # rank 16 everywhere
    A = [p for n, p in model.named_parameters() if "lora_A" in n]
    assert all(p.shape[0] == 16 for p in A)
    if which == "vit":
        targets = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in names}
        assert {"q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2"} <= targets
    else:   # only the 1x1 convs of the last stage + conv_head
        assert all(("blocks.6." in n and ("conv_pw." in n or "conv_pwl." in n)) or "conv_head" in n for n in names)


@pytest.mark.parametrize("which", ["vit", "cnn"])
def test_untrained_adapters_equal_frozen_backbone(which, request):
    model = request.getfixturevalue(which)
    x = torch.randn(2, 3, model.image_size, model.image_size)
    with torch.no_grad():
        cls, tok = model.raw_from_prefix(model.prefix(x))
        ref = model.backbone(x)
    torch.testing.assert_close(cls, ref.pooled)
    torch.testing.assert_close(tok, ref.tokens)


def test_few_steps_reduce_loss_on_fixed_batch():
    torch.manual_seed(1)
    model = build_idsim(**VIT)
    model.train()
    x = torch.randn(12, 3, model.image_size, model.image_size)
    feats = model.prefix(x)
    opt = torch.optim.AdamW(model.trainable_parameters(), lr=3e-3, weight_decay=0.0)
    lora_before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}
    losses = []
    for _ in range(12):
        out = model.from_prefix(feats)
        c, t = out.pooled, out.tokens
        loss, _ = idsim_loss(c[:4], c[4:8], c[8:], t[:4], t[4:8], t[8:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.1, losses
    moved = [n for n, p in model.named_parameters() if "lora_B" in n and not torch.equal(p, lora_before[n])]
    assert moved, "LoRA B matrices did not receive gradient updates"
    assert all(not p.requires_grad for n, p in model.backbone.named_parameters() if "lora_" not in n)


@pytest.mark.parametrize("which", ["vit", "cnn"])
def test_checkpoint_round_trip(which, request, tmp_path):
    model = request.getfixturevalue(which)
    with torch.no_grad():   # make LoRA non-trivial so the round trip is meaningful
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    model.eval()
    save_idsim(model, tmp_path, extra={"note": "t"})
    loaded, meta = load_idsim(tmp_path)
    assert meta["note"] == "t" and meta["spec"]["tiny"] is True
    x = torch.randn(2, 3, model.image_size, model.image_size)
    with torch.no_grad():
        a, b = model(x), loaded(x)
    torch.testing.assert_close(a.pooled, b.pooled)
    torch.testing.assert_close(a.tokens, b.tokens)
    (tmp_path / "idsim.json").unlink()
    with pytest.raises(FileNotFoundError, match="idsim.json"):
        load_idsim(tmp_path)


def test_patch_grid_pools_tokens_and_conv_head_only_adapters():
    import torch.nn.functional as F

    torch.manual_seed(0)
    full = build_idsim(backbone="efficientnet-lite0", tiny=True, head_hidden=16, head_out=8, adapt_stages=0)
    names = _lora_names(full)
    assert names and all("conv_head" in n for n in names)            # adapt_stages=0: conv_head only
    torch.manual_seed(0)
    grid = build_idsim(backbone="efficientnet-lite0", tiny=True, head_hidden=16, head_out=8, adapt_stages=0,
                       patch_grid=2)
    grid.load_state_dict(full.state_dict())
    x = torch.randn(2, 3, full.image_size, full.image_size)
    with torch.no_grad():
        c0, t0 = full.raw_from_prefix(full.prefix(x))
        c1, t1 = grid.raw_from_prefix(grid.prefix(x))
    side = int(round(t0.shape[1] ** 0.5))
    want = F.adaptive_avg_pool2d(t0.transpose(1, 2).reshape(2, -1, side, side), 2).flatten(2).transpose(1, 2)
    assert t1.shape == (2, 4, t0.shape[2])
    torch.testing.assert_close(t1, want)
    torch.testing.assert_close(c1, c0)                              # CLS: GAP of the full map either way
    torch.testing.assert_close(c0, t0.mean(1))


def test_cnn_prefix_runs_folded_and_equals_the_backbone_stages(cnn, monkeypatch):
    """With folding on (``NEARID_FOLD_BATCHNORM=1``) the frozen prefix runs with its BatchNorms folded:
    equal to the backbone's own stages up to float rounding (random BatchNorm statistics, so folding
    matters), the backbone untouched; with it off (portable numerics' default) it is those stages."""
    monkeypatch.setenv("NEARID_FOLD_BATCHNORM", "1")
    m = cnn.backbone.model
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for bn in (m.bn1, m.blocks[0][0].bn1):
            bn.running_var.copy_(torch.rand(bn.running_var.shape, generator=g) + 0.5)
            bn.running_mean.copy_(torch.randn(bn.running_mean.shape, generator=g) * 0.3)
        x = torch.randn(2, 3, cnn.image_size, cnn.image_size, generator=g)
        fast = cnn.prefix(x)
        ref = m.blocks[:cnn.split](m.bn1(m.conv_stem(x)))
    assert (fast - ref).abs().max() > 0
    assert (fast - ref).abs().max() <= 1e-5 * ref.abs().max()
    assert type(m.bn1).__name__ == "BatchNormAct2d"
    monkeypatch.setenv("NEARID_FOLD_BATCHNORM", "0")
    with torch.no_grad():
        assert torch.equal(cnn.prefix(x), ref)


def test_spec_defaults_are_the_profile_sections():
    """IDSimSpec takes its model fields' defaults from IDSimConfig (one source): a default spec is
    the default section's, and a profile's spec carries every shared field of its section."""
    from dataclasses import fields

    from nearid_lib.config import IDSimConfig, get_profile
    from nearid_lib.idsim.train import idsim_spec
    from nearid_lib.idsim.model import IDSimSpec

    shared = [f.name for f in fields(IDSimSpec) if f.name != "weights"]
    assert shared and all(hasattr(IDSimConfig, n) for n in shared)
    assert IDSimSpec() == IDSimSpec.from_config(IDSimConfig()) and IDSimSpec().adapt_stages == 1
    for name in ("smoke", "mini", "paper"):
        cfg = get_profile(name, **{"idsim.adapt_stages": 2, "idsim.patch_grid": 3})
        spec = idsim_spec(cfg)
        assert all(getattr(spec, n) == getattr(cfg.idsim, n) for n in shared) and spec.weights is None
        assert spec.adapt_stages == 2 and spec.patch_grid == 3
    assert IDSimSpec.from_config(IDSimConfig(), weights="w.pt").weights == "w.pt"


def test_seed_checkpoints_load_in_seed_order(cnn, tmp_path):
    """The published checkpoint lists its training seeds; load_idsim_seeds reads each from
    seed_checkpoint_dir, and a listed seed whose folder is gone is an error naming it."""
    from nearid_lib.idsim.model import load_idsim_seeds, seed_checkpoint_dir

    torch.manual_seed(1)
    other = build_idsim(backbone="efficientnet-lite0", tiny=True, head_hidden=16, head_out=8, adapt_stages=1)
    save_idsim(cnn, tmp_path, extra={"seed": 3, "seeds": [3, 4]})
    save_idsim(other, seed_checkpoint_dir(tmp_path, 4), extra={"seed": 4})
    models = load_idsim_seeds(tmp_path)
    assert list(models) == [3, 4]
    x = torch.randn(1, 3, cnn.image_size, cnn.image_size)
    with torch.no_grad():
        torch.testing.assert_close(models[4](x).pooled, other.eval()(x).pooled)
    single = tmp_path / "single"
    save_idsim(cnn, single, extra={"seed": 0})
    assert list(load_idsim_seeds(single)) == [0]
    # the registry's seeds hook reads the same list, without loading weights
    from nearid_lib.models import checkpoint_seeds
    assert checkpoint_seeds("idsim", tmp_path) == (3, [3, 4])
    assert checkpoint_seeds("idsim", single) == (0, [0])
    import shutil
    shutil.rmtree(seed_checkpoint_dir(tmp_path, 4))
    with pytest.raises(FileNotFoundError, match="seed 4 is listed"):
        load_idsim_seeds(tmp_path)


def test_two_trainings_never_share_an_embedding_row(tmp_path):
    """ID-Sim's ``cache_key`` is its frozen prefix's (two trainings share prefix features), so the
    key of its embeddings adds what training changed: a model with real backbone weights (not a tiny
    one, whose every parameter is hashed anyway) whose head or LoRA moved gets another fingerprint,
    and the one feature store gives it its own rows instead of the other model's."""
    import copy

    import numpy as np
    from PIL import Image

    from nearid_lib.features import FeatureStore, encoder_fingerprint
    from nearid_lib.features.embed import embed, file_refs

    torch.manual_seed(0)
    a = build_idsim(backbone="efficientnet-lite0", image_size=64, head_hidden=16, head_out=8, adapt_stages=1)
    assert not a.tiny
    b = copy.deepcopy(a)
    assert encoder_fingerprint(b) == encoder_fingerprint(a)          # the same weights: the same rows
    with torch.no_grad():
        b.cls_head.fc1.weight.mul_(-1.0)
    assert encoder_fingerprint(b) != encoder_fingerprint(a)
    c = copy.deepcopy(a)
    with torch.no_grad():
        next(p for n, p in c.named_parameters() if "lora_B" in n).add_(0.1)
    assert encoder_fingerprint(c) != encoder_fingerprint(a)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"im{i}.png")
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(paths[-1])
    refs = file_refs([str(x) for x in paths])
    store = FeatureStore(tmp_path / "rows")
    ea = embed(a, refs, "full", store, progress=False)
    eb = embed(b, refs, "full", store, progress=False)
    assert not np.allclose(ea, eb)
    assert np.array_equal(embed(a, refs, "full", store, progress=False), ea)


def test_the_embedder_scores_id_sim_with_its_own_forward(smoke_world, tmp_path):
    """ID-Sim keeps its LoRA-adapted backbone as ``.backbone`` but has no NearID head: the Embedder
    (the NearID-bench protocol, the cross-paper table, the score card) embeds it with its own forward,
    its projected CLS, never with the inner backbone's pooled output (which the cross-paper table's
    ID-Sim row once read, so its sensitivities sat near the frozen backbone's). A feature
    classifier, another encoder around a backbone, likewise."""
    from nearid_lib.config import get_profile
    from nearid_lib.features import Embedder
    from nearid_lib.features.payloads import backbone_of

    torch.manual_seed(0)
    m = build_idsim(backbone="efficientnet-lite0", tiny=True, head_hidden=16, head_out=8)
    assert backbone_of(m) is m
    grids = smoke_world.grids
    rels, masks = grids.path.tolist()[:6], grids["mask"].tolist()[:6]
    emb = Embedder(m, smoke_world, profile=get_profile("smoke"), progress=False, store_tokens=False,
                   cache_root=tmp_path / "cache")
    got = emb.embed(rels, "full", masks=masks)
    want = m.embed([smoke_world.image(r) for r in rels])
    assert got.shape == want.shape == (6, 8)
    # the group caches keep pooled outputs as float16: equal to that precision
    assert torch.allclose(got, want, atol=2e-3)
    inner = torch.nn.functional.normalize(m.backbone.embed([smoke_world.image(r) for r in rels]), dim=-1)
    assert inner.shape[1] != 8 or not torch.allclose(inner, want, atol=1e-2)
