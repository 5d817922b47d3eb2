"""The two validation sets of ID-Sim's ablations (Supp. B.1) on a NearID-schema dataset, their
scores, and the per-unit outcomes the claims bootstrap over.

* **Real Instance Validation (Acc)**: triplets in the S1 format over the *val* identities: (view 1,
  view 2, hard negative), the negative being the nearest view of another val identity of the same
  class in a fixed embedding (the frozen baseline backbone, so every ablation row - backbone rows
  included - is scored on the same triplets). Accuracy = share with s(a, p) > s(a, n).
* **Identity Validation (ROC AUC)**: the paper edits five Flux-generated base instances with
  identity-preserving and identity-altering Photoshop modifications and classifies pairs as same /
  different identity. Here every val identity is a base instance, its view 1 the base image:

  - positives (label 1): (base, an identity-preserving edit of the base) for each edit of
    :data:`POSITIVE_EDITS`: the mild Photoshop-like edits of
    :func:`~nearid_lib.idsim.sampling.preserving_edit` - ``edit:photometric`` (brightness and
    contrast 1 +- U(0.05, 0.15), colour temperature +- U(0.02, 0.05)), ``edit:flip`` (horizontal
    mirror), ``edit:crop`` (crop to 80-90 % of each side keeping the object whole, rescaled) - and
    ``edit:context`` (the S2a context edit: object pixels kept, new background and lighting);
  - negatives (label 0, kind ``distractor:<source>``): (base, an identity-altering edit of the
    base) = the base's near-identity distractor of every distractor source of the split (``nimg1``:
    the object inpainted with an altered identity into view 1 itself - same background and pose).

  Every pair compares the base with an edit of itself: no pair brings in another photograph's
  background, pose or camera, so the set asks whether the edit kept the object's identity. (An
  earlier version used (view 1, view 2) as a positive; its background differs while the negatives
  share the anchor's, so that set rewarded background matching: the frozen backbone scored ROC AUC
  far below 0.5. View pairs stay in the Real Instance triplets.) A residual asymmetry remains: a
  distractor changes only the object's pixels while the preserving edits change the whole frame,
  so a pixel-level similarity (or a random-init network) still ranks the negatives higher. Edits
  are deterministic in the image key and the store's seed (:func:`~nearid_lib.idsim.sampling.load_key`).
  ROC AUC pooled over all pairs (the paper's number) and, for the claims, per anchor: the share of
  its (positive, negative) pairs ordered correctly (ties count one half), averaged over anchors;
  :func:`kind_auc` splits the pooled AUC by pair kind.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from .. import metrics as M
from .sampling import CTX, PRESERVING_EDITS, edit_key
from .triplets import mine_hard_negatives

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["POSITIVE_EDITS", "validation_sets", "validation_keys", "score_validation", "validation_units",
           "pair_cosine", "preserving_pairs", "kind_auc"]

# kinds of the Identity Validation positives (the edit key of each: :func:`preserving_pairs`)
POSITIVE_EDITS = (*(f"edit:{e}" for e in PRESERVING_EDITS), "edit:context")


def preserving_pairs(base: str) -> list[tuple[str, str]]:
    """``[(kind, edit key)]`` of the identity-preserving edits of the image key ``base``, in the
    order of :data:`POSITIVE_EDITS`."""
    return [*((f"edit:{e}", edit_key(e, base)) for e in PRESERVING_EDITS), ("edit:context", CTX + base)]


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
    for iid, img1, _, i in views:
        pairs += [{"img1": img1, "img2": k, "label": 1, "kind": kind, "unit": iid}
                  for kind, k in preserving_pairs(img1)]
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


def kind_auc(sets: Mapping[str, pd.DataFrame], emb: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """Identity Validation split by pair kind: per kind, ``n`` pairs, ``mean_cos`` and ``auc`` = ROC
    AUC of that kind's pairs against *all* pairs of the other label (a positive kind: how often its
    pairs beat the distractors; a distractor kind: how often the edits beat it)."""
    p = sets["pairs"]
    s = pair_cosine(emb, p.img1, p.img2)
    y = p.label.to_numpy()
    rows = []
    for kind, idx in p.groupby("kind", sort=False).indices.items():
        other = np.flatnonzero(y != y[idx[0]])
        both = np.concatenate([idx, other])
        rows.append({"kind": kind, "label": int(y[idx[0]]), "n": len(idx), "mean_cos": float(s[idx].mean()),
                     "auc": M.verification_auc(s[both], y[both]) if len(other) else float("nan")})
    return pd.DataFrame(rows)
