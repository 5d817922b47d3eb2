"""ID-Sim training triplets (ID-Sim App. A), mixed 1:1:1 by :func:`build_triplets`:

* ``S1``  real instance pairs: two different views of one identity (different pose and
  background); the negative is the nearest neighbour of the anchor image, in the frozen
  backbone's space, among images of *other* identities of the same class (App. A.1 mining,
  :func:`mine_hard_negatives`).
* ``S2a`` identity-preserving context edits: the same pair with one or both images replaced by a
  context edit (:func:`~nearid_lib.idsim.sampling.context_edit`); the pair pattern is drawn uniformly
  from (orig, edit), (edit, orig), (edit, edit) as in App. A.2.1; the negative is a mined real image
  or its context edit.
* ``S2b`` identity-altering edits as hard negatives: a near-identity distractor of the world's
  *training* sources (inpainted into the exact background and mask of the anchor's view) or, for
  part of the rows, an MTG-style part edit (``mtg.csv``: anchor/positive = the two originals,
  negative = a part-edited one).

The edit grids (``grids.csv``) are never used for training: they are the test set of the
sensitivity analysis.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import pandas as pd
import torch

from .sampling import CTX

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["SUBSETS", "mine_hard_negatives", "build_triplets"]

SUBSETS = ("S1", "S2a", "S2b")


def mine_hard_negatives(emb: torch.Tensor | np.ndarray, identity: Sequence[str], group: Sequence[str]
                        ) -> np.ndarray:
    """For every image i, the index of its nearest neighbour (cosine, in the given L2-normalised
    embedding) among images of a *different identity* of the *same group* (class); -1 if none.
    Ties go to the lowest index."""
    e = torch.as_tensor(np.asarray(emb), dtype=torch.float64)
    ids = np.asarray(identity)
    grp = np.asarray(group)
    sim = (e @ e.T).numpy()                                              # [N, N]
    allowed = (ids[:, None] != ids[None, :]) & (grp[:, None] == grp[None, :])
    sim = np.where(allowed, sim, -np.inf)
    nn_idx = np.argmax(sim, axis=1)
    nn_idx[~allowed.any(axis=1)] = -1
    return nn_idx


def _views(data: NearIDData, ids: set[str]) -> pd.DataFrame:
    rows = []
    cls = dict(zip(data.identities["id"], data.identities["class_name"]))
    for i, r in data.positives.iterrows():
        if r["id"] not in ids:
            continue
        for k in (1, 2, 3):
            if r[f"img{k}"]:
                rows.append({"id": r["id"], "class_name": cls[r["id"]], "view": k, "img": r[f"img{k}"],
                             "row": i})
    return pd.DataFrame(rows)


class _TripletSampler:
    """Draws the triplets of each subset from one seeded ``rng``, in a fixed order of draws."""

    def __init__(self, data: NearIDData, views: pd.DataFrame, nn_idx: np.ndarray, rng: np.random.Generator,
                 mtg: pd.DataFrame | None, mtg_share: float, label_noise: float = 0.0):
        self.data, self.views, self.nn_idx, self.rng = data, views, nn_idx, rng
        self.label_noise = float(label_noise)
        self.by_id = {i: g.index.to_numpy() for i, g in views.groupby("id")}
        self.id_list = sorted(self.by_id)
        self.sources = list(getattr(data, "train_sources", []) or [])
        self.mtg, self.mtg_share = mtg, mtg_share

    def pair(self) -> tuple[int, int]:
        """Two different views (row indices of ``views``) of a random identity."""
        iid = self.id_list[int(self.rng.integers(len(self.id_list)))]
        a, p = self.rng.choice(self.by_id[iid], size=2, replace=False)
        return int(a), int(p)

    def mined(self, a: int) -> tuple[str, str]:
        """``(image, identity)`` of the mined hard negative of view ``a``."""
        views, n = self.views, self.nn_idx[a]
        if n < 0:       # a class with one identity: any other identity
            others = views.index[views["id"] != views.at[a, "id"]].to_numpy()
            n = int(self.rng.choice(others))
        return views.at[n, "img"], views.at[n, "id"]

    def draw(self, subset: str) -> dict:
        """One triplet row of ``subset``."""
        if subset == "S2b" and self.mtg is not None and len(self.mtg) and self.rng.random() < self.mtg_share:
            return self._mtg_part(subset)
        a, p = self.pair()
        views = self.views
        ak, pk, aid = views.at[a, "img"], views.at[p, "img"], views.at[a, "id"]
        if subset == "S1":
            nk, nid = self.mined(a)
            kind = "mined_real"
            if self.label_noise and self.rng.random() < self.label_noise:
                pk = self._noisy_positive(a)
        elif subset == "S2a":
            ak, pk, nk, nid, kind = self._context_pair(a, ak, pk)
        else:
            nk, nid, kind = self._distractor(a, aid)
        return {"subset": subset, "anchor": ak, "positive": pk, "negative": nk,
                "neg_kind": kind, "anchor_id": aid, "neg_id": nid}

    def _noisy_positive(self, a: int) -> str:
        """A view of *another* identity of the anchor's class labelled as its positive: the mini
        analogue of the unfiltered instance labels of ID-Sim App. A.1 (one label over visually
        different objects)."""
        views = self.views
        same = views.index[(views["class_name"] == views.at[a, "class_name"])
                           & (views["id"] != views.at[a, "id"])].to_numpy()
        if not len(same):
            same = views.index[views["id"] != views.at[a, "id"]].to_numpy()
        return views.at[int(self.rng.choice(same)), "img"]

    def _mtg_part(self, subset: str) -> dict:
        r = self.mtg.iloc[int(self.rng.integers(len(self.mtg)))]
        k = int(self.rng.integers(1, 3))
        return {"subset": subset, "anchor": r[f"image_{3 - k}_original"],
                "positive": r[f"image_{k}_original"], "negative": r[f"image_{k}_inpainted"],
                "neg_kind": "mtg_part", "anchor_id": r["pair_id"], "neg_id": r["pair_id"] + "_edit"}

    def _context_pair(self, a: int, ak: str, pk: str) -> tuple[str, str, str, str, str]:
        pattern = int(self.rng.integers(3))   # (orig, edit), (edit, orig), (edit, edit)
        ak2 = ak if pattern == 0 else CTX + ak
        pk2 = CTX + pk if pattern in (0, 2) else pk
        if pattern == 1 and ak2 == CTX + pk2:   # never an image against its own edit
            pk2 = pk
        nk, nid = self.mined(a)
        kind = "mined_real"
        if self.rng.random() < 0.5:
            nk, kind = CTX + nk, "mined_ctx"
        return ak2, pk2, nk, nid, kind

    def _distractor(self, a: int, aid: str) -> tuple[str, str, str]:
        if not self.sources:
            raise ValueError("build_triplets: S2b needs train distractor sources (sources.json)")
        src = self.sources[int(self.rng.integers(len(self.sources)))]
        views = self.views
        nk = self.data.distractors[src].at[int(views.at[a, "row"]), f"nimg{int(views.at[a, 'view'])}"]
        return nk, aid + "_" + src, f"distractor:{src}"


def build_triplets(data: NearIDData, instances: pd.DataFrame, n_triplets: int, rng: np.random.Generator,
                   embed: Callable[[list[str]], torch.Tensor], mix: Sequence[float] = (1, 1, 1),
                   split: str = "train", mtg_share: float = 0.3, label_noise: float = 0.0) -> pd.DataFrame:
    """The ID-Sim training triplets (see the module docstring) for the identities in
    ``instances`` (columns id, class_name). ``embed(keys) -> [N, D]`` gives L2-normalised frozen
    embeddings for hard-negative mining. Returns a DataFrame with columns subset, anchor, positive,
    negative, neg_kind (mined_real | mined_ctx | distractor:<source> | mtg_part), anchor_id,
    neg_id; rows shuffled. ``label_noise``: share of S1 rows whose positive is a view of another
    identity of the class (a wrong instance label; Table 3's unfiltered pool)."""
    ids = set(instances["id"])
    views = _views(data, ids)
    if views.empty:
        raise ValueError(f"build_triplets: no views for the {len(ids)} identities given")
    nn_idx = mine_hard_negatives(embed(views["img"].tolist()), views["id"].tolist(), views["class_name"].tolist())
    w = np.asarray(mix, dtype=float)
    raw = w / w.sum() * n_triplets
    counts = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - counts), kind="stable")[: n_triplets - counts.sum()]:
        counts[i] += 1                  # largest remainders; a zero-weight subset never gets one
    mtg = data.mtg[data.mtg.split == split] if data.mtg is not None else None
    sampler = _TripletSampler(data, views, nn_idx, rng, mtg, mtg_share, label_noise)
    rows = [sampler.draw(subset) for subset, c in zip(SUBSETS, counts) for _ in range(int(c))]
    df = pd.DataFrame(rows)
    return df.iloc[rng.permutation(len(df))].reset_index(drop=True)
