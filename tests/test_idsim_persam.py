"""PerSAM with patch features (ID-Sim Table 2c): target feature, prompts, scoring and the
segmentation mAP/F1 against slow reference implementations and hand cases; SAM's real classes on a
tiny random-init config."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from nearid_lib.idsim.persam import (PerSAMError, SAMMaskPredictor, SimilarityMaskPredictor, build_tiny_sam,
                                     mask_iou, mask_predictor, persam_benchmark, persam_predictions, persam_query,
                                     point_prompts, segmentation_scores, similarity_map, target_feature)


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_target_feature_is_the_mask_weighted_mean_of_unit_tokens():
    rng = np.random.default_rng(0)
    tok = rng.normal(size=(4, 4, 6))
    mask = np.zeros((8, 8), bool)
    mask[0:2, 0:2] = True              # token (0, 0) fully inside
    mask[0:1, 2:4] = True              # token (0, 1) half inside
    slow = _unit(_unit(tok[0, 0]) * 1.0 + _unit(tok[0, 1]) * 0.5)
    np.testing.assert_allclose(target_feature(tok, mask), slow, atol=1e-6)
    # a flat square token list is read as the same grid
    np.testing.assert_allclose(target_feature(tok.reshape(16, 6), mask), slow, atol=1e-6)


def test_bad_inputs_name_the_item():
    tok = np.ones((9, 3))
    with pytest.raises(PerSAMError, match="empty"):
        target_feature(tok, np.zeros((6, 6), bool), name="ref A")
    with pytest.raises(PerSAMError, match="not a square grid"):
        similarity_map(np.ones((8, 3)), np.ones(3), name="q7")
    with pytest.raises(PerSAMError, match="differ"):
        mask_iou(np.ones((2, 2), bool), np.ones((3, 2), bool))


def test_point_prompts_are_the_centres_of_the_extreme_tokens():
    sim = np.array([[0.1, 0.9], [-0.5, 0.2]])
    pts, labels = point_prompts(sim, (40, 80))            # H=40, W=80: cells of 20 x 40 px
    np.testing.assert_allclose(pts, [[60.0, 10.0], [20.0, 30.0]])
    assert labels.tolist() == [1, 0]


def test_persam_finds_the_instance_with_the_threshold_predictor():
    # tokens: the object (a block of similar tokens) on a random background; the query holds it elsewhere
    rng = np.random.default_rng(1)
    obj = rng.normal(size=64)
    ref, qry = rng.normal(size=(8, 8, 64)) * 0.3, rng.normal(size=(8, 8, 64)) * 0.3
    ref[1:4, 1:4] += obj * 3
    qry[4:7, 3:6] += obj * 3
    rmask = np.zeros((64, 64), bool)
    rmask[8:32, 8:32] = True
    gt = np.zeros((64, 64), bool)
    gt[32:56, 24:48] = True
    img = Image.new("RGB", (64, 64))
    mask, score = persam_query(ref, rmask, qry, img, SimilarityMaskPredictor())
    assert mask_iou(mask, gt) > 0.5 and score > 0.5


def _slow_ap(scores, ok, n_gt):
    """Expected AP by brute force over every order of tied scores (recall over n_gt)."""
    idx = list(range(len(scores)))
    vals = []
    for perm in itertools.permutations(idx):
        if any(scores[perm[i]] < scores[perm[i + 1]] for i in range(len(perm) - 1)):
            continue
        hits, ap = 0, 0.0
        for k, j in enumerate(perm, 1):
            if ok[j]:
                hits += 1
                ap += hits / k
        vals.append(ap / n_gt)
    return float(np.mean(vals))


def _slow_f1(scores, ok, n_gt):
    best = 0.0
    for t in set(scores):
        sel = [s >= t for s in scores]
        tp = sum(a and b for a, b in zip(sel, ok))
        fp = sum(a and not b for a, b in zip(sel, ok))
        fn = n_gt - tp
        best = max(best, 2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_segmentation_scores_match_slow_references(seed):
    rng = np.random.default_rng(seed)
    n = 7
    df = pd.DataFrame({"group": rng.choice(["a", "b"], n), "positive": rng.random(n) < 0.5,
                       "iou": rng.random(n), "score": rng.integers(0, 3, n).astype(float)})
    df.loc[0, ["group", "positive", "iou"]] = ["a", True, 0.9]      # every group has a positive
    df.loc[1, ["group", "positive"]] = ["b", True]
    res = segmentation_scores(df, iou_threshold=0.5)
    aps = []
    for _, g in df.groupby("group"):
        ok = (g.positive & (g.iou >= 0.5)).tolist()
        aps.append(_slow_ap(g.score.tolist(), ok, int(g.positive.sum())))
    assert res["map"] == pytest.approx(np.mean(aps))
    ok = (df.positive & (df.iou >= 0.5)).tolist()
    assert res["f1"] == pytest.approx(_slow_f1(df.score.tolist(), ok, int(df.positive.sum())))


def test_segmentation_scores_hand_case():
    # one group: a correct mask ranked 1st, a negative 2nd, a positive with a wrong mask (a miss) 3rd
    df = pd.DataFrame({"group": ["g"] * 3, "positive": [True, False, True], "iou": [0.8, 0.0, 0.2],
                       "score": [0.9, 0.5, 0.1]})
    res = segmentation_scores(df)
    assert res["map"] == pytest.approx(0.5)        # (1/1) / 2 positives
    assert res["f1"] == pytest.approx(2 / 3)       # threshold 0.9: TP 1, FP 0, FN 1
    assert res["n_correct_masks"] == 1
    assert res["score_map"] == pytest.approx((1 + 2 / 3) / 2)     # masks ignored: positives at ranks 1, 3
    assert res["mean_iou_positive"] == pytest.approx(0.5)


def test_tiny_sam_runs_the_real_classes():
    pred = mask_predictor("tiny")
    assert isinstance(pred, SAMMaskPredictor)
    rng = np.random.default_rng(0)
    img = Image.fromarray((rng.random((48, 80, 3)) * 255).astype("uint8"))
    tok = rng.normal(size=(3, 5, 4))
    m = np.zeros((48, 80), bool)
    m[10:30, 20:50] = True
    mask, score = persam_query(tok, m, tok, img, pred)
    assert mask.shape == (48, 80) and mask.dtype == bool and np.isfinite(score)
    model, proc = build_tiny_sam(seed=0)
    assert type(model).__name__ == "SamModel" and type(proc).__name__ == "SamProcessor"


def test_benchmark_names_an_encoder_without_tokens():
    q = pd.DataFrame({"reference": ["r"], "reference_mask": ["rm"], "query": ["q"], "query_mask": ["qm"],
                      "positive": [True], "group": ["g"]})
    with pytest.raises(PerSAMError, match="'ours' has no tokens"):
        persam_benchmark(q, {"ours": {"r": np.ones((4, 2))}}, lambda k: None, lambda k: None,
                         SimilarityMaskPredictor())


def test_predictions_name_the_row_with_a_bad_ground_truth():
    img = Image.new("RGB", (16, 16))
    tok = np.random.default_rng(0).normal(size=(4, 4, 8))
    m = np.ones((16, 16), bool)
    q = pd.DataFrame({"reference": ["r"], "reference_mask": ["rm"], "query": ["q"], "query_mask": ["small"],
                      "positive": [True], "group": ["g"]})
    masks = {"rm": m, "small": np.ones((8, 8), bool)}
    with pytest.raises(PerSAMError, match=r"row 0 \(query 'q'\): mask 'small' is \(8, 8\)"):
        persam_predictions(q, lambda k: tok, lambda k: img, masks.__getitem__, SimilarityMaskPredictor())
    with pytest.raises(PerSAMError, match="positive query needs its ground-truth mask"):
        persam_predictions(q.assign(query_mask=""), lambda k: tok, lambda k: img, masks.__getitem__,
                           SimilarityMaskPredictor())
