"""ID-Sim benchmark metrics: verification AP / ROC-AUC, Subjects2k AP, nDCG, rank correlations,
triplet accuracy (scikit-learn and scipy are imported only when a metric needs them)."""
from __future__ import annotations

import numpy as np

from ._arrays import to_np

__all__ = ["verification_ap", "verification_auc", "subjects2k_ap", "ndcg", "rank_correlations",
           "triplet_accuracy"]


def _binary_inputs(scores, labels, name):
    s = to_np(scores, "scores").ravel()
    y = to_np(labels, "labels").ravel()
    if s.shape != y.shape:
        raise ValueError(f"{name}: scores {s.shape} and labels {y.shape} differ")
    if not np.isfinite(s).all():
        raise ValueError(f"{name}: non-finite scores at {np.flatnonzero(~np.isfinite(s))[:5].tolist()}")
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"{name}: labels must be 0/1")
    if y.min() == y.max():
        raise ValueError(f"{name}: labels contain a single class, metric undefined")
    return s, y.astype(int)


def verification_ap(scores, labels) -> float:
    """Average precision of verification pairs (1 = same identity), scikit-learn's definition
    (tied scores form one threshold, so the result does not depend on row order)."""
    from sklearn.metrics import average_precision_score

    s, y = _binary_inputs(scores, labels, "verification_ap")
    return float(average_precision_score(y, s))


def verification_auc(scores, labels) -> float:
    """ROC-AUC of verification pairs (ties count one half, scikit-learn's definition)."""
    from sklearn.metrics import roc_auc_score

    s, y = _binary_inputs(scores, labels, "verification_auc")
    return float(roc_auc_score(y, s))


def subjects2k_ap(scores, continuous_labels, threshold: float = 0.8, strict: bool = True) -> float:
    """Subjects2k AP: the continuous label c = #same votes / #votes is binarised at 0.8, then AP.

    ID-Sim Appendix D.2 reads "c > 0.8" in our text extraction, so ``strict=True`` uses ``c > 0.8``;
    ``strict=False`` uses ``c >= 0.8`` (the extraction may have lost a >= sign)."""
    c = to_np(continuous_labels, "continuous_labels").ravel()
    if not np.isfinite(c).all() or (c < 0).any() or (c > 1).any():
        raise ValueError("subjects2k_ap: continuous labels must be finite and in [0, 1]")
    y = (c > threshold) if strict else (c >= threshold)
    return verification_ap(scores, y.astype(int))


def ndcg(relevance, scores, k: int | None = None) -> float:
    """Mean nDCG over queries (rows) with graded ``relevance`` [Q, G] >= 0 and ``scores`` [Q, G]
    (scikit-learn ``ndcg_score``: linear gain, log2 discount, tied scores averaged)."""
    from sklearn.metrics import ndcg_score

    rel = to_np(relevance, "relevance")
    sc = to_np(scores, "scores")
    if rel.ndim == 1:
        rel, sc = rel[None], sc[None]
    if rel.shape != sc.shape or rel.ndim != 2:
        raise ValueError(f"ndcg: relevance {rel.shape} and scores {sc.shape} must be equal [Q,G]")
    if not (np.isfinite(rel).all() and np.isfinite(sc).all()) or (rel < 0).any():
        raise ValueError("ndcg: relevance must be finite and >= 0, scores finite")
    return float(ndcg_score(rel, sc, k=k))


def rank_correlations(metric, ratings) -> dict:
    """Spearman rho and Kendall tau-b between metric scores and graded ratings (scipy), over the
    rows where both are finite; returns ``spearman``, ``kendall``, ``n``."""
    from scipy.stats import kendalltau, spearmanr

    a, b = to_np(metric, "metric").ravel(), to_np(ratings, "ratings").ravel()
    if a.shape != b.shape:
        raise ValueError(f"rank_correlations: metric {a.shape} and ratings {b.shape} differ")
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        raise ValueError(f"rank_correlations: only {int(ok.sum())} complete rows")
    a, b = a[ok], b[ok]
    return {"spearman": float(spearmanr(a, b).statistic),
            "kendall": float(kendalltau(a, b).statistic),  # tau-b (tie-corrected)
            "n": int(ok.sum())}


def triplet_accuracy(s_ap, s_an) -> float:
    """Share of triplets with s(anchor, positive) > s(anchor, negative) (CUTE protocol).
    A tie counts as a failure (the metric must prefer the positive)."""
    a, b = to_np(s_ap, "s_ap").ravel(), to_np(s_an, "s_an").ravel()
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"triplet_accuracy: s_ap {a.shape} and s_an {b.shape} must be equal, non-empty")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("triplet_accuracy: non-finite similarities")
    return float(np.mean(a > b))
