"""NearID SSR / PA (NearID Section 3.4, Eq. 4-5) and their support-weighted pooling over sources.

PA is computed both ways (docs/protocol.md, "PA both ways"): ``pa`` is the authors' definition, the
number the paper's tables and their reproduction guide print (their ``evaluation/metrics.py``:
``summarize_margin_family`` counts every column of the margin family ending in ``_margin``, the
per-sample ``_overall_margin`` among them, so each identity with a trial adds one more trial, won iff
the mean of its margins is positive; their ``docs/EVALUATION.md``, "Note on PA", a01532e: typically
under 1 point above the strict rate, up to ~4 for VLM scorers); ``pa_strict`` is the strict pairwise
rate, wins / trials over the directed margins alone. SSR (every margin wins) is the same under both:
a row whose every margin wins has a positive mean.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ._arrays import to_np

__all__ = ["ssr_pa", "nearid_similarities", "pool_sources", "source_breakdown"]


def ssr_pa_from_margins(margins: np.ndarray, per_identity: bool, overall: bool = True) -> dict:
    """SSR/PA from a [N, K] margin table with NaN where a trial does not exist.

    A trial wins iff margin > 0 (a tie is a loss: the identity must *beat* the confounder).
    SSR = mean over rows with >= 1 trial of [all trials win]; ``pa_strict`` = total wins / total
    trials. With ``overall`` (the NearID tables' definition) every row with >= 1 trial adds one
    trial, won iff the mean of its margins is > 0, and ``pa`` = (wins + overall wins) / (trials +
    rows with a trial); without it (MTG, whose authors count only the two margins) ``pa`` is the
    strict rate.
    """
    valid = np.isfinite(margins)                          # [N, K]
    m0 = np.where(valid, margins, 0.0)                    # NaN > 0 is False anyway; be explicit
    wins_t = valid & (m0 > 0)
    trials = valid.sum(axis=1)                            # [N]
    wins = wins_t.sum(axis=1)                             # [N]
    has = trials > 0
    success = has & (wins == trials)
    # the per-row "overall" trial of the authors' tables: mean of the row's valid margins > 0
    mean_margin = np.where(has, m0.sum(axis=1) / np.maximum(trials, 1), np.nan)
    overall_win = has & (np.nan_to_num(mean_margin, nan=0.0) > 0)
    n_id, n_tr, n_w = int(has.sum()), int(trials.sum()), int(wins.sum())
    n_ow = int(overall_win.sum()) if overall else 0
    n_pa = n_tr + (n_id if overall else 0)
    out = {
        "ssr": float(success[has].mean()) if n_id else float("nan"),
        "pa": float((n_w + n_ow) / n_pa) if n_pa else float("nan"),
        "pa_strict": float(n_w / n_tr) if n_tr else float("nan"),
        "n_identities": n_id,
        "n_trials": n_tr,
        "n_wins": n_w,
        "n_overall_wins": n_ow,
        "n_pa_trials": n_pa,
        "n_success": int(success.sum()),
    }
    if per_identity:
        out["wins"] = wins
        out["trials"] = trials
        # float so identities without any trial can be NaN, not a fake failure
        out["success"] = np.where(has, success.astype(np.float64), np.nan)
        out["margins"] = np.where(valid, margins, np.nan)
    return out


def ssr_pa(pos_sim, dist_sim, per_identity: bool = False) -> dict:
    """Sample Success Rate and Pairwise Accuracy of NearID-bench (NearID Eq. 4-5), counted exactly.

    Args:
        pos_sim: [N, P, P] similarity among identity n's positive views; ``pos_sim[n, i, j]`` =
            s(p_i, p_j). Only the strict upper triangle (i < j) is read; NaN there means the pair
            does not exist (a view is missing). The diagonal and lower triangle are ignored.
        dist_sim: [N, P]; ``dist_sim[n, i]`` = s(p_i, n_i), n_i the near-identity distractor
            inpainted into p_i's background and mask. NaN where that distractor is missing.
        per_identity: also return per-identity ``wins``, ``trials`` [N] (int) and ``success`` [N]
            (1.0/0.0, NaN for identities without any trial), e.g. for a bootstrap over identities.

    For every existing pair i < j the directed margins are
    d_{i->j} = s(p_i,p_j) - s(p_i,n_i) (if n_i exists) and d_{j->i} = s(p_i,p_j) - s(p_j,n_j)
    (if n_j exists): up to 2*C(P,2) trials per identity (6 for P = 3). A trial wins iff its margin
    is > 0. SSR = share of identities *with at least one trial* whose every trial wins.
    ``pa_strict`` = wins / trials over all identities (micro-pooled); ``pa`` = the authors' PA, which
    adds one trial per identity with a trial (won iff the mean of its margins is > 0; module
    docstring): (wins + overall wins) / (trials + identities with a trial).

    Returns:
        dict with ``ssr``, ``pa``, ``pa_strict`` (NaN when nothing can be scored), ``n_identities``
        (with >= 1 trial), ``n_trials`` (directed margins), ``n_wins``, ``n_overall_wins``,
        ``n_pa_trials`` (``pa``'s denominator), ``n_success`` (+ per-identity ``wins``, ``trials``
        of the directed margins, ``success`` and ``margins`` [N, 2C]).
    """
    ps = to_np(pos_sim, "pos_sim")
    ds = to_np(dist_sim, "dist_sim")
    if ps.ndim != 3 or ps.shape[1] != ps.shape[2]:
        raise ValueError(f"ssr_pa: pos_sim must be [N,P,P], got {ps.shape}")
    if ds.shape != ps.shape[:2]:
        raise ValueError(f"ssr_pa: dist_sim must be [N,P] = {ps.shape[:2]}, got {ds.shape}")
    if np.isinf(ps).any() or np.isinf(ds).any():
        raise ValueError("ssr_pa: infinite similarity (use NaN for missing entries)")
    iu, ju = np.triu_indices(ps.shape[1], k=1)            # the C(P,2) pairs i < j
    pair = ps[:, iu, ju]                                  # [N, C] s(p_i, p_j)
    # [N, 2C]: first all i->j margins, then all j->i margins; NaN propagates to missing trials
    margins = np.concatenate([pair - ds[:, iu], pair - ds[:, ju]], axis=1)
    return ssr_pa_from_margins(margins, per_identity)


def nearid_similarities(pos_emb, dist_emb, pos_mask=None, dist_mask=None):
    """Cosine ``pos_sim`` [N,P,P] and ``dist_sim`` [N,P] for :func:`ssr_pa` from embeddings.

    Args:
        pos_emb: [N, P, D] embeddings of the positive views (need not be normalised).
        dist_emb: [N, P, D]; ``dist_emb[n, i]`` is the distractor in p_i's background.
        pos_mask, dist_mask: optional [N, P] bool, True = present. Without a mask, a view is
            missing iff its embedding row is all-NaN. A present row must be finite and non-zero.

    Returns:
        ``(pos_sim, dist_sim)`` float64 with NaN wherever an involved image is missing.
    """
    pe = to_np(pos_emb, "pos_emb")
    de = to_np(dist_emb, "dist_emb")
    if pe.ndim != 3 or de.shape != pe.shape:
        raise ValueError(f"nearid_similarities: need pos_emb and dist_emb [N,P,D] of equal shape, "
                         f"got {pe.shape} and {de.shape}")

    def present(emb, mask, name):
        if mask is None:
            return ~np.isnan(emb).all(axis=-1)
        m = np.asarray(mask, dtype=bool)
        if m.shape != emb.shape[:2]:
            raise ValueError(f"{name}: mask shape {m.shape} != {emb.shape[:2]}")
        return m

    pm, dm = present(pe, pos_mask, "pos_mask"), present(de, dist_mask, "dist_mask")

    def normalise(emb, m, name):
        out = np.full_like(emb, np.nan)
        x = emb[m]                                         # [M, D] present rows only
        bad = ~np.isfinite(x).all(axis=1) | (np.linalg.norm(np.nan_to_num(x), axis=1) == 0)
        if bad.any():
            n, i = np.argwhere(m)[np.argmax(bad)]
            raise ValueError(f"{name}: identity {n}, view {i} is marked present but its embedding "
                             "is non-finite or zero")
        out[m] = x / np.linalg.norm(x, axis=1, keepdims=True)
        return out

    pn, dn = normalise(pe, pm, "pos_emb"), normalise(de, dm, "dist_emb")
    pos_sim = np.einsum("npd,nqd->npq", pn, pn)          # NaN rows give NaN similarities
    dist_sim = np.einsum("npd,npd->np", pn, dn)
    return pos_sim, dist_sim


def pool_sources(results: Mapping[str, Mapping], sources: Iterable[str] | None = None,
                 pa_weight: str = "trials") -> dict:
    """Support-weighted pooling of per-source :func:`ssr_pa` results (NearID Table 1 / Table 5).

    SSR is weighted by each source's ``n_identities`` and PA by its trials (default): ``pa`` by
    ``n_pa_trials`` (its own denominator; ``n_trials`` for a result without it, e.g. a table of
    values) and ``pa_strict`` by ``n_trials``, which is exactly the micro-pooled SSR/PA over the
    union of all trials, as the authors pool their table (support-weighted by ``PA_trials``);
    ``pa_weight="identities"`` weights PA by ``n_identities`` instead (what a table-of-averages with
    per-source ``n`` does).
    With equal support per source (the released test split: 500 identities each) both reduce to the
    plain mean the paper's "Avg." rows show. Sources with zero support contribute nothing.

    Args:
        results: {source: dict from ssr_pa}.
        sources: the subset to pool (default: all); an unknown name is an error.
    Returns:
        dict ``ssr``, ``pa``, ``n_identities``, ``n_trials``, ``n_pa_trials``, ``n_sources``, and
        ``pa_strict`` when every pooled result has it.
    """
    names = list(results) if sources is None else list(sources)
    missing = [s for s in names if s not in results]
    if missing:
        raise ValueError(f"pool_sources: unknown sources {missing}; have {sorted(results)}")
    if not names:
        raise ValueError("pool_sources: no sources to pool")
    if pa_weight not in ("trials", "identities"):
        raise ValueError(f"pool_sources: pa_weight must be 'trials' or 'identities', got {pa_weight!r}")
    strict = all("pa_strict" in results[s] for s in names)
    ssr_num = pa_num = st_num = w_id = w_pa = w_st = 0.0
    n_tr = n_pa = 0
    for s in names:
        r = results[s]
        ni, nt = int(r["n_identities"]), int(r["n_trials"])
        npa = int(r.get("n_pa_trials", nt))
        if ni > 0:
            ssr_num += ni * float(r["ssr"])
            w_id += ni
        if npa > 0:
            w = npa if pa_weight == "trials" else ni
            pa_num += w * float(r["pa"])
            w_pa += w
        if strict and nt > 0:
            w = nt if pa_weight == "trials" else ni
            st_num += w * float(r["pa_strict"])
            w_st += w
        n_tr += nt
        n_pa += npa
    out = {
        "ssr": ssr_num / w_id if w_id else float("nan"),
        "pa": pa_num / w_pa if w_pa else float("nan"),
        "n_identities": int(w_id),
        "n_trials": n_tr,
        "n_pa_trials": n_pa,
        "n_sources": len(names),
    }
    if strict:
        out["pa_strict"] = st_num / w_st if w_st else float("nan")
    return out


def source_breakdown(results: Mapping[str, Mapping], groups: Mapping[str, Sequence[str]] | None = None,
                     pa_weight: str = "trials"):
    """Per-source rows plus pooled group rows (NearID Table 5) as a pandas DataFrame.

    ``groups`` maps a row label (e.g. "Avg. (training, 4)", "Avg. (unseen fill, 3)",
    "Avg. (all 7, main)") to the sources it pools; columns: ``row``, ``kind`` (source|group),
    ``ssr``, ``pa``, ``pa_strict`` (NaN for a result without it), ``n_identities``, ``n_trials``,
    ``n_pa_trials``, ``n_sources``.
    """
    rows = []
    for s, r in results.items():
        rows.append({"row": s, "kind": "source", "ssr": float(r["ssr"]), "pa": float(r["pa"]),
                     "pa_strict": float(r.get("pa_strict", np.nan)),
                     "n_identities": int(r["n_identities"]), "n_trials": int(r["n_trials"]),
                     "n_pa_trials": int(r.get("n_pa_trials", r["n_trials"])), "n_sources": 1})
    for g, members in (groups or {}).items():
        rows.append({"row": g, "kind": "group", **pool_sources(results, members, pa_weight)})
    return pd.DataFrame(rows)
