"""Named training recipes (issue 52, item 12): the paper's recipe stays the default, and the NearID
authors' script ("r7": scripts/train_example.sh at 1a2cc71) is a preset whose every flag lands on our
config, including its rows (one distractor per view, the source drawn per identity and view and
kept over epochs: ``train.distractor_slots="per_view"``)."""
from __future__ import annotations

import numpy as np
import pytest

from nearid_lib.config import TRAIN_PRESETS, ConfigError, get_profile
from nearid_lib.nearid.rows import epoch_rows


def test_the_paper_recipe_is_the_default_and_r7_is_a_named_preset():
    paper = get_profile("paper")
    assert paper.train.recipe == "paper" and paper.train.distractor_slots == "per_source"
    assert paper.train.mask_p_anchor == 0.5 and paper.train.augment        # App. E.4's role-aware masking
    r7 = get_profile("paper", overrides={"train.recipe": "r7"})
    t = r7.train
    # the script's flags: --data.neg_paths NearID-{Flux,SDXL,Qwen,PowerPaint}, --loss_config
    # infonce_ext:1.0 (= L_NearID at alpha 0.5, T 0.07), batch 128, 11 epochs, lr 1e-4, fp16, MTG x4;
    # its data defaults: mask_prob 0, no flip / jitter / translate, aligned per-slot negatives
    assert t.recipe == "r7" and t.sources == ("Flux", "SDXL", "Qwen", "PowerPaint")
    assert (t.loss, t.alpha, t.temperature) == ("nearid", 0.5, 0.07)
    assert (t.batch_size, t.epochs, t.max_steps, t.lr, t.weight_decay, t.warmup_steps) == (128, 11, None, 1e-4,
                                                                                          1e-4, 100)
    assert (t.mixed_precision, t.use_mtg, t.mtg_repeat) == ("fp16", True, 4)
    assert (t.mask_p_anchor, t.mask_p_positive, t.mask_p_distractor, t.augment) == (0.0, 0.0, 0.0, False)
    assert t.distractor_slots == "per_view" and r7.head.token_dropout == 0.0 and r7.head.init_from_backbone
    # everything else is the profile's; an explicit override wins over the preset
    assert r7.backbone == paper.backbone and r7.eval == paper.eval
    assert get_profile("paper", overrides={"train.recipe": "r7", "train.lr": 3e-4}).train.lr == 3e-4
    assert get_profile("paper", overrides={"train.recipe": "paper"}).train == paper.train
    with pytest.raises(ConfigError, match="unknown train.recipe 'r8'; valid: paper, r7"):
        get_profile("paper", overrides={"train.recipe": "r8"})
    assert set(TRAIN_PRESETS) == {"paper", "r7"}
    with pytest.raises(ValueError, match="distractor_slots"):
        get_profile("paper", overrides={"train.distractor_slots": "random"})


def test_per_view_rows_give_the_anchor_every_views_distractor(smoke_world):
    data = smoke_world
    cfg = get_profile("smoke", overrides={"train.distractor_slots": "per_view"})
    r0, r1 = epoch_rows(data, cfg, 0), epoch_rows(data, cfg, 1)
    ref = epoch_rows(data, get_profile("smoke"), 0)
    assert r0.distractors.shape[1] == 3 and ref.distractors.shape[1] == len(data.train_sources)
    is_mtg = np.array([a.startswith("mtg/") for a in r0.anchor])
    pos = data.positives[["img1", "img2", "img3"]].to_numpy()
    ts = list(data.train_sources)
    seen_sources = set()

    def slots(rows, i):
        a = rows.anchor[i]
        j = int(np.flatnonzero(pos == a)[0] // 3)
        out = {}
        for v in range(3):
            d = rows.distractors[i][v]
            if not pos[j, v]:
                assert d == ""                        # no view, no distractor
                continue
            src = [s for s in ts if data.distractors[s].iloc[j][f"nimg{v + 1}"] == d]
            assert src, (i, v, d)                     # view v's distractor, from a training source
            assert rows.dist_masks[i][v] == data.positives.iloc[j][f"mask{v + 1}"]
            out[v] = src[0]
        return j, out

    def nearid_rows(rows):
        return np.flatnonzero([not a.startswith("mtg/") for a in rows.anchor])

    by_id0 = dict(slots(r0, i) for i in nearid_rows(r0))
    by_id1 = dict(slots(r1, i) for i in nearid_rows(r1))
    for j, s in by_id0.items():
        seen_sources |= set(s.values())
    # the source of each (identity, view) is drawn once and kept over epochs, while anchors change
    assert by_id0 == by_id1 and list(r0.anchor) != list(r1.anchor)
    assert len(seen_sources) > 1                      # several sources are drawn
    # MTG rows keep their two part edits
    i = int(np.flatnonzero(is_mtg)[0])
    assert r0.distractors[i][0] == r0.anchor[i].replace("original", "inpainted") and r0.distractors[i][2] == ""
