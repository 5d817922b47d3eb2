"""The authors' release layout (backbone.vision_model.head.*) and our head format round-trip."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from nearid_lib.models import MAPHead, export_release_head, load_head, load_release_head, save_head
from nearid_lib.models.checkpoint import RELEASE_PREFIX
from transformers import SiglipVisionConfig, SiglipVisionModel

torch.set_num_threads(1)


def _tiny_release(tmp_path):
    """A tiny SigLIP vision tower saved the way the release stores it (head under the prefix)."""
    torch.manual_seed(0)
    cfg = SiglipVisionConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
                             image_size=32, patch_size=8)
    tower = SiglipVisionModel(cfg)
    state = {f"backbone.vision_model.{k}": v.contiguous() for k, v in tower.state_dict().items()}
    assert "backbone.vision_model.head.attention.in_proj_weight" in state
    folder = tmp_path / "release"
    folder.mkdir()
    save_file(state, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"vision_config": cfg.to_dict()}))
    return tower, folder


def test_load_release_head_matches_the_siglip_head(tmp_path):
    tower, folder = _tiny_release(tmp_path)
    head = load_release_head(folder)                 # num_heads from config.json
    assert head.num_heads == 4 and head.hidden == 48
    x = torch.randn(3, 16, 32)
    with torch.no_grad():
        assert torch.allclose(head(x), tower.head(x), atol=1e-6)
    # a lone file (no config.json beside it, no metadata): num_heads must be given
    lone = tmp_path / "lone"
    lone.mkdir()
    (folder / "model.safetensors").rename(lone / "model.safetensors")
    with pytest.raises(ValueError, match="num_heads"):
        load_release_head(lone / "model.safetensors")
    h2 = load_release_head(lone / "model.safetensors", num_heads=4)
    assert all(torch.equal(a, b) for a, b in zip(h2.state_dict().values(), head.state_dict().values()))


def test_nearid_encoder_from_a_release_folder(tmp_path):
    from nearid_lib.models import load_encoder

    tower, folder = _tiny_release(tmp_path)
    enc, pre = load_encoder("nearid", tiny=True, checkpoint=folder)
    assert enc.backbone.weights.startswith("release:")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        ref = tower(pixel_values=x)
        out = enc(x)
    assert torch.allclose(out.tokens, ref.last_hidden_state, atol=1e-5)
    assert torch.allclose(out.pooled, ref.pooler_output, atol=1e-5)


def test_export_release_round_trip(tmp_path):
    torch.manual_seed(1)
    head = MAPHead(24, num_heads=3, hidden=40)
    path = export_release_head(head, tmp_path / "out" / "head.safetensors")
    keys = set(load_file(str(path)))
    assert keys == {RELEASE_PREFIX + k for k in head.state_dict()}
    assert RELEASE_PREFIX + "attention.in_proj_weight" in keys and RELEASE_PREFIX + "mlp.fc2.bias" in keys
    back = load_release_head(path)                   # num_heads from the file's metadata
    assert back.config() == head.config()
    x = torch.randn(2, 7, 24)
    with torch.no_grad():
        assert torch.equal(back(x), head(x))
    with pytest.raises(ValueError, match="out_dim"):
        export_release_head(MAPHead(24, 3, out_dim=8), tmp_path / "x.safetensors")


def test_release_missing_tensor_names_it(tmp_path):
    head = MAPHead(16, num_heads=2, hidden=16)
    sd = {RELEASE_PREFIX + k: v for k, v in head.state_dict().items() if k != "probe"}
    with pytest.raises(KeyError, match=r"backbone\.vision_model\.head\.probe"):
        load_release_head(sd, num_heads=2)


def test_our_format_round_trip(tmp_path):
    torch.manual_seed(2)
    head = MAPHead(20, num_heads=4, mlp_ratio=1.5, out_dim=12, token_dropout=0.1)
    save_head(head, tmp_path / "ck", backbone={"name": "efficientnet-lite0"}, step=7)
    back, meta = load_head(tmp_path / "ck")
    assert meta["step"] == 7 and meta["backbone"]["name"] == "efficientnet-lite0"
    assert back.config() == head.config()
    for (k, a), (_, b) in zip(head.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), k
    with pytest.raises(FileNotFoundError, match="head_config.json"):
        load_head(tmp_path)
