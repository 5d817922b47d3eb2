"""Hand-built NearID-bench cases shared by the NearID evaluation, table, claim, DB++ and scorer tests:
unit vectors at known angles, so every SSR/PA can be counted by hand."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

from nearid_lib import metrics
from nearid_lib.nearid.evaluate import EncoderResult, SplitEmbeddings, nearid_bench


PV = Path(__file__).resolve().parent.parent / "paper_values"


def _unit(deg):
    a = np.deg2rad(deg)
    return [np.cos(a), np.sin(a)]


def _split(dist_angles: dict[str, list[list[float]]], n_views=(3, 2, 3, 2)) -> SplitEmbeddings:
    """Positives of identity n at angles 0, 10, 20 deg (view 3 missing when n_views = 2); the
    distractor of view k at ``dist_angles[src][n][k]`` degrees (NaN = missing). cos decreases with
    the angle, so a distractor within 10 deg of its view beats a positive 10 deg away."""
    N = len(n_views)
    pos = torch.full((N, 3, 2), float("nan"))
    pm = torch.zeros(N, 3, dtype=torch.bool)
    for n, v in enumerate(n_views):
        for k in range(v):
            pos[n, k] = torch.tensor(_unit(10 * k))
            pm[n, k] = True
    se = SplitEmbeddings("test", "full", [f"id{n}" for n in range(N)], pos, pm, train_sources=["A"])
    for s, ang in dist_angles.items():
        d = torch.full((N, 3, 2), float("nan"))
        dm = torch.zeros(N, 3, dtype=torch.bool)
        for n in range(N):
            for k in range(3):
                if pm[n, k] and np.isfinite(ang[n][k]):
                    d[n, k] = torch.tensor(_unit(ang[n][k]))
                    dm[n, k] = True
        se.distractors[s], se.dist_mask[s] = d, dm
    return se


FAR, NEAR = 90.0, None   # NEAR is filled per view: the distractor sits 5 deg from its view


def _near(k):
    return 10 * k + 5.0


# source A: every distractor far -> every trial wins: SSR 100, PA 100
A = [[FAR] * 3 for _ in range(4)]


# source B: identity 0 has view 1's distractor near (5 deg from view 0? no: view index 1 at 15 deg);
# identity 1 all far; identities 2, 3: view 0's distractor near.
B = [[FAR, _near(1), FAR], [FAR, FAR, np.nan], [_near(0), FAR, FAR], [_near(0), FAR, np.nan]]


def _expected_B():
    """Brute force: count trials of source B by hand from the geometry."""
    se = _split({"B": B})
    ps, ds = metrics.nearid_similarities(se.positives, se.distractors["B"], se.pos_mask, se.dist_mask["B"])
    wins = trials = succ = 0
    for n in range(4):
        ok_all = True
        for i in range(3):
            for j in range(i + 1, 3):
                if np.isnan(ps[n, i, j]):
                    continue
                for a in (i, j):
                    if np.isnan(ds[n, a]):
                        continue
                    trials += 1
                    w = ps[n, i, j] - ds[n, a] > 0
                    wins += w
                    ok_all &= w
        succ += ok_all
    return 100 * succ / 4, 100 * wins / trials, trials


def _result(name, label, fg_shift=0.0):
    se_full = _split({"A": A, "B": B})
    nb_full = nearid_bench(se_full, ["A"])
    # FG-only: every distractor far (the background shortcut is gone) unless fg_shift keeps B
    se_fg = _split({"A": A, "B": A if fg_shift == 0 else B})
    mt = {"m_o": 0.2, "m_opair": 0.3, "ssr": 0.0, "pa": 0.5, "n_pairs": 10}
    return EncoderResult(name=name, label=label, nearid={"full": nb_full, "fg": nearid_bench(se_fg, ["A"])},
                               mtg={"full": mt, "fg": dict(mt, m_o=0.4)})


def _dataset(rng):
    """Two sources, three identities (one with two views), one MTG pair, one edit grid: tables in
    the released schema, images referenced by relpath only (the cosine scorer reads embeddings)."""
    pos = pd.DataFrame({"id": ["a", "b", "c"], "split": ["test"] * 3,
                        "img1": ["pa1", "pb1", "pc1"], "img2": ["pa2", "pb2", "pc2"], "img3": ["pa3", "", "pc3"],
                        "mask1": ["m"] * 3, "mask2": ["m"] * 3, "mask3": ["m", "", "m"]})
    dist = {s: pd.DataFrame({"id": ["a", "b", "c"], "split": ["test"] * 3,
                             **{f"nimg{k}": [f"{s}{i}{k}" if pos.at[j, f"img{k}"] else ""
                                             for j, i in enumerate("abc")] for k in (1, 2, 3)}})
            for s in ("S1", "S2")}
    mtg = pd.DataFrame({"pair_id": [f"p{i}" for i in range(4)], "split": ["test"] * 4,
                        **{c: [f"{c}{i}" for i in range(4)] for c in
                           ("image_1_original", "image_2_original", "image_1_inpainted", "image_2_inpainted",
                            "image_1_object_mask", "image_2_object_mask")},
                        "oracle_1": [0.9, 0.5, 0.7, 0.2], "oracle_2": [0.8, 0.6, 0.4, 0.3]})
    data = SimpleNamespace(positives=pos, distractors=dist, sources=["S1", "S2"], train_sources=["S1"], mtg=mtg)
    rels = [v for v in pos[["img1", "img2", "img3"]].to_numpy().ravel() if v]
    rels += [v for d in dist.values() for v in d[["nimg1", "nimg2", "nimg3"]].to_numpy().ravel() if v]
    rels += [v for c in ("image_1_original", "image_2_original", "image_1_inpainted", "image_2_inpainted")
             for v in mtg[c]]
    lookup = {r: rng.normal(size=5) for r in rels}
    return data, lookup
