"""The authors' released NearID model (``Aleksandar/nearid-siglip2``) as bench rows, scored at the
precision its expected values were measured in.

Their reproduction guide's expected values (Table 1: SSR 99.17 / PA 99.71; Flux alone 99.4 / 99.77;
MTG 0.454 / 0.475 / 34.0 / 46.0) come from the released weights loaded in float32 and run on the
images (``evaluation/sim_test.py``; "the released weights load in fp32 whereas the reported
evaluations ran in fp16, which flips an occasional borderline margin trial"). So the released-weights
row is the **float forward** (:func:`~nearid_lib.features.profile_encoders.release_embedders`): tower
and head in float32 on every test image, embeddings kept in rows (an
:class:`~nearid_lib.features.Embedder` of layout ``"rows"``), never the int8 token store that
training reads. Where the profile trains from a quantised token store, the same released head is
also scored the way our trained heads are (on the profile's backbone tokens through that store:
``nearid-release-int8``), and :func:`decision_diff` counts the test decisions the two paths disagree
on (``04_release_precision``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..features.profile_encoders import RELEASE_FLOAT, RELEASE_INT8, release_why

if TYPE_CHECKING:
    from .evaluate import EncoderResult

__all__ = ["RELEASE_FLOAT", "RELEASE_INT8", "decision_diff", "release_why"]


def _flips(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """(trials valid on both sides, trials whose win/lose decision differs) of two margin arrays."""
    both = np.isfinite(a) & np.isfinite(b)
    return int(both.sum()), int(((a > 0) != (b > 0))[both].sum())


def _all_won(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per MTG pair: 1.0 when every existing margin of (a, b) is > 0, 0.0 when one is not, NaN
    without any (SSR's rule, :func:`~nearid_lib.metrics.mtg_ssr_pa`)."""
    m = np.stack([a, b], axis=1)
    valid = np.isfinite(m)
    ok = np.where(valid, m > 0, True).all(axis=1)
    return np.where(valid.any(axis=1), ok.astype(float), np.nan)


def decision_diff(ref: EncoderResult, other: EncoderResult) -> pd.DataFrame:
    """Test decisions two scorings of the same model disagree on (``ref``: the float forward,
    ``other``: the int8 token store), per variant and NearID source, and for MTG: ``n_trials`` (on
    both sides), ``trials_differ`` (margin > 0 on one side only), ``n_units`` / ``units_differ``
    (identities, resp. MTG pairs, whose all-trials-win decision differs: SSR), and both sides' SSR
    and PA (percent; the authors' PA for NearID). Needs per-identity margins
    (``nearid_bench(..., per_identity=True)``, as every embedding bench encoder computes them)."""
    rows = []
    for v, nb in ref.nearid.items():
        nb2 = other.nearid.get(v)
        if nb2 is None:
            continue
        for s, r in nb["per_source"].items():
            r2 = nb2["per_source"][s]
            if "margins" not in r or "margins" not in r2:
                raise ValueError(f"decision_diff: source {s!r} ({v}) has no per-identity margins")
            n, d = _flips(r["margins"], r2["margins"])
            sa, sb = np.asarray(r["success"]), np.asarray(r2["success"])
            ok = np.isfinite(sa) & np.isfinite(sb)
            rows.append({"variant": v, "benchmark": "nearid", "source": s, "n_trials": n, "trials_differ": d,
                         "n_units": int(ok.sum()), "units_differ": int((sa != sb)[ok].sum()),
                         "ssr_ref": 100 * r["ssr"], "ssr_other": 100 * r2["ssr"],
                         "pa_ref": 100 * r["pa"], "pa_other": 100 * r2["pa"]})
        sc, sc2 = ref.mtg_scores.get(v) or {}, other.mtg_scores.get(v) or {}
        if sc and sc2:
            m = [np.asarray(x["s_1_2"]) - np.asarray(x[k]) for x in (sc, sc2) for k in ("s_1_1p", "s_2_2p")]
            n1, d1 = _flips(m[0], m[2])
            n2, d2 = _flips(m[1], m[3])
            won = [_all_won(a, b) for a, b in ((m[0], m[1]), (m[2], m[3]))]
            ok = np.isfinite(won[0]) & np.isfinite(won[1])
            mt, mt2 = ref.mtg.get(v) or {}, other.mtg.get(v) or {}
            rows.append({"variant": v, "benchmark": "mtg", "source": "MTG", "n_trials": n1 + n2,
                         "trials_differ": d1 + d2, "n_units": int(ok.sum()),
                         "units_differ": int((won[0] != won[1])[ok].sum()),
                         "ssr_ref": 100 * mt.get("ssr", np.nan), "ssr_other": 100 * mt2.get("ssr", np.nan),
                         "pa_ref": 100 * mt.get("pa", np.nan), "pa_other": 100 * mt2.get("pa", np.nan)})
    return pd.DataFrame(rows)
