"""The chance reference of every mini benchmark: ``"<encoder>@random"`` in a profile's encoder lists
scores the backbone's class at a fixed random init beside the pretrained encoders (NearID-bench,
FPR; ID-Sim has its own ``random`` baseline)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from nearid_lib.config import get_profile
from nearid_lib.models import split_weights


def test_split_weights():
    assert split_weights("efficientnet-lite0") == ("efficientnet-lite0", None)
    assert split_weights("efficientnet-lite0@random") == ("efficientnet-lite0", "random")
    for bad in ("efficientnet-lite0@imagenet", "@random", "x@"):
        with pytest.raises(KeyError, match="@random"):
            split_weights(bad)


def test_paper_keys_of_the_chance_row():
    from nearid_lib.nearid.tables import paper_keys

    assert paper_keys("efficientnet-lite0")[0] == "SigLIP2"          # the frozen stand-in row
    key = paper_keys("frozen-gap@random")
    assert key[:3] == ("efficientnet-lite0 at random init (chance)",) * 3 and key[3] is None


def test_mini_lists_the_chance_row_and_score_encoder_leaves_it_out():
    cfg = get_profile("mini")
    assert "efficientnet-lite0@random" in cfg.eval.encoders
    assert "efficientnet-lite0@random" in cfg.retrieval.encoders
    assert not any("@" in n for n in get_profile("paper").eval.encoders)


def test_bench_chance_row_is_the_class_at_a_fixed_random_init(smoke_world, fresh_clone):
    """On the smoke world with mini's full-size EfficientNet-Lite0: the ``@random`` bench encoder is
    another network than the pretrained one (other features, other cache key, a chance label), the
    same network on every load, and it reads its own caches."""
    from nearid_lib.data.groups import group_items
    from nearid_lib.nearid.scorers import load_bench_encoders

    cfg = get_profile("mini", {"eval.encoders": ("efficientnet-lite0", "efficientnet-lite0@random")})
    rels = group_items(smoke_world, "positives@test")[0][:6]
    frozen, chance = load_bench_encoders(cfg, smoke_world)
    assert chance.name == "efficientnet-lite0@random" and "chance" in chance.label
    assert "frozen" not in chance.label            # its colour is the chance grey, not the frozen orange
    assert "w=random" in chance.embedder.encoder.cache_key()
    assert chance.embedder.encoder.cache_key() != frozen.embedder.encoder.cache_key()
    e_frozen = frozen.embedder.embed(rels).numpy()
    e_chance = chance.embedder.embed(rels).numpy()
    assert e_chance.shape == e_frozen.shape
    assert np.abs(e_chance - e_frozen).max() > 0.1
    # the cache key says "random": valid only because every load draws the same network
    again = load_bench_encoders(cfg, smoke_world)[1].embedder.encoder.state_dict()
    first = chance.embedder.encoder.state_dict()
    assert again.keys() == first.keys() and all(torch.equal(again[k], first[k]) for k in first)


def test_fpr_chance_encoder_spec():
    from nearid_lib.fpr import experiments as X

    cfg = get_profile("mini")
    specs = {s.name: s for s in X.encoder_specs(cfg, checkpoint_root=None)}
    s = specs["efficientnet-lite0@random"]
    assert s.role == "chance" and s.kwargs["weights"] == "random"
    assert s.kwargs["image_size"] == cfg.backbone.image_size
    assert specs["efficientnet-lite0"].role == "general" and "weights" not in specs["efficientnet-lite0"].kwargs


def test_chance_check_by_hand():
    from nearid_lib.chance import chance_check

    t = pd.DataFrame({"enc": ["pre", "rand", "pre", "rand", "head"], "grp": ["a", "a", "b", "b", "a"],
                      "map": [0.8, 0.3, 0.4, 0.5, 0.9], "top1": [1.0, 0.2, np.nan, 0.1, 1.0]})
    got = chance_check(t, "enc", "pre", "rand", ["map", "top1"], "T", by=["grp"])
    assert list(zip(got.group, got.metric)) == [("a", "map"), ("a", "top1"), ("b", "map")]   # NaN left out
    np.testing.assert_allclose(got.margin, [0.5, 0.8, -0.1])
    assert got.random_reaches_frozen.tolist() == [False, False, True]
    tie = chance_check(pd.DataFrame({"enc": ["pre", "rand"], "pa": [50.0, 50.0]}), "enc", "pre", "rand", ["pa"], "T")
    assert tie.random_reaches_frozen.tolist() == [True] and tie.group.tolist() == [""]
    assert chance_check(t[t.enc != "rand"], "enc", "pre", "rand", ["map"], "T", by=["grp"]).empty
    with pytest.raises(KeyError, match="'auc'"):
        chance_check(t, "enc", "pre", "rand", ["auc"], "T")
    with pytest.raises(ValueError, match="by="):
        chance_check(t, "enc", "pre", "rand", ["map"], "T")          # two 'pre' rows without by


def test_report_lists_where_random_init_reaches_the_pretrained_encoder(tmp_path):
    from nearid_lib import report
    from nearid_lib.chance import chance_check

    (tmp_path / "tables").mkdir()
    t = pd.DataFrame({"row": ["SigLIP2", "rand"], "nearid_pa": [55.5, 61.25], "mtg_mo": [0.25, 0.125]})
    chance_check(t, "row", "SigLIP2", "rand", ["nearid_pa", "mtg_mo"], "NearID Table 1").to_csv(
        tmp_path / "tables" / "04_chance.csv", index=False)
    text = report.render_report(tmp_path, specs=[])
    assert "## Chance references" in text
    assert "reaches the pretrained one on 1 of 2 metrics:" in text
    flagged = text.split("<details>")[0]
    assert "| nearid_pa | 55.50 | 61.25 |" in flagged and "mtg_mo" not in flagged
    assert report.render_report(tmp_path / "none", specs=[]).count("Chance references") == 0


def test_claims_on_a_metric_chance_reaches_carry_a_note(tmp_path):
    from nearid_lib import report

    (tmp_path / "tables").mkdir()
    pd.DataFrame({"benchmark": ["NearID Table 1"] * 3, "group": [np.nan] * 3,
                  "metric": ["mtg_mo", "mtg_mopair", "nearid_pa"], "frozen": [0.25, 0.31, 55.0],
                  "random_init": [0.34, 0.54, 7.7], "margin": [-0.09, -0.23, 47.3],
                  "random_reaches_frozen": [True, True, False]}).to_csv(tmp_path / "tables" / "04_chance.csv",
                                                                        index=False)
    claims = pd.DataFrame({"criterion": ["nearid.mtg.mo - frozen.mtg.mo > 0.000",
                                         "nearid.mtg.mopair - frozen.mtg.mopair > 0.000",
                                         "nearid.full.main.pa - frozen.full.main.pa > 0.0%", None]})
    notes = report.chance_notes(claims, tmp_path / "tables")
    assert notes[0] == "random init reaches the frozen encoder on mtg_mo (0.34 vs 0.25)"   # not mtg_mopair
    assert "mtg_mopair (0.54 vs 0.31)" in notes[1] and "mtg_mo " not in notes[1]
    assert notes[2] == "" and notes[3] == ""
    pd.DataFrame({"claim": ["4c"], "paper": ["x"], "ours": ["y"], "verdict": ["inconclusive"], "profile": ["mini"],
                  "criterion": [claims.criterion[0]]}).to_csv(tmp_path / "tables" / "claims_04.csv", index=False)
    text = report.render_report(tmp_path, specs=[])
    assert "1 claim(s) compare a metric on which a network at random init reaches" in text
    assert "| random init reaches the frozen encoder on mtg_mo (0.34 vs 0.25) |" in text


@pytest.mark.parametrize("name", ["siglip2-so400m-patch14-384", "clip-vit-b32", "dinov2-base"])
def test_transformers_encoders_at_random_init_read_only_the_config(tmp_path, monkeypatch, name):
    """``weights="random"`` on a transformers encoder: the architecture of its hub repo (config only,
    through the mirror) at a fixed random init - not the repo's weights, the same draw every time."""
    import transformers

    from nearid_lib.models import load_encoder
    from nearid_lib.models.registry import _REGISTRY

    cls_name, cfg = {
        "siglip2-so400m-patch14-384": ("SiglipVisionModel", transformers.SiglipVisionConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
            patch_size=8)),
        "clip-vit-b32": ("CLIPVisionModelWithProjection", transformers.CLIPVisionConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
            patch_size=8, projection_dim=16)),
        "dinov2-base": ("Dinov2Model", transformers.Dinov2Config(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, image_size=32, patch_size=8)),
    }[name]
    hub_id = _REGISTRY[name].hub_id
    torch.manual_seed(123)
    saved = getattr(transformers, cls_name)(cfg)
    saved.save_pretrained(tmp_path / hub_id)
    monkeypatch.setenv("NEARID_HUB_DIR", str(tmp_path))
    pre = load_encoder(name)[0]
    rnd = load_encoder(name, weights="random")[0]
    again = load_encoder(name, weights="random")[0]
    assert rnd.weights == "random" and "w=random" in rnd.cache_key() and pre.cache_key() != rnd.cache_key()
    assert rnd.model.config.hidden_size == 32                      # the repo's architecture
    a, b, c = pre.model.state_dict(), rnd.model.state_dict(), again.model.state_dict()
    assert all(torch.equal(b[k], c[k]) for k in b)                 # the same draw on every load
    assert any(not torch.equal(a[k], b[k]) for k in a if a[k].is_floating_point() and a[k].numel() > 1)
    x = torch.rand(2, 3, 32, 32)
    assert not torch.allclose(pre(x).pooled, rnd(x).pooled)
