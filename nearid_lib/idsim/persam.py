"""Personalized segmentation with patch features (ID-Sim Table 2c, after PerSAM, Zhang et al. 2023).

PerSAM is training-free: the reference image's object mask pools a *target feature* from its patch
tokens; on a test image the cosine similarity of every patch token to the target gives a location
map whose maximum becomes SAM's positive point prompt and whose minimum the negative one; the
mask SAM predicts is then scored with the same map. ID-Sim Table 2c swaps the patch features
(DINOv3's vs ID-Sim's) and reports segmentation mAP and F1 on PODS.

What the paper does not state, and the convention we use (each a parameter):

* **score of a prediction**: the mean of the (upsampled) similarity map inside the predicted mask
  (an empty mask scores the map's minimum);
* **mAP / F1**: a prediction is correct when the query shows the reference's instance and the mask
  has IoU >= ``iou_threshold`` (0.5) with the ground truth; queries showing another instance
  (near-identity distractors, other instances of the class) are negatives. AP ranks every
  prediction of a group (a class) by score, expected over tied scores, with recall over the
  group's positive queries (a positive with a wrong mask is a miss); mAP is the mean over groups.
  F1 is the best F1 over score thresholds, pooled over all predictions;
* PerSAM's target-guided attention, target-semantic prompting and cascaded post-refinement change
  SAM's internals or add passes and are left out: only the feature-driven parts (point prompts
  and scoring) depend on the patch features Table 2c compares.

Mask predictors: :class:`SAMMaskPredictor` (transformers ``SamModel`` + ``SamProcessor``; the paper
profile, tested on a tiny random-init config by :func:`build_tiny_sam`) and
:class:`SimilarityMaskPredictor` (the offline ``mini`` analogue: no pretrained SAM ships in a wheel, so
the mask is the upsampled similarity map thresholded halfway between its minimum and maximum; it
still uses nothing but the compared patch features).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ..hub import model_source
from ..metrics.retrieval import expected_average_precision
from ..runtime.seeding import make_rng

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["target_feature", "similarity_map", "point_prompts", "upsample_map", "mask_iou",
           "SimilarityMaskPredictor", "SAMMaskPredictor", "build_tiny_sam", "persam_query",
           "persam_predictions", "segmentation_scores", "mini_persam_queries", "persam_benchmark", "mask_predictor", "persam_table", "PERSAM_ROWS", "PerSAMError"]


class PerSAMError(ValueError):
    """Bad PerSAM input (the message names the item)."""


def _grid(tokens: np.ndarray, name: str) -> np.ndarray:
    """Token map as [h, w, D]: accepts [h, w, D] or a square [h*w, D]."""
    t = np.asarray(tokens, dtype=np.float64)
    if t.ndim == 3:
        return t
    if t.ndim != 2:
        raise PerSAMError(f"{name}: tokens must be [h, w, D] or [h*w, D], got shape {t.shape}")
    side = int(round(np.sqrt(t.shape[0])))
    if side * side != t.shape[0]:
        raise PerSAMError(f"{name}: {t.shape[0]} tokens are not a square grid; pass them as [h, w, D]")
    return t.reshape(side, side, -1)


def _unit(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(n, 1e-12)


def _mask_weights(mask: np.ndarray, h: int, w: int) -> np.ndarray:
    """Fraction of each token's cell covered by ``mask`` (area average to the token grid)."""
    m = torch.as_tensor(np.asarray(mask, dtype=np.float32))[None, None]
    return F.adaptive_avg_pool2d(m, (h, w))[0, 0].numpy().astype(np.float64)


def target_feature(tokens, mask, name: str = "reference") -> np.ndarray:
    """PerSAM's target feature: the mask-weighted mean of the reference's L2-normalised patch tokens
    (weights = share of each token's cell inside the mask), L2-normalised. ``tokens``: [h, w, D]
    or square [h*w, D]; ``mask``: [H, W] bool at image resolution. Raises on an empty mask."""
    t = _unit(_grid(tokens, name))
    m = np.asarray(mask)
    if m.ndim != 2:
        raise PerSAMError(f"{name}: mask must be 2-D [H, W], got shape {m.shape}")
    if not m.any():
        raise PerSAMError(f"{name}: the reference mask is empty, no target feature")
    wgt = _mask_weights(m > 0, t.shape[0], t.shape[1])
    return _unit((t * wgt[..., None]).sum((0, 1)) / wgt.sum())


def similarity_map(tokens, target, name: str = "query") -> np.ndarray:
    """Cosine similarity [h, w] of every patch token to the target feature."""
    t = _unit(_grid(tokens, name))
    return t @ _unit(np.asarray(target, dtype=np.float64))


def upsample_map(sim: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Bilinear upsampling of a token-grid map to image size ``(H, W)``."""
    s = torch.as_tensor(np.asarray(sim, dtype=np.float32))[None, None]
    return F.interpolate(s, size=size, mode="bilinear", align_corners=False)[0, 0].numpy().astype(np.float64)


def point_prompts(sim: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """PerSAM's prompts from a token-grid map: the centre (x, y) in image pixels of the most similar
    token (positive point) and of the least similar one (negative point). ``size`` = (H, W)."""
    h, w = sim.shape
    H, W = size
    pts = []
    for idx in (int(np.argmax(sim)), int(np.argmin(sim))):
        r, c = divmod(idx, w)
        pts.append(((c + 0.5) * W / w, (r + 0.5) * H / h))
    return np.asarray(pts, dtype=np.float64), np.asarray([1, 0], dtype=np.int64)


def mask_iou(pred: np.ndarray, gt: np.ndarray) -> float:
    """IoU of two boolean masks (0 when both are empty)."""
    p, g = np.asarray(pred, bool), np.asarray(gt, bool)
    if p.shape != g.shape:
        raise PerSAMError(f"mask_iou: predicted mask {p.shape} and ground truth {g.shape} differ")
    union = np.logical_or(p, g).sum()
    return float(np.logical_and(p, g).sum() / union) if union else 0.0


class SimilarityMaskPredictor:
    """The ``mini`` stand-in for SAM: mask = upsampled similarity map above the midpoint of its
    range. It ignores the point prompts (they come from the same map)."""

    name = "similarity-threshold"

    def __call__(self, image, points, labels, sim_up: np.ndarray) -> np.ndarray:
        lo, hi = float(sim_up.min()), float(sim_up.max())
        return sim_up > (lo + hi) / 2 if hi > lo else np.zeros_like(sim_up, dtype=bool)


class SAMMaskPredictor:
    """SAM through transformers: ``SamModel`` + ``SamProcessor``, one positive and one negative point;
    the multimask output with the highest predicted IoU is kept (PerSAM's choice).

    ``SAMMaskPredictor.from_pretrained("facebook/sam-vit-huge")`` (paper profile) or
    ``SAMMaskPredictor(*build_tiny_sam())`` (random-init, tests/smoke)."""

    def __init__(self, model, processor, name: str = "sam"):
        self.model, self.processor, self.name = model.eval(), processor, name

    @classmethod
    def from_pretrained(cls, name_or_path: str = "facebook/sam-vit-huge", device: str = "cpu") -> "SAMMaskPredictor":
        from transformers import SamModel, SamProcessor

        # through the hub resolver: the NEARID_HUB_DIR mirror folder, or the repo id at its pinned revision
        src, kw = model_source(name_or_path)
        return cls(SamModel.from_pretrained(src, **kw).to(device), SamProcessor.from_pretrained(src, **kw),
                   name=name_or_path.rstrip("/").split("/")[-1])

    @torch.no_grad()
    def __call__(self, image, points, labels, sim_up: np.ndarray) -> np.ndarray:
        img = image.convert("RGB")
        inputs = self.processor(img, input_points=[[[list(map(float, p)) for p in points]]],
                                input_labels=[[[int(v) for v in labels]]], return_tensors="pt")
        dev = next(self.model.parameters()).device
        inputs = {k: (v.to(dev) if hasattr(v, "to") else v) for k, v in inputs.items()}
        out = self.model(**inputs, multimask_output=True)
        masks = self.processor.image_processor.post_process_masks(
            out.pred_masks.cpu(), inputs["original_sizes"].cpu(), inputs["reshaped_input_sizes"].cpu())[0]
        best = int(torch.argmax(out.iou_scores[0, 0]).item())
        return masks[0, best].numpy().astype(bool)


def build_tiny_sam(seed: int = 0, image_px: int = 64):
    """A random-init tiny ``SamModel`` and a real ``SamProcessor`` (offline), the same classes the
    paper profile loads from ``facebook/sam-vit-*``."""
    from transformers import SamConfig, SamImageProcessor, SamModel, SamProcessor

    cfg = SamConfig(
        vision_config=dict(hidden_size=32, output_channels=16, num_hidden_layers=2, num_attention_heads=2,
                           image_size=image_px, patch_size=16, mlp_dim=64, global_attn_indexes=[1],
                           window_size=2, num_pos_feats=8),
        prompt_encoder_config=dict(hidden_size=16, image_size=image_px, patch_size=16, mask_input_channels=4),
        mask_decoder_config=dict(hidden_size=16, mlp_dim=32, num_hidden_layers=2, num_attention_heads=2,
                                 iou_head_hidden_dim=16))
    torch.manual_seed(seed)
    model = SamModel(cfg).eval()
    ip = SamImageProcessor(size={"longest_edge": image_px}, pad_size={"height": image_px, "width": image_px},
                           mask_size={"longest_edge": image_px // 4}, mask_pad_size={"height": image_px // 4, "width": image_px // 4})
    return model, SamProcessor(image_processor=ip)


def persam_query(ref_tokens, ref_mask, query_tokens, query_image, predictor: Callable, name: str = "query"
                 ) -> tuple[np.ndarray, float]:
    """One PerSAM step: (predicted mask [H, W] bool, score = mean similarity inside the mask)."""
    target = target_feature(ref_tokens, ref_mask, name=f"{name} (reference)")
    sim = similarity_map(query_tokens, target, name=name)
    W, H = query_image.size
    sim_up = upsample_map(sim, (H, W))
    pts, labels = point_prompts(sim, (H, W))
    mask = np.asarray(predictor(query_image, pts, labels, sim_up), dtype=bool)
    if mask.shape != (H, W):
        raise PerSAMError(f"{name}: predictor returned a mask {mask.shape}, image is {(H, W)}")
    score = float(sim_up[mask].mean()) if mask.any() else float(sim_up.min())
    return mask, score


def persam_predictions(queries: pd.DataFrame, tokens: Callable[[str], np.ndarray], image: Callable,
                       mask: Callable[[str], np.ndarray], predictor: Callable) -> pd.DataFrame:
    """Run PerSAM for every row of ``queries`` (columns ``reference``, ``reference_mask``, ``query``,
    ``query_mask`` (ground truth, may be empty for a negative), ``positive`` (bool), ``group``).

    ``tokens(key)`` -> the key's token map, ``image(key)`` -> PIL image, ``mask(key)`` -> bool [H, W].
    Returns the rows with ``score`` and ``iou`` (IoU of the prediction with ``query_mask``)."""
    need = {"reference", "reference_mask", "query", "query_mask", "positive", "group"}
    miss = need - set(queries.columns)
    if miss:
        raise PerSAMError(f"persam_predictions: missing column(s) {sorted(miss)}")
    scores, ious = [], []
    for i, r in enumerate(queries.itertuples(index=False)):
        name = f"row {i} (query {r.query!r})"
        pred, s = persam_query(tokens(r.reference), mask(r.reference_mask), tokens(r.query), image(r.query),
                               predictor, name=name)
        has_gt = isinstance(r.query_mask, str) and r.query_mask
        if bool(r.positive) and not has_gt:
            raise PerSAMError(f"{name}: a positive query needs its ground-truth mask (query_mask is empty)")
        gt = mask(r.query_mask) if has_gt else np.zeros_like(pred)
        if gt.shape != pred.shape:
            raise PerSAMError(f"{name}: mask {r.query_mask!r} is {gt.shape}, the image is {pred.shape}")
        scores.append(s)
        ious.append(mask_iou(pred, gt) if bool(r.positive) else 0.0)
    return queries.assign(score=scores, iou=ious)


def segmentation_scores(pred: pd.DataFrame, iou_threshold: float = 0.5) -> dict[str, float]:
    """Segmentation mAP and F1 of PerSAM predictions (columns ``group``, ``positive``, ``iou``,
    ``score``; see the module docstring for the convention). mAP: mean over groups of the expected
    AP over tied scores, with recall over the group's positives; F1: best over score thresholds.
    Beside them, what does not depend on the mask's shape: ``score_map`` (the same AP with every
    positive query correct whatever its IoU: does the score find the instance?) and
    ``mean_iou_positive`` (how well the masks cover it)."""
    if pred.empty:
        raise PerSAMError("segmentation_scores: no predictions")
    if not np.isfinite(pred.score.to_numpy(float)).all():
        raise PerSAMError("segmentation_scores: non-finite score(s)")
    ok = (pred.positive.astype(bool) & (pred.iou >= iou_threshold)).to_numpy()
    aps, score_aps = [], []
    for _, g in pred.groupby("group", sort=True):
        pos = g.positive.astype(bool).to_numpy()
        if not pos.any():
            continue
        tp = pos & (g.iou >= iou_threshold).to_numpy()
        aps.append(expected_average_precision(g.score.to_numpy(float), tp) * tp.sum() / pos.sum() if tp.any() else 0.0)
        score_aps.append(expected_average_precision(g.score.to_numpy(float), pos))
    n_gt = int(pred.positive.astype(bool).sum())
    order = np.argsort(-pred.score.to_numpy(float), kind="stable")
    s, t = pred.score.to_numpy(float)[order], ok[order]
    tp_cum, k = np.cumsum(t), np.arange(1, len(t) + 1)
    last = np.r_[s[1:] != s[:-1], True]                 # thresholds only between distinct scores
    f1 = 2 * tp_cum[last] / (k[last] + n_gt) if n_gt else np.zeros(1)
    return {"map": float(np.mean(aps)) if aps else float("nan"), "f1": float(f1.max()),
            "score_map": float(np.mean(score_aps)) if score_aps else float("nan"),
            "mean_iou_positive": float(pred.iou[pred.positive.astype(bool)].mean()) if n_gt else float("nan"),
            "n_queries": int(len(pred)), "n_positive": n_gt, "n_correct_masks": int(ok.sum()),
            "iou_threshold": float(iou_threshold)}


def mini_persam_queries(data: NearIDData, split: str = "test", seed: int = 0) -> pd.DataFrame:
    """The PODS analogue of the mini world: per identity of ``split``, the reference is view 1 with
    its object mask; the queries are view 2 (positive, ground truth = its mask), view 2 with the
    object replaced by a near-identity distractor (a source drawn per identity) and view 2 of another
    identity of the same class (both negatives: the reference's instance is absent). ``group`` = the
    class."""
    rng = make_rng(seed, "persam-queries", split)
    cls = dict(zip(data.identities.id, data.identities.class_name))
    pos = data.positives[data.positives.split == split]
    srcs = list(data.sources)
    rows = []
    for i, r in pos.iterrows():
        base = {"reference": r.img1, "reference_mask": r.mask1, "group": cls[r.id], "id": r.id}
        rows.append({**base, "query": r.img2, "query_mask": r.mask2, "positive": True, "kind": "same"})
        if srcs:
            src = srcs[int(rng.integers(len(srcs)))]
            d2 = data.distractors[src].at[i, "nimg2"]
            if d2:
                rows.append({**base, "query": d2, "query_mask": "", "positive": False, "kind": f"distractor:{src}"})
        same = pos[(pos.id != r.id) & (pos.id.map(cls) == cls[r.id])]
        if len(same):
            o = same.iloc[int(rng.integers(len(same)))]
            rows.append({**base, "query": o.img2, "query_mask": "", "positive": False, "kind": "same_class"})
    return pd.DataFrame(rows, columns=["reference", "reference_mask", "query", "query_mask", "positive", "group",
                                       "id", "kind"])


def mask_predictor(name: str | None, device: str = "cpu"):
    """``None``: :class:`SimilarityMaskPredictor` (offline); ``"tiny"``: SAM on a random-init tiny
    config; otherwise a SAM hub id or folder (``facebook/sam-vit-huge`` in the paper profile)."""
    if name is None:
        return SimilarityMaskPredictor()
    if name == "tiny":
        return SAMMaskPredictor(*build_tiny_sam(), name="sam-tiny-random-init")
    return SAMMaskPredictor.from_pretrained(name, device=device)


def persam_benchmark(queries: pd.DataFrame, tokens: Mapping[str, Mapping[str, np.ndarray]], image: Callable,
                     mask: Callable, predictor: Callable, iou_threshold: float = 0.5
                     ) -> tuple[dict[str, dict[str, float]], pd.DataFrame]:
    """PerSAM with each encoder's patch features: ``tokens`` = {encoder: {image key: token map}}.
    Returns ({encoder: :func:`segmentation_scores`}, the predictions of every encoder, long)."""
    results, preds = {}, []
    for enc, tok in tokens.items():
        missing = sorted((set(queries.reference) | set(queries["query"])) - set(tok))
        if missing:
            raise PerSAMError(f"persam_benchmark: encoder {enc!r} has no tokens for {missing[:3]} "
                              f"({len(missing)} keys)")
        pred = persam_predictions(queries, tok.__getitem__, image, mask, predictor)
        results[enc] = segmentation_scores(pred, iou_threshold)
        preds.append(pred.assign(encoder=enc))
    return results, pd.concat(preds, ignore_index=True)


# Table 2c rows: our encoder key -> the paper's method label
PERSAM_ROWS = {"dinov3": "PerSAM + DINOv3", "ours_no_patch": "PerSAM + Ours w/o patch sup", "ours": "PerSAM + Ours"}


def persam_table(results: Mapping[str, Mapping[str, float]], labels: Mapping[str, str], predictor: str,
                 profile: str) -> pd.DataFrame:
    """ID-Sim Table 2c beside the paper's: one row per key of :data:`PERSAM_ROWS` present in
    ``results`` (``{key: segmentation_scores(...)}``); ``labels``: key -> what the features are here."""
    rows = []
    for key, method in PERSAM_ROWS.items():
        if key in results:
            rows.append({"method": method, **results[key], "features": labels.get(key, key),
                         "mask_predictor": predictor, "profile": profile})
    return pd.DataFrame(rows)
