"""The released ID-Sim checkpoints over DINOv2 (and DINOv3 ViT-B/16): the same adapter merge and parity
proofs as the DINOv3 one (tests/test_idsim_release_model.py), against an independent implementation:
timm's DINOv2 (Meta's fused-qkv layout) with the LoRA applied by ``peft`` itself; Meta's position
interpolation; all four releases as rows of the paper tables and the claims judged from them.

Tiny and offline: width 32, 2 blocks, 4 heads, patch 14, 56 px (4 x 4 patches, the trained grid)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nearid_lib import hub
from nearid_lib.idsim import release_model as RM
from nearid_lib.idsim.release_backbones import RELEASES, load_base, meta_dinov2_positions
from release_parity import head_ref, last_output, random_head  # tests/, beside this file

D, L, H, P, S = 32, 2, 4, 14, 56


def _timm_dinov2(seed=0) -> nn.Module:
    timm = pytest.importorskip("timm")
    m = timm.create_model("vit_small_patch14_dinov2", pretrained=False, embed_dim=D, depth=L, num_heads=H, img_size=S,
                          num_classes=0)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            r = torch.randn(p.shape, generator=g)
            p.copy_(1.0 + 0.1 * r if n.endswith(("norm1.weight", "norm2.weight", "norm.weight"))
                    else 0.5 + 0.1 * r if ".gamma" in n else 0.1 * r)
    return m.eval()


def _hf_from_timm(tm):
    """timm's DINOv2 keys (Meta's names) -> transformers 5.x ``Dinov2Model``: the fused qkv chunked into
    q_proj / k_proj / v_proj (rows q, k, v), attn.proj -> o_proj, ls{1,2}.gamma -> layer_scale{1,2}.lambda1;
    every timm key used once."""
    from transformers import Dinov2Config, Dinov2Model

    sd, used, out = tm.state_dict(), set(), {}

    def take(k):
        used.add(k)
        return sd[k]
    out.update({"embeddings.cls_token": take("cls_token"), "embeddings.mask_token": torch.zeros(1, D),
                "embeddings.position_embeddings": take("pos_embed"),
                "embeddings.patch_embeddings.projection.weight": take("patch_embed.proj.weight"),
                "embeddings.patch_embeddings.projection.bias": take("patch_embed.proj.bias"),
                "layernorm.weight": take("norm.weight"), "layernorm.bias": take("norm.bias")})
    for n in range(L):
        b, t = f"blocks.{n}.", f"encoder.layer.{n}."
        for kind in ("weight", "bias"):
            q, k, v = take(b + f"attn.qkv.{kind}").chunk(3, 0)
            out.update({t + f"attention.q_proj.{kind}": q, t + f"attention.k_proj.{kind}": k,
                        t + f"attention.v_proj.{kind}": v, t + f"attention.o_proj.{kind}": take(b + f"attn.proj.{kind}"),
                        t + f"norm1.{kind}": take(b + f"norm1.{kind}"), t + f"norm2.{kind}": take(b + f"norm2.{kind}"),
                        t + f"mlp.fc1.{kind}": take(b + f"mlp.fc1.{kind}"), t + f"mlp.fc2.{kind}": take(b + f"mlp.fc2.{kind}")})
        out[t + "layer_scale1.lambda1"] = take(b + "ls1.gamma")
        out[t + "layer_scale2.lambda1"] = take(b + "ls2.gamma")
    assert used == set(sd)
    hf = Dinov2Model(Dinov2Config(hidden_size=D, num_hidden_layers=L, num_attention_heads=H, mlp_ratio=4,
                                  image_size=S, patch_size=P, layer_norm_eps=1e-6))
    hf.load_state_dict({k: v.clone() for k, v in out.items()}, strict=True)
    return hf.eval()


class _Perceptual(nn.Module):
    """The authors' module tree around the ViT (``extractor.model``), so peft writes their key names."""

    def __init__(self, vit):
        super().__init__()
        self.extractor = nn.Module()
        self.extractor.model = vit


def _head(seed):
    return random_head(seed, D, 16, 6, 4)


def _head_ref(sd, x):
    y = head_ref(sd, x)
    y = y - y.mean(-1, keepdim=True)
    return y / y.norm(dim=-1, keepdim=True)


def test_timm_dinov2_equals_transformers_and_peft_equals_our_merge(tmp_path):
    """(a) the converted Dinov2Model gives timm's last-block tokens (2e-5: the same maths in another
    order); (b) a LoRA on the fused qkv applied by peft on timm's model and merged by our loader into
    the transformers model give the same ID-Sim embeddings (1e-5)."""
    from peft import LoraConfig, get_peft_model

    tm = _timm_dinov2()
    hf = _hf_from_timm(tm)
    x = torch.randn(2, 3, S, S, generator=torch.Generator().manual_seed(3))
    a = last_output(tm.blocks[-1], lambda: tm(x))
    b = last_output(RM.encoder_layers(hf)[-1], lambda: hf(pixel_values=x))
    assert a.shape == b.shape == (2, 1 + (S // P) ** 2, D) and (a - b).abs().max() < 2e-5
    hf.save_pretrained(tmp_path / "base")
    pm = get_peft_model(_Perceptual(tm), LoraConfig(r=4, lora_alpha=8, target_modules=["qkv"], lora_dropout=0.0))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_" in n:
                p.copy_((0.3 if "lora_B" in n else 0.15) * torch.randn(p.shape, generator=g))
    pm.save_pretrained(tmp_path / "rel")
    heads = {"mlp_cls": _head(2), "mlp_patch": _head(3)}
    for name, sd in heads.items():
        torch.save(sd, tmp_path / "rel" / f"{name}.pth")
    model = RM.load_idsim_release(tmp_path / "rel", base=tmp_path / "base", image_size=S)
    assert model.info["n_merged"] == 3 * L and model._n_prefix == 1
    vit = pm.base_model.model.extractor.model
    tok = last_output(vit.blocks[-1], lambda: vit(x))
    with torch.no_grad():
        out = model(x)
    torch.testing.assert_close(out.pooled, _head_ref(heads["mlp_cls"], tok[:, 0]), rtol=0, atol=1e-5)
    torch.testing.assert_close(out.tokens, _head_ref(heads["mlp_patch"], tok[:, 1:]), rtol=0, atol=1e-5)
    with pm.disable_adapter():
        tok0 = last_output(vit.blocks[-1], lambda: vit(x))
    assert (tok - tok0).abs().max() > 1e-2                                     # the LoRA matters here


def test_dinov2_positions_are_interpolated_as_metas(tmp_path):
    """Off the trained grid a DINOv2 base interpolates its positions as Meta's code (bicubic at scale
    (n + 0.1) / M, no antialiasing, written out here), not as transformers' resize to the size."""
    tm = _timm_dinov2(4)
    _hf_from_timm(tm).save_pretrained(tmp_path / "base")
    model = load_base(str(tmp_path / "base"))
    emb = model.embeddings
    rows = cols = 7                                            # 98 px: 7 x 7 patches from the 4 x 4 trained grid
    pos = emb.position_embeddings
    grid = pos[:, 1:].reshape(1, 4, 4, D).permute(0, 3, 1, 2)
    ref = F.interpolate(grid, scale_factor=(7.1 / 4, 7.1 / 4), mode="bicubic", antialias=False)
    ref = torch.cat([pos[:, :1], ref.permute(0, 2, 3, 1).reshape(1, -1, D)], 1)
    dummy = torch.zeros(1, 1 + rows * cols, D)
    torch.testing.assert_close(emb.interpolate_pos_encoding(dummy, 98, 98), ref, rtol=0, atol=0)
    plain = type(emb).interpolate_pos_encoding(emb, dummy, 98, 98)          # transformers' own
    assert (plain - ref).abs().max() > 1e-4
    assert torch.equal(meta_dinov2_positions(emb, torch.zeros(1, 17, D), S, S), pos)   # the trained grid: as is
    with torch.no_grad():
        assert model(pixel_values=torch.zeros(1, 3, 98, 98)).last_hidden_state.shape == (1, 50, D)


@pytest.fixture
def four_releases(tmp_path, monkeypatch):
    """A mirror with the four tiny releases over tiny bases (the dry run's writers)."""
    from transformers import Dinov2Config, Dinov2Model

    from tools.paper_fixtures.idsim import write_idsim_backbones, write_idsim_other_releases

    d = tmp_path / "hub"
    for repo in ("facebook/dinov2-large", "facebook/dinov2-base"):
        torch.manual_seed(len(repo))
        Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2,
                                 image_size=32, patch_size=8)).save_pretrained(d / repo)
    write_idsim_backbones(d)
    written = write_idsim_other_releases(d)
    assert {s.repo for n, s in RELEASES.items() if n != "idsim-release"} <= set(written)
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(d))
    return d


def test_four_releases_are_rows_of_the_paper_tables_and_the_claims(four_releases, tmp_path, monkeypatch):
    import datasets

    from nearid_lib import metrics as M
    from nearid_lib.claims import evaluate_claims
    from nearid_lib.config import get_profile
    from nearid_lib.idsim import released as REL
    from nearid_lib.idsim.claims import RELEASED_CLAIMS, released_evidence
    from nearid_lib.models import load_encoder
    from tools.paper_fixtures.idsim import write_dreambenchpp, write_subjects2k
    from nearid_lib.runtime.seeding import make_rng

    for name, spec in RELEASES.items():
        m, _ = load_encoder(name, tiny=True)
        assert spec.repo in m.weights and m.info["n_merged"] == 3 * 2
        assert torch.isfinite(m.embed([np.zeros((20, 24, 3), np.uint8)])).all()
    write_subjects2k(four_releases / "chaenayo" / "Subjects2k", n_pairs=12)
    write_dreambenchpp(tmp_path / "dl" / "dreambenchpp")
    monkeypatch.setenv("NEARID_DOWNLOADS", str(tmp_path / "dl"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    cfg = get_profile("paper", **{"idsim.mllm_judge": None, "idsim.frozen_rows": ("dinov3-vitl16",),
                                  "idsim.image_size": 32, "idsim.eval_batch_size": 8, "device": "cpu"})
    sc = REL.score_released(cfg, log=lambda m: None)
    assert set(RELEASES) <= set(sc.results)
    t = REL.released_table(sc, "paper")
    assert {"ID-Sim", "ID-Sim (DINOv3 ViT-B/16)", "ID-Sim (DINOv2 ViT-L/14)", "ID-Sim (DINOv2 ViT-B/14)"} <= set(t.model)
    rows2a = set(REL.released_mllm_table(sc, "paper").row)
    assert {"Ours (ViT-L)", "Ours (DINOv2 ViT-B/14)"} <= rows2a
    patch = REL.released_patch_table(sc, "paper")
    assert {"dinov3", "ours", "ours_dinov3_vitb16", "ours_dinov2_vitl14", "ours_dinov2_vitb14"} <= set(patch.columns)
    # the claims' evidence: the mean precision over same pairs is the AP of Figure 25's row
    ev = released_evidence(sc, "dinov3-vitl16")
    assert set(ev) == {"idsim.s2k.prec", "frozen.s2k.prec", "idsim.dbpp.rho", "frozen.dbpp.rho"}
    s2k = sc.s2k
    ap = M.verification_ap(sc.pair_scores["idsim-release"]["s2k"], np.asarray(s2k["binary_label"]))
    assert ev["idsim.s2k.prec"].point() == pytest.approx(ap, abs=1e-12)
    assert ap == pytest.approx(sc.results["idsim-release"]["subjects2k_ap"])
    claims = evaluate_claims(RELEASED_CLAIMS, ev, make_rng(0, "claims", "09"), profile="paper")
    assert list(claims.claim.str[:3]) == ["1e.", "1f."] and set(claims.verdict) <= {
        "holds", "does not hold", "inconclusive", "not testable"}
