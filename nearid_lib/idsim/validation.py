"""The two validation sets of ID-Sim's ablations (Supp. B.1) on a NearID-schema dataset, their
scores, and the per-unit outcomes the claims bootstrap over.

* **Real Instance Validation (Acc)**: triplets in the S1 format over the *val* identities: (view 1,
  view 2, hard negative), the negative being the nearest view of another val identity of the same
  class in a fixed embedding (the frozen baseline backbone, so every ablation row - backbone rows
  included - is scored on the same triplets). Accuracy = share with s(a, p) > s(a, n).
* **Identity Validation (ROC AUC)**: the paper's five Flux instances with identity-preserving and
  identity-altering Photoshop edits become, per val identity, positive pairs (view 1, view 2) and
  (view 1, a context edit of view 1: new background and lighting) and negative pairs (view 1, its
  near-identity distractor) for every distractor source of the split. ROC AUC pooled over all pairs
  (the paper's number) and, for the claims, per anchor: the share of its (positive, negative) pairs
  ordered correctly (ties count one half), averaged over anchors.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from .. import metrics as M
from .sampling import CTX
from .triplets import mine_hard_negatives

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["validation_sets", "validation_keys", "score_validation", "validation_units", "pair_cosine"]


def validation_sets(data: NearIDData, embed: Callable[[list[str]], np.ndarray], split: str = "val",
                    sources: Sequence[str] | None = None) -> dict[str, pd.DataFrame]:
    """``{"triplets": anchor, positive, negative, unit; "pairs": img1, img2, label, kind, unit}``
    of ``split`` (see the module docstring). ``embed(keys) -> [N, D]`` L2-normalised embeddings
    used to mine the triplets' negatives."""
    pos = data.positives[data.positives.split == split]
    if pos.empty:
        raise ValueError(f"validation_sets: no identities in split {split!r}")
    cls = dict(zip(data.identities.id, data.identities.class_name))
    views = [(r.id, r.img1, r.img2, i) for i, r in pos.iterrows()]
    nn_idx = mine_hard_negatives(np.asarray(embed([v[1] for v in views])), [v[0] for v in views],
                                 [cls[v[0]] for v in views])
    trips = [{"anchor": v[1], "positive": v[2], "negative": views[j][2] if j >= 0 else None, "unit": v[0]}
             for v, j in zip(views, nn_idx)]
    srcs = [s for s in (sources or data.sources)
            if split in data.source_splits.get(s, [split]) and s in data.distractors]
    pairs = []
    for iid, img1, img2, i in views:
        pairs.append({"img1": img1, "img2": img2, "label": 1, "kind": "other_view", "unit": iid})
        pairs.append({"img1": img1, "img2": CTX + img1, "label": 1, "kind": "context_edit", "unit": iid})
        for s in srcs:
            d = data.distractors[s].at[i, "nimg1"]
            if isinstance(d, str) and d:
                pairs.append({"img1": img1, "img2": d, "label": 0, "kind": f"distractor:{s}", "unit": iid})
    t = pd.DataFrame(trips)
    return {"triplets": t[t.negative.notna()].reset_index(drop=True), "pairs": pd.DataFrame(pairs)}


def validation_keys(sets: Mapping[str, pd.DataFrame]) -> list[str]:
    """Every image key of the validation sets (ordered, unique)."""
    t, p = sets["triplets"], sets["pairs"]
    keys = t.anchor.tolist() + t.positive.tolist() + t.negative.tolist() + p.img1.tolist() + p.img2.tolist()
    return list(dict.fromkeys(keys))


def pair_cosine(emb: Mapping[str, np.ndarray], a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    """Row-wise cosine between the embeddings of keys ``a`` and ``b``."""
    A = np.stack([emb[k] for k in a]).astype(np.float64)
    B = np.stack([emb[k] for k in b]).astype(np.float64)
    return (A * B).sum(1) / (np.linalg.norm(A, axis=1) * np.linalg.norm(B, axis=1))


def validation_units(sets: Mapping[str, pd.DataFrame], emb: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """Per val identity (``unit``): ``correct`` (its real-instance triplet) and ``auc_anchor`` (share
    of its positive/negative pairs ordered correctly, ties one half)."""
    t, p = sets["triplets"], sets["pairs"]
    correct = (pair_cosine(emb, t.anchor, t.positive) > pair_cosine(emb, t.anchor, t.negative)).astype(float)
    out = pd.DataFrame({"unit": t.unit.to_numpy(), "correct": correct}).set_index("unit")
    s = pair_cosine(emb, p.img1, p.img2)
    auc = {}
    for u, idx in p.groupby("unit").indices.items():
        y, sc = p.label.to_numpy()[idx], s[idx]
        pos, neg = sc[y == 1], sc[y == 0]
        if len(pos) and len(neg):
            d = pos[:, None] - neg[None, :]
            auc[u] = float(((d > 0) + 0.5 * (d == 0)).mean())
    out["auc_anchor"] = pd.Series(auc)
    return out.reset_index()


def score_validation(sets: Mapping[str, pd.DataFrame], emb: Mapping[str, np.ndarray]) -> dict[str, float]:
    """``real_instance_val_acc`` (triplet accuracy), ``identity_val_roc_auc`` (pooled ROC AUC) and
    ``identity_val_anchor_auc`` (mean per-anchor AUC) of one embedding."""
    t, p = sets["triplets"], sets["pairs"]
    s = pair_cosine(emb, p.img1, p.img2)
    units = validation_units(sets, emb)
    return {"real_instance_val_acc": M.triplet_accuracy(pair_cosine(emb, t.anchor, t.positive),
                                                        pair_cosine(emb, t.anchor, t.negative)),
            "identity_val_roc_auc": M.verification_auc(s, p.label.to_numpy()),
            "identity_val_anchor_auc": float(units.auc_anchor.mean())}
