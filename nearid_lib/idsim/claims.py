"""ID-Sim's checkable claims, declared once with fixed criteria, and the per-unit evidence they are
decided on (see :mod:`nearid_lib.claims` for statistics, paired bootstrap intervals and verdicts).

Quantities are ``<encoder>.<measure>`` with ``<encoder>`` in ``frozen`` (the backbone, the paper's
DINOv3 row), ``idsim``, ``nearid`` and ``<measure>``:

* ``pods.ap``: per-query AP of gallery retrieval (mean = the PODS analogue's mAP; unit = the
  query's subject, so its queries are resampled together);
* ``cute_hard.acc`` / ``cute_easy.acc``: triplet accuracy (unit = the anchor's identity);
* ``graded.rho``: Spearman correlation of similarity with the graded label *within* each anchor of
  the graded set (edit grids of anchors of their own, never the ``sens.*`` anchors), averaged over
  anchors (unit = anchor). It is not the pooled Spearman of Fig. 25: a pooled rank correlation is
  not a sum over units, the per-anchor one is, so it can be bootstrapped;
* ``sens.<factor>``: the selective-sensitivity slope of Fig. 6 (unit = grid anchor).

In ``paper`` (no training set, no edit grids: :mod:`.released`) the claims compare the *released*
ID-Sim with the frozen DINOv3 on the public benchmarks (:data:`RELEASED_CLAIMS`,
:func:`public_evidence`):

* ``s2k.prec``: Subjects2k, per same-identity pair (unit = its ``pair_id``) the precision at its
  rank among all pairs (the share of same pairs among the pairs scored at least as high): their mean
  is the AP (scikit-learn's, ties as one threshold), so the estimate is Figure 25's metric; the
  bootstrap resamples the same pairs and holds the different pairs fixed;
* ``dbpp.rho``: DreamBench++, per subject the Spearman correlation of the similarity with the mean
  human rating over its generated images (unit = subject), averaged over subjects (not Figure 25's
  pooled Spearman, which is not a sum over units).

Both sides of every comparison are scored on the same units, so intervals are paired.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from .. import metrics as M
from ..claims import ClaimSpec, Evidence, Greater, PaperRef
from .eval_suite import pair_cosine  # the cosine evaluate_sets uses: evidence matches it exactly

__all__ = ["IDSIM_CLAIMS", "RELEASED_CLAIMS", "CLAIMS_BY_NOTEBOOK", "benchmark_evidence", "sensitivity_evidence",
           "public_evidence", "released_evidence"]

F25, F6 = "idsim_fig25_full_results", "idsim_fig6_sensitivity_claims"


def _f25(model: str, metric_id: str) -> PaperRef:
    return PaperRef(F25, (("model", model), ("metric_id", metric_id)), "value")


_BEATS = (("1a", "pods.ap", "instance retrieval (PODS analogue, per-query AP)", "pods_ap"),
          ("1b", "cute_hard.acc", "hard triplets (CUTE hard analogue, accuracy)", "cute_hard_acc"),
          ("1c", "cute_easy.acc", "easy triplets (CUTE easy analogue, accuracy)", "cute_easy_acc"),
          ("1d", "graded.rho", "graded edit pairs (DreamBench++ analogue, per-anchor Spearman)",
           "dreambench_spearman"))

# ID-Sim's Fig. 6 regresses DINOv3 and ID-Sim only: whether the NearID head is as selective is this
# project's question (the two papers' models on one protocol), judged like the claims, never counted
OWN_FIG6 = "NearID is not in ID-Sim's Fig. 6: this project asks how the NearID head fares on its protocol"

IDSIM_CLAIMS: tuple[ClaimSpec, ...] = tuple(
    ClaimSpec(f"idsim.{k}", "ID-Sim", f"{k}. ID-Sim beats its frozen backbone on {what}",
              Greater(f"idsim.{q}", f"frozen.{q}", 0.0), "DINOv3 {0:.3f} -> ID-Sim {1:.3f}",
              (_f25("DINOv3", mid), _f25("ID-Sim", mid)),
              evidence_note="test split, the same units for both encoders (paired)")
    for k, q, what, mid in _BEATS) + (
    ClaimSpec("idsim.2a", "ID-Sim", "2a. ID-Sim is more identity-sensitive than its frozen backbone",
              Greater("idsim.sens.identity", "frozen.sens.identity", 0.0),
              "Fig. 6: largest similarity drop under identity change", (),
              evidence_note="per-anchor regression slopes over the edit grids (paired over anchors)"),
    ClaimSpec("idsim.2b", "ID-Sim", "2b. ID-Sim is less background-sensitive than its frozen backbone",
              Greater("frozen.sens.background", "idsim.sens.background", 0.0),
              "Fig. 6: stable under background change; DINOv3 background-sensitive", (),
              evidence_note="per-anchor regression slopes over the edit grids (paired over anchors)"),
    ClaimSpec("idsim.2c", "ID-Sim", "2c. The NearID head is more identity-sensitive than the frozen backbone",
              Greater("nearid.sens.identity", "frozen.sens.identity", 0.0),
              "(our question: NearID is not in Fig. 6)", (),
              evidence_note="per-anchor regression slopes over the edit grids (paired over anchors)",
              own_question=OWN_FIG6),
    ClaimSpec("idsim.2d", "ID-Sim", "2d. The NearID head is less background-sensitive than the frozen backbone",
              Greater("frozen.sens.background", "nearid.sens.background", 0.0),
              "(our question: NearID is not in Fig. 6)", (),
              evidence_note="per-anchor regression slopes over the edit grids (paired over anchors)",
              own_question=OWN_FIG6),
)

RELEASED_CLAIMS: tuple[ClaimSpec, ...] = tuple(
    ClaimSpec(f"idsim.{k}", "ID-Sim", f"{k}. The released ID-Sim beats frozen DINOv3 on {what}",
              Greater(f"idsim.{q}", f"frozen.{q}", 0.0), "DINOv3 {0:.3f} -> ID-Sim {1:.3f}",
              (_f25("DINOv3", mid), _f25("ID-Sim", mid)), evidence_note=note)
    for k, q, what, mid, note in (
        ("1e", "s2k.prec", "Subjects2k (AP)", "subjects2k_ap",
         "released checkpoint vs frozen backbone, the same Subjects2k pairs (paired over same-identity pairs)"),
        ("1f", "dbpp.rho", "DreamBench++ (per-subject Spearman with the human ratings)", "dreambench_spearman",
         "released checkpoint vs frozen backbone, the same DreamBench++ images (paired over subjects)")))

CLAIMS_BY_NOTEBOOK = {"09_train_idsim": ("idsim.1a", "idsim.1b", "idsim.1c", "idsim.1d"),
                      "10_sensitivity_regression": ("idsim.2a", "idsim.2b", "idsim.2c", "idsim.2d")}


def benchmark_evidence(sets: Mapping[str, pd.DataFrame], emb: Mapping[str, Mapping[str, np.ndarray]],
                       identity_of: Mapping[str, str] | None = None) -> dict[str, Evidence]:
    """Per-unit evidence of the benchmark claims for every encoder in ``emb`` ({encoder: {key:
    vector}}), from the sets of :func:`nearid_lib.idsim.eval_suite.mini_benchmark_sets`.
    ``identity_of`` maps a triplet's anchor key to its identity (the unit; default: the key)."""
    out: dict[str, Evidence] = {}
    ident = identity_of or {}
    r, t, g = sets.get("retrieval"), sets.get("triplets"), sets.get("graded")
    for enc, e in emb.items():
        if r is not None and len(r):
            q, gal = r[r.role == "query"], r[r.role == "gallery"]
            _, per_q = M.retrieval_map(np.stack([e[k] for k in q.path]), q.label.to_numpy(),
                                       np.stack([e[k] for k in gal.path]), gal.label.to_numpy(),
                                       return_per_query=True, ties="expected")
            out[f"{enc}.pods.ap"] = Evidence("mean:ap", pd.DataFrame({"unit": q.label.astype(str).to_numpy(), "ap": per_q}),
                                             f"{enc} per-query AP", bounds=(0.0, 1.0))
        if t is not None and len(t):
            for mode in ("hard", "easy"):
                tm = t[t["mode"] == mode]
                if len(tm):
                    ok = (pair_cosine(e, tm.anchor, tm.positive) > pair_cosine(e, tm.anchor, tm.negative)).astype(float)
                    units = [ident.get(k, k) for k in tm.anchor]
                    out[f"{enc}.cute_{mode}.acc"] = Evidence(
                        "mean:correct", pd.DataFrame({"unit": units, "correct": ok}), f"{enc} {mode} triplets",
                        chance=0.5, bounds=(0.0, 1.0))
        if g is not None and len(g):
            s = pair_cosine(e, g.img1, g.img2)
            rows = []
            for aid, idx in g.groupby("anchor_id", sort=True).indices.items():
                y = g.rating.to_numpy(float)[idx]
                rho = spearmanr(s[idx], y).statistic if len(idx) > 2 and np.ptp(y) > 0 else np.nan
                rows.append({"unit": str(aid), "rho": float(rho)})
            out[f"{enc}.graded.rho"] = Evidence("mean:rho", pd.DataFrame(rows), f"{enc} per-anchor Spearman",
                                               chance=0.0, bounds=(-1.0, 1.0))
    return out


def sensitivity_evidence(wide: pd.DataFrame, factors: Sequence[str] = ("identity", "background", "viewpoint",
                                                                       "lighting"),
                         per_seed: pd.DataFrame | None = None) -> dict[str, Evidence]:
    """``<encoder>.sens.<factor>`` evidence from :func:`~nearid_lib.idsim.sensitivity.per_anchor_sensitivity`'s
    wide table (one row per encoder and anchor). An encoder in ``per_seed`` (the
    :class:`~nearid_lib.idsim.sensitivity.SensitivityRun` table of its training seeds, ``seed``
    column) is read from there instead: one row per seed and anchor, so the claims average over
    seeds and carry their spread (hierarchical bootstrap, :func:`nearid_lib.claims._seed_noise`)."""
    seeded = set(per_seed.encoder) if per_seed is not None else set()
    out = {}
    for enc, g in wide.groupby("encoder", sort=True):
        src = per_seed[per_seed.encoder == enc] if enc in seeded else g
        for f in factors:
            if f in src.columns and src[f].notna().all():
                t = pd.DataFrame({"unit": src.anchor_id.astype(str).to_numpy(), "sens": src[f].to_numpy(float)})
                if enc in seeded:
                    t["seed"] = src.seed.to_numpy(int)
                out[f"{enc}.sens.{f}"] = Evidence("mean:sens", t, f"{enc} {f} sensitivity")
    return out



def public_evidence(pair_scores: Mapping[str, Mapping[str, np.ndarray]], s2k_labels=None, s2k_ids=None,
                    dbpp_pairs: pd.DataFrame | None = None) -> dict[str, Evidence]:
    """``<encoder>.s2k.prec`` and ``<encoder>.dbpp.rho`` (module docstring) from each encoder's
    per-pair similarities (``{"s2k": [n], "dbpp": [m]}``, :func:`~.public_eval.public_scores`),
    Subjects2k's ``binary_label`` / ``pair_id`` and the DreamBench++ rating rows (``subject``,
    ``rating``) they were scored on, row-aligned."""
    out: dict[str, Evidence] = {}
    for enc, sc in pair_scores.items():
        if sc.get("s2k") is not None and s2k_labels is not None:
            s, y = np.asarray(sc["s2k"], float), np.asarray(s2k_labels, int)
            pos = np.flatnonzero(y == 1)
            if len(pos) and len(pos) < len(y):
                prec = [float(y[s >= s[i]].sum()) / float((s >= s[i]).sum()) for i in pos]
                units = [str(np.asarray(s2k_ids)[i]) if s2k_ids is not None else str(i) for i in pos]
                out[f"{enc}.s2k.prec"] = Evidence("mean:prec", pd.DataFrame({"unit": units, "prec": prec}),
                                                  f"{enc} Subjects2k precision at each same pair", bounds=(0.0, 1.0))
        if sc.get("dbpp") is not None and dbpp_pairs is not None:
            sim, rating = np.asarray(sc["dbpp"], float), dbpp_pairs["rating"].to_numpy(float)
            rows = []
            for subj, idx in dbpp_pairs.groupby("subject", sort=True).indices.items():
                if len(idx) > 2 and np.ptp(rating[idx]) > 0 and np.ptp(sim[idx]) > 0:
                    rows.append({"unit": str(subj), "rho": float(spearmanr(sim[idx], rating[idx]).statistic)})
            if rows:
                out[f"{enc}.dbpp.rho"] = Evidence("mean:rho", pd.DataFrame(rows), f"{enc} per-subject Spearman",
                                                  chance=0.0, bounds=(-1.0, 1.0))
    return out


def released_evidence(scores, backbone: str, release: str = "idsim-release") -> dict[str, Evidence]:
    """The evidence of :data:`RELEASED_CLAIMS` from notebook 09's
    :class:`~nearid_lib.idsim.released.ReleasedScores`: ``idsim`` = the paper's released checkpoint
    (``release``), ``frozen`` = the frozen ``backbone`` row; empty when either was not scored."""
    a, b = scores.pair_scores.get(release), scores.pair_scores.get(backbone)
    if not a or not b:
        return {}
    s2k = scores.s2k
    labels = np.asarray(s2k["binary_label"]) if s2k is not None else None
    ids = list(s2k["pair_id"]) if s2k is not None else None
    return public_evidence({"idsim": a, "frozen": b}, labels, ids, scores.pairs)
