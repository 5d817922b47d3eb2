"""Quality filters the papers imply for inpainted distractors.

A near-identity distractor must (1) actually repaint the object - an output whose masked region is
(almost) the input is a copy of the positive, i.e. a false negative in the training loss - and
(2) keep the background, since NearID's whole point is the *matched* context - an output whose
unmasked region drifted lets an encoder separate the pair by the background alone.

Both are mean absolute differences in [0, 1] (pixels scaled to 0..1, averaged over channels):
- ``in_mask_diff``  = mean |gen - orig| over mask pixels; reject if ``< unchanged_below``;
- ``out_mask_drift`` = mean |gen - orig| over pixels outside the mask dilated by ``margin`` (a
  fraction of the image side), because pipelines legitimately blend a few pixels across the
  mask border; reject if ``> drift_above``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pandas as pd
from PIL import Image

__all__ = ["QualityFilter", "QualityResult", "masked_diffs", "rejection_report"]

REASONS = ("unchanged", "drift")


@dataclass(frozen=True)
class QualityResult:
    ok: bool
    reason: str | None          # None | "unchanged" | "drift"
    in_mask_diff: float
    out_mask_drift: float


def _dilate(mask: np.ndarray, radius: int) -> np.ndarray:
    if radius <= 0:
        return mask
    from scipy.ndimage import binary_dilation

    # square structuring element: a seam of ``radius`` px in every direction, corners included
    return binary_dilation(mask, structure=np.ones((3, 3), bool), iterations=radius)


def masked_diffs(original: Image.Image, generated: Image.Image, mask: Image.Image,
                 margin: float = 0.03) -> tuple[float, float]:
    """(mean |diff| inside the mask, mean |diff| outside the dilated mask), both in [0, 1].

    The outside mean is 0.0 when the dilated mask covers the whole image."""
    if generated.size != original.size:
        raise ValueError(f"generated image has size {generated.size}, original {original.size}")
    a = np.asarray(original.convert("RGB"), dtype=np.float32) / 255.0   # [H, W, 3]
    b = np.asarray(generated.convert("RGB"), dtype=np.float32) / 255.0
    m = np.asarray(mask.convert("L")) >= 128                            # [H, W]
    diff = np.abs(a - b).mean(axis=-1)                                  # [H, W]
    inside = float(diff[m].mean()) if m.any() else 0.0
    radius = int(round(margin * max(m.shape)))
    outside_mask = ~_dilate(m, radius)
    outside = float(diff[outside_mask].mean()) if outside_mask.any() else 0.0
    return inside, outside


@dataclass(frozen=True)
class QualityFilter:
    """Reject unchanged or background-drifting outputs (thresholds from ``GenerateConfig``)."""

    unchanged_below: float = 0.02
    drift_above: float = 0.08
    margin: float = 0.03

    def check(self, original: Image.Image, generated: Image.Image,
              mask: Image.Image) -> QualityResult:
        """Score one output; ``unchanged`` is tested first (a copy also has no drift)."""
        inside, outside = masked_diffs(original, generated, mask, self.margin)
        if inside < self.unchanged_below:
            return QualityResult(False, "unchanged", inside, outside)
        if outside > self.drift_above:
            return QualityResult(False, "drift", inside, outside)
        return QualityResult(True, None, inside, outside)


def rejection_report(records: Iterable[dict], source: str, backend: str, profile: str = ""):
    """Counts per (source, backend) from manifest records: n_items, n_ok, n_rejected and one
    column per reason, plus the mean in-mask diff / drift of accepted items."""
    recs = list(records)
    status = [r.get("status") for r in recs]
    ok = [r for r in recs if r.get("status") == "ok" and "in_mask_diff" in r]  # scored ones
    row = {
        "profile": profile, "source": source, "backend": backend, "n_items": len(recs),
        "n_ok": sum(s == "ok" for s in status),
        "n_rejected": sum(s == "rejected" for s in status),
        **{f"n_rejected_{k}": sum(r.get("reason") == k for r in recs if r.get("status") == "rejected")
           for k in REASONS},
        "n_retried": sum(int(r.get("attempt", 0)) > 0 for r in recs),
        "mean_in_mask_diff": float(np.mean([r["in_mask_diff"] for r in ok])) if ok else float("nan"),
        "mean_out_mask_drift": float(np.mean([r["out_mask_drift"] for r in ok])) if ok else float("nan"),
    }
    return pd.DataFrame([row])
