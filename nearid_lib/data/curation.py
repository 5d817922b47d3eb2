"""Curation procedures from the papers, as pure functions over pandas metadata tables.

- :func:`filter_syncd` - NearID Section 3.3: from SynCD keep the "rigid" partition, enforce
  uniqueness by text description and by Objaverse id, keep identities with >= 2 views, and
  split into mutually exclusive train/val/test identity sets (18,786 / 100 / 500 in the paper;
  scaled with ``scale`` or capped by what is available).
- :func:`balanced_allocation` / :func:`proportional_allocation` / :func:`sample_balanced` -
  ID-Sim Appendix A.1 balanced sampling, steps 1-5: equal initial quota per dataset
  (11,000 / N), small datasets contribute everything and drop out, the remaining budget is
  re-divided equally until the target is reached; two images per selected instance are drawn
  uniformly (anchor, positive); instances are split randomly into train / val.

All randomness comes from an explicit ``numpy.random.Generator`` or integer seed.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

__all__ = ["filter_syncd", "NEARID_SPLITS", "balanced_allocation", "proportional_allocation",
           "sample_balanced"]

NEARID_SPLITS = (18786, 100, 500)


def _require(df: pd.DataFrame, cols: list[str], name: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{name}: missing column(s) {missing}; has {list(df.columns)}")


def filter_syncd(meta: pd.DataFrame, splits: tuple[int, int, int] = NEARID_SPLITS,
                 scale: float = 1.0, seed: int = 0, min_views: int = 2) -> pd.DataFrame:
    """NearID's SynCD filtering. ``meta`` has one row per identity with columns ``id``,
    ``partition`` ("rigid" | "deformable"), ``description``, ``objaverse_id``, ``n_views``.

    Returns the kept rows (original order) with a ``split`` column. Val and test sizes are taken
    first (``round(n * scale)``); train gets ``round(train * scale)`` or whatever remains if
    fewer identities survive. Uniqueness keeps the first occurrence: a row is dropped if its
    (normalised) description or its Objaverse id was already seen."""
    _require(meta, ["id", "partition", "description", "objaverse_id", "n_views"], "filter_syncd")
    df = meta[meta["partition"].astype(str).str.lower() == "rigid"]
    desc = df["description"].fillna("").astype(str).str.strip().str.lower()
    df = df[desc != ""]
    desc = desc[desc != ""]
    df = df[~desc.duplicated(keep="first")]
    oid = df["objaverse_id"].fillna("").astype(str)
    df = df[(oid == "") | ~oid.duplicated(keep="first")]
    df = df[df["n_views"].astype(int) >= min_views].copy()
    n_tr, n_va, n_te = (int(round(n * scale)) for n in splits)
    n = len(df)
    if n < n_va + n_te + 1:
        raise ValueError(f"filter_syncd: only {n} identities survive filtering; need more than "
                         f"val+test = {n_va + n_te}")
    order = np.random.default_rng(seed).permutation(n)
    split = np.empty(n, dtype=object)
    split[order[:n_te]] = "test"
    split[order[n_te:n_te + n_va]] = "val"
    n_tr = min(n_tr, n - n_va - n_te)
    split[order[n_te + n_va:n_te + n_va + n_tr]] = "train"
    df["split"] = split
    return df[df["split"].notna()]


def balanced_allocation(sizes: Mapping[str, int] | pd.Series, total: int = 11000) -> pd.Series:
    """ID-Sim A.1 steps 1-3: instances per dataset under the balanced strategy.

    Step 1: each dataset gets ``total / N``. Step 2: datasets with fewer instances than their
    quota give all they have and leave. Step 3: the remaining budget is divided equally among
    the rest; repeat until the budget is spent or every dataset is exhausted. Integer quotas:
    the remainder of an equal division goes one each to the datasets in name order."""
    sizes = pd.Series(dict(sizes), dtype=int).sort_index()
    if (sizes < 0).any():
        raise ValueError("balanced_allocation: negative dataset size")
    alloc = pd.Series(0, index=sizes.index, dtype=int)
    active = list(sizes.index)
    budget = int(min(total, sizes.sum()))
    while budget > 0 and active:
        q, r = divmod(budget, len(active))
        quota = {d: q + (1 if i < r else 0) for i, d in enumerate(active)}
        small = [d for d in active if sizes[d] - alloc[d] <= quota[d]]
        if small:
            for d in small:                               # step 2: give everything, drop out
                take = int(sizes[d] - alloc[d])
                alloc[d] += take
                budget -= take
                active.remove(d)
            continue                                       # step 3: re-divide what remains
        for d in active:
            alloc[d] += quota[d]
        budget = 0
    return alloc


def proportional_allocation(sizes: Mapping[str, int] | pd.Series, total: int = 11000) -> pd.Series:
    """The baseline of A.1: instances proportional to raw dataset size (largest remainders)."""
    sizes = pd.Series(dict(sizes), dtype=int).sort_index()
    total = int(min(total, sizes.sum()))
    exact = sizes / sizes.sum() * total
    alloc = np.floor(exact).astype(int)
    rem = total - int(alloc.sum())
    order = (exact - alloc).sort_values(ascending=False, kind="stable").index[:rem]
    alloc[order] += 1
    return alloc.astype(int)


def sample_balanced(images: pd.DataFrame, total: int = 11000, n_val: int = 1000,
                    rng: np.random.Generator | int = 0, strategy: str = "balanced") -> pd.DataFrame:
    """ID-Sim A.1 steps 1-5 over an image table with columns ``dataset``, ``instance``,
    ``image`` (one row per image). Instances with fewer than two images cannot give an
    (anchor, positive) pair and are ignored.

    Returns one row per selected instance: dataset, instance, anchor, positive, split
    (``n_val`` instances in "val", the rest in "train"; step 5 splits the pooled instances
    at random)."""
    _require(images, ["dataset", "instance", "image"], "sample_balanced")
    rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
    groups = images.groupby(["dataset", "instance"], sort=True)["image"].apply(list)
    groups = groups[groups.map(len) >= 2]
    sizes = groups.groupby(level=0).size()
    alloc = (balanced_allocation if strategy == "balanced" else proportional_allocation)(sizes, total)
    rows = []
    for ds in sorted(alloc.index):
        inst = groups.loc[ds]
        pick = rng.choice(len(inst), size=int(alloc[ds]), replace=False)
        for j in sorted(pick):
            imgs = inst.iloc[j]
            a, p = rng.choice(len(imgs), size=2, replace=False)   # step 4: uniform pair
            rows.append({"dataset": ds, "instance": inst.index[j], "anchor": imgs[a],
                         "positive": imgs[p]})
    out = pd.DataFrame(rows, columns=["dataset", "instance", "anchor", "positive"])
    if n_val > len(out):
        raise ValueError(f"sample_balanced: n_val={n_val} > {len(out)} selected instances")
    split = np.array(["train"] * len(out), dtype=object)
    split[rng.permutation(len(out))[:n_val]] = "val"              # step 5
    out["split"] = split
    return out
