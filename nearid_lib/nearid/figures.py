"""What the NearID figures of notebook 08 show, assembled from the dataset and the bench encoders
(:func:`~nearid_lib.nearid.scorers.load_bench_encoders`); :mod:`nearid_lib.plots` draws them.

- :func:`kpca_panels`: Figure 5, embeddings of positives and their matched-context distractors;
- :func:`nearid_qualitative`: Figure 7, NearID rows with every image's scores against the anchor;
- :func:`mtg_qualitative`: Figure 8, MTG rows with scores, the oracle and the object / part outlines;
- :func:`mtg_ecdf_series`: Figure 9, every scorer's MTG part-edit scores and the oracle, with each
  scorer's M-O (the curves compare distributions; M-O says how each pair is ordered).

Scores under an image read one line per scorer, ``{letter: bench encoder}`` in order (:func:`score_label`),
e.g. ``{"F": frozen, "N": nearid}`` gives ``"F=0.93\\nN=0.71"``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..data.groups import VIEWS

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["OBJECT_COLOUR", "PART_COLOUR", "score_label", "kpca_views", "kpca_panels", "nearid_qualitative",
           "mtg_qualitative", "mtg_ecdf_series", "ORACLE_LABEL", "ECDF_NOTE"]

OBJECT_COLOUR = "#009E73"       # Okabe-Ito green: the object's outline in Figure 8
PART_COLOUR = "#D55E00"         # Okabe-Ito vermillion: the edited part's outline
ORACLE_LABEL = "Oracle (1 - |part|/|object|)"
# under Figure 9: two curves that look alike say nothing about whether a scorer orders the edits as
# the oracle does (a head's curve can hug the oracle's while its M-O is near 0)
ECDF_NOTE = ("The curves compare score distributions only. M-O and M-Opair (legend) measure agreement pair by "
             "pair (Fisher-z means of the Pearson r of score and oracle over the same pairs): a curve near the "
             "oracle's with M-O near 0 ranks the edits unlike the oracle.")


def score_label(values: Mapping[str, float]) -> str:
    """One ``<letter>=<value>`` line per entry, two decimals: ``{"F": 0.931, "N": 0.7}`` -> ``"F=0.93\\nN=0.70"``."""
    return "\n".join(f"{k}={v:.2f}" for k, v in values.items())


def kpca_views(kp: pd.DataFrame, dist: pd.DataFrame) -> tuple[list[str], list[str], list[bool]]:
    """Figure 5's images: for every row of ``kp`` (positives rows) and each of its views, the view
    and its distractor (``dist``: one source's distractor rows, aligned with ``kp`` by position),
    in that order. Returns ``(relpaths, identity ids, is_distractor)``."""
    rels: list[str] = []
    ident: list[str] = []
    is_dist: list[bool] = []
    for n, row in kp.iterrows():
        for k in VIEWS:
            if row[f"img{k}"]:
                rels += [row[f"img{k}"], dist.at[n, f"nimg{k}"]]
                ident += [row["id"]] * 2
                is_dist += [False, True]
    return rels, ident, is_dist


def kpca_panels(encoders: Mapping[str, Any], kp: pd.DataFrame, dist: pd.DataFrame
                ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Figure 5's panels (:func:`nearid_lib.plots.kernel_pca_panels`): per panel title of ``encoders``
    (title -> bench encoder with an ``embedder``), the embeddings of :func:`kpca_views`' images,
    their identity ids and whether each is a distractor."""
    rels, ident, is_dist = kpca_views(kp, dist)
    return {name: (b.embedder.embed(rels).numpy(), np.array(ident), np.array(is_dist))
            for name, b in encoders.items()}


def nearid_qualitative(data: NearIDData, rows: pd.DataFrame, sources: Sequence[str],
                       scorers: Mapping[str, Any], variant: str = "full") -> tuple[list[list], list[list[str]]]:
    """Figure 7's cells (:func:`nearid_lib.plots.score_grid`): per positives row, the anchor (view 1),
    views 2 and 3 and view 1's distractor from each of ``sources``, as images (None where a row has
    no such image), and under each but the anchor its scores against the anchor (same object mask),
    one line per scorer of ``scorers`` (letter -> bench encoder). Returns ``(images, labels)``."""
    images, pairs = [], []
    for _, r in rows.iterrows():
        ds = [data.distractors[s].set_index("id").at[r["id"], "nimg1"] for s in sources]
        cells = [r["img1"], r["img2"], r["img3"] or None, *ds]
        images.append([data.image(c) if c else None for c in cells])
        pairs.append([(r["img1"], r["mask1"], c, r["mask1"]) if c else None for c in cells])
    labels = []
    for pr in pairs:
        scored = [p for p in pr[1:] if p]
        sc = {letter: b.pair_scores(data, scored, variant) for letter, b in scorers.items()}
        txt, k = [""], 0
        for p in pr[1:]:
            if p is None:
                txt.append("")
                continue
            txt.append(score_label({letter: s[k] for letter, s in sc.items()}))
            k += 1
        labels.append(txt)
    return images, labels


def mtg_qualitative(data: NearIDData, rows: pd.DataFrame, scorers: Mapping[str, Any], variant: str = "full"
                    ) -> tuple[list[list], list[list[str]], list[list[list]]]:
    """Figure 8's cells (:func:`nearid_lib.plots.score_grid`): per MTG row, the anchor (image 1), the
    positive (image 2) and the two part edits, as images; under each but the anchor its scores
    against the anchor (the anchor's object mask) by every scorer (letter -> bench encoder) and, for
    a part edit, the oracle (``O``); outlines of the object (:data:`OBJECT_COLOUR`) on the anchor
    and of object and edited part (:data:`PART_COLOUR`) on each edit. Returns ``(images, labels,
    contours)``."""
    cells = [("image_1_original", None), ("image_2_original", None), ("image_1_inpainted", "oracle_1"),
             ("image_2_inpainted", "oracle_2")]
    images, labels, contours = [], [], []
    for _, r in rows.iterrows():
        pr = [(r["image_1_original"], r["image_1_object_mask"], r[c], r["image_1_object_mask"]) for c, _ in cells[1:]]
        sc = {letter: b.pair_scores(data, pr, variant) for letter, b in scorers.items()}
        images.append([data.image(r[c]) for c, _ in cells])
        labels.append([""] + [score_label({**{letter: s[k] for letter, s in sc.items()}, **({"O": r[o]} if o else {})})
                              for k, (_, o) in enumerate(cells[1:])])
        contours.append([[(data.mask(r["image_1_object_mask"]), OBJECT_COLOUR)], [],
                         [(data.mask(r["image_1_object_mask"]), OBJECT_COLOUR),
                          (data.mask(r["image_1_part_mask"]), PART_COLOUR)],
                         [(data.mask(r["image_2_object_mask"]), OBJECT_COLOUR),
                          (data.mask(r["image_2_part_mask"]), PART_COLOUR)]])
    return images, labels, contours


def mtg_ecdf_series(scorers: Mapping[str, Any], data: NearIDData, split: str = "test", variant: str = "full"
                    ) -> tuple[dict[str, np.ndarray], dict[str, str], int]:
    """Figure 9's series (:func:`nearid_lib.plots.ecdf_plot`): the oracle (:data:`ORACLE_LABEL`) and,
    per scorer (legend label -> bench encoder), its scores of each MTG pair's two part edits against
    their originals (``s_1_1p``, ``s_2_2p``); the notes give each scorer's M-O and M-Opair
    (:func:`nearid_lib.metrics.mtg_metrics` on the same pairs). Returns ``(series, notes,
    n_edited_images)``; empty without MTG pairs in ``split``."""
    oracle, series, notes = None, {}, {}
    for label, b in scorers.items():
        mt, sc = b.mtg(data, split, variant)
        if not sc:
            continue
        oracle = np.r_[sc["oracle_1"], sc["oracle_2"]]           # the same pairs for every scorer
        series[label] = np.r_[sc["s_1_1p"], sc["s_2_2p"]]
        notes[label] = f"M-O {mt['m_o']:.3f}, M-Opair {mt['m_opair']:.3f}"
    if oracle is None:
        return {}, {}, 0
    return {ORACLE_LABEL: oracle, **series}, notes, len(oracle)
