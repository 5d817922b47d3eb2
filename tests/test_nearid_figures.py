"""The inputs of notebook 08's figures, on hand-made rows: which images, in which order, and the
score text under each (one line per scorer, the oracle last)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

from nearid_lib.nearid.figures import (OBJECT_COLOUR, PART_COLOUR, kpca_panels, kpca_views, mtg_qualitative,
                                       nearid_qualitative, score_label)


class _Data:
    def __init__(self, distractors=None):
        self.distractors = distractors or {}

    def image(self, rel):
        return f"IMG:{rel}"

    def mask(self, rel):
        return f"MASK:{rel}"


class _Scorer:
    """Scores a pair by the second image's name through ``table``; records what it was asked."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def pair_scores(self, data, pairs, variant="full"):
        self.calls.append((list(pairs), variant))
        return np.array([self.table[p[2]] for p in pairs])


def test_score_label():
    assert score_label({"F": 0.931, "N": 0.7}) == "F=0.93\nN=0.70"
    assert score_label({"F": 1, "N": -0.126, "O": 0.5}) == "F=1.00\nN=-0.13\nO=0.50"


def test_kpca_views_and_panels():
    kp = pd.DataFrame({"id": ["a", "b"], "img1": ["a1", "b1"], "img2": ["a2", "b2"], "img3": ["a3", ""]})
    dist = pd.DataFrame({"id": ["a", "b"], "nimg1": ["da1", "db1"], "nimg2": ["da2", "db2"], "nimg3": ["da3", ""]})
    rels, ident, is_dist = kpca_views(kp, dist)
    assert rels == ["a1", "da1", "a2", "da2", "a3", "da3", "b1", "db1", "b2", "db2"]
    assert ident == ["a"] * 6 + ["b"] * 4 and is_dist == [False, True] * 5
    enc = SimpleNamespace(embedder=SimpleNamespace(embed=lambda r: torch.arange(len(r), dtype=torch.float32)[:, None]))
    panels = kpca_panels({"Frozen": enc, "NearID": enc}, kp, dist)
    assert list(panels) == ["Frozen", "NearID"]
    e, i, d = panels["NearID"]
    assert e.shape == (10, 1) and list(i) == ident and list(d) == is_dist


def test_nearid_qualitative_rows_and_scores():
    rows = pd.DataFrame({"id": ["a", "b"], "img1": ["a1", "b1"], "img2": ["a2", "b2"], "img3": ["", "b3"],
                         "mask1": ["ma1", "mb1"]})
    data = _Data({"S": pd.DataFrame({"id": ["b", "a"], "nimg1": ["sb1", "sa1"]}),
                  "T": pd.DataFrame({"id": ["a", "b"], "nimg1": ["", "tb1"]})})     # T rejected a's fill
    f = _Scorer({"a2": 0.9, "sa1": 0.8, "b2": 0.7, "b3": 0.6, "sb1": 0.5, "tb1": 0.4})
    n = _Scorer({"a2": 0.91, "sa1": 0.1, "b2": 0.88, "b3": 0.86, "sb1": 0.2, "tb1": 0.3})
    images, labels = nearid_qualitative(data, rows, ["S", "T"], {"F": f, "N": n})
    assert images == [["IMG:a1", "IMG:a2", None, "IMG:sa1", None],
                      ["IMG:b1", "IMG:b2", "IMG:b3", "IMG:sb1", "IMG:tb1"]]
    assert labels == [["", "F=0.90\nN=0.91", "", "F=0.80\nN=0.10", ""],
                      ["", "F=0.70\nN=0.88", "F=0.60\nN=0.86", "F=0.50\nN=0.20", "F=0.40\nN=0.30"]]
    # every pair is (anchor, its mask, image, the anchor's mask), full images
    assert f.calls[0] == ([("a1", "ma1", "a2", "ma1"), ("a1", "ma1", "sa1", "ma1")], "full")


def test_mtg_qualitative_rows_scores_oracle_and_outlines():
    m = pd.DataFrame([{"image_1_original": "o1", "image_2_original": "o2", "image_1_inpainted": "e1",
                       "image_2_inpainted": "e2", "image_1_object_mask": "m1", "image_2_object_mask": "m2",
                       "image_1_part_mask": "p1", "image_2_part_mask": "p2", "oracle_1": 0.75, "oracle_2": 0.5}])
    f = _Scorer({"o2": 0.9, "e1": 0.95, "e2": 0.85})
    n = _Scorer({"o2": 0.8, "e1": 0.7, "e2": 0.6})
    images, labels, contours = mtg_qualitative(_Data(), m, {"F": f, "N": n})
    assert images == [["IMG:o1", "IMG:o2", "IMG:e1", "IMG:e2"]]
    assert labels == [["", "F=0.90\nN=0.80", "F=0.95\nN=0.70\nO=0.75", "F=0.85\nN=0.60\nO=0.50"]]
    assert f.calls == [([("o1", "m1", "o2", "m1"), ("o1", "m1", "e1", "m1"), ("o1", "m1", "e2", "m1")], "full")]
    g, r = OBJECT_COLOUR, PART_COLOUR
    assert contours == [[[("MASK:m1", g)], [], [("MASK:m1", g), ("MASK:p1", r)], [("MASK:m2", g), ("MASK:p2", r)]]]


def test_mtg_ecdf_series_carries_each_scorers_m_o_from_the_same_pairs():
    """Figure 9 (issue 53): the oracle first, each scorer's two part-edit scores per pair, and in the
    notes the M-O that metrics.mtg_metrics gives on those very pairs: a scorer whose scores follow
    the oracle's distribution but not its order shows it there (M-O near 0 or below)."""
    from nearid_lib.metrics import mtg_metrics
    from nearid_lib.nearid.figures import ORACLE_LABEL, mtg_ecdf_series
    from nearid_lib.nearid.pairs import mtg_from_scores

    rng = np.random.default_rng(0)
    m = pd.DataFrame({"oracle_1": rng.uniform(0.7, 1, 30), "oracle_2": rng.uniform(0.7, 1, 30)})

    class _Mtg:
        def __init__(self, order):
            self.order = order

        def mtg(self, data, split, variant):
            o = np.r_[m.oracle_1, m.oracle_2]
            s = o if self.order else rng.permutation(o)          # the same values, in order or shuffled
            n = len(m)
            return mtg_from_scores(m, {"s_1_1p": s[:n], "s_2_2p": s[n:], "s_1_2p": s[:n] - 0.05,
                                       "s_2_1p": s[n:] - 0.05, "s_1_2": np.full(n, 0.9)})

    series, notes, n = mtg_ecdf_series({"ordered": _Mtg(True), "shuffled": _Mtg(False)}, _Data(), "test")
    assert list(series) == [ORACLE_LABEL, "ordered", "shuffled"] and n == 60
    assert np.allclose(np.sort(series["shuffled"]), np.sort(series[ORACLE_LABEL]))    # one distribution
    o1, o2 = m.oracle_1.to_numpy(), m.oracle_2.to_numpy()
    want = mtg_metrics(series["shuffled"][:30], series["shuffled"][30:], series["shuffled"][:30] - 0.05,
                       series["shuffled"][30:] - 0.05, np.full(30, 0.9), o1, o2)
    assert notes["shuffled"] == f"M-O {want['m_o']:.3f}, M-Opair {want['m_opair']:.3f}"
    assert notes["ordered"].endswith("M-Opair 0.999") and abs(want["m_opair"]) < 0.5   # r clipped at 0.999
    none = SimpleNamespace(mtg=lambda data, split, variant: (None, {}))
    assert mtg_ecdf_series({"x": none}, _Data(), "test") == ({}, {}, 0)
