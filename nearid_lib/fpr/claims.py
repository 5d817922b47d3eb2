"""The four claims of the FPR reproduction (notebook 11). Claim 1 compares rank correlations over
a handful of methods (point values); claims 2-4 are declared in :data:`FPR_CLAIMS` and judged on
paired 95% bootstrap intervals over subjects (see :mod:`nearid_lib.claims`), from per-query APs.

Quantities: ``<role>.<measure>`` with ``<role>`` = ``specialised`` (the NearID head in mini; MiewID /
BioCLIP / SP-Cars in the paper) or ``general`` (the frozen backbone; CLIP / DINO), and measures
``copy_paste.map`` (per-query AP of the copy-paste method), ``oracle.map`` (per-reference AP of the
real reference images: the most a generation can reach), ``bg_kept.map`` / ``bg_removed.map``
(oracle APs with backgrounds kept / removed) and ``agree`` (per-subject Spearman rho between the
methods' mean AP and their negative true drift). Units are subjects (``name``)."""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from ..claims import (
    CLAIM_REPLICATES,
    AtLeast,
    ClaimSpec,
    Evidence,
    Greater,
    PaperRef,
    RatioAtLeast,
    Within,
    claim,
    evaluate_claim,
    evaluate_claims,
    pool_seeds,
    with_earlier,
)
from .analysis import drift_agreement, spread

__all__ = ["FPR_CLAIMS", "retrieval_evidence", "retrieval_claims", "specialised_evidence"]

T14 = "fpr_table14_bg_removal"
# Claims 1 and 2 were re-declared twice. v1 (first commits): claim 1 on the specialised encoder over
# all methods (rho and spread strictly larger), claim 2 copy-paste mAP >= 0.9 as a point value. v2
# (after v1's results): claim 1 on the general encoder over the context-'new' methods with
# rho_mAP >= rho_sim, claim 2 copy-paste >= 0.9 x the oracle's mAP. v3 (from the paper's words,
# declared after v2's results were published in the report): both below. The
# report keeps the v1 and v2 verdicts, judged on the same run, beside v3's (``with_earlier``).
REVISION_1 = ("v3 restates Fig. 3's caption: the gallery protocol 'more clearly reveals identity drift of "
              "these models compared with the overall high similarity scores', for the general encoders "
              "(CLIP, DINO) and all seven models, including those that keep the reference's layout and "
              "background (the zebra case of Sec. 4.3, which v2's context-'new' subset removed); v2's >= "
              "decided nothing when both rank correlations were 1.00, so v3 asks for strictly better")
REVISION_2 = ("v3 restates Fig. 6: 'almost perfect identity preservation scores' is a statement about the "
              "score itself; v2's ratio to the oracle is near-tautological when copy-paste pastes the "
              "reference's own pixels (it is the oracle's query up to the paste)")
# In mini the copy-paste method pastes the reference's own object pixels onto a new background
# (nearid_lib.fpr.methods, context "paste"): a claim on its mAP is decided by construction there, a
# fact of the world keyed by quantity (nearid_lib.claims.world_facts.COPY_PASTE), not of one claim.
_FPR2_V2 = ClaimSpec("fpr.2.v2", "FPR", "copy-paste >= 0.9 x oracle",
                     RatioAtLeast("specialised.copy_paste.map", "specialised.oracle.map", 0.9), "")
FPR_CLAIMS: tuple[ClaimSpec, ...] = (
    ClaimSpec("fpr.2", "FPR", "2. Copy-pasting the reference gets an almost perfect identity score: "
              "mAP of at least 0.9",
              AtLeast("specialised.copy_paste.map", 0.9),
              "'Copy-pasting objects can receive almost perfect identity preservation scores' (Fig. 6, Sec. 5.1)",
              evidence_note="per-query AP, specialised encoder"),
    ClaimSpec("fpr.3", "FPR", "3. An identity-specialised encoder ranks methods closer to the true drift "
              "than a general encoder", Greater("specialised.agree", "general.agree", 0.0),
              "specialised models 'faithfully uncover variations' (Sec. 4.3)",
              evidence_note="per-subject Spearman rho of method mAP vs -drift (paired over subjects)"),
    ClaimSpec("fpr.4", "FPR", "4. Removing backgrounds changes the specialised encoder's mAP little (within 0.05)",
              Within("specialised.bg_removed.map", "specialised.bg_kept.map", 0.05),
              "Re-ID MiewID {0:.3f} -> {1:.3f} (Table 14)",
              (PaperRef(T14, (("dataset", "Re-ID"), ("background", "kept")), "miewid_map"),
               PaperRef(T14, (("dataset", "Re-ID"), ("background", "removed")), "miewid_map")),
              evidence_note="oracle per-reference AP, backgrounds kept vs removed (paired over subjects)"),
)


def _ap_evidence(pq: pd.DataFrame, label: str) -> Evidence | None:
    return Evidence("mean:ap", pd.DataFrame({"unit": pq.name.astype(str).to_numpy(), "ap": pq.ap.to_numpy(float)}),
                    label, bounds=(0.0, 1.0)) if len(pq) else None


def retrieval_evidence(per_query: pd.DataFrame, agreement: pd.DataFrame, roles: Mapping[str, str],
                       oracle_pq: pd.DataFrame | None = None, bg_pq: pd.DataFrame | None = None
                       ) -> dict[str, Evidence]:
    """Evidence of :data:`FPR_CLAIMS` for the encoders named by ``roles`` (role -> encoder)."""
    out: dict[str, Evidence] = {}
    for role, enc in roles.items():
        parts = {"copy_paste.map": per_query[(per_query.encoder == enc) & (per_query.method == "copy_paste")]}
        if oracle_pq is not None:
            parts["oracle.map"] = oracle_pq[oracle_pq.encoder == enc]
        if bg_pq is not None:
            for b in ("kept", "removed"):
                parts[f"bg_{b}.map"] = bg_pq[(bg_pq.encoder == enc) & (bg_pq.background == b)]
        for m, pq in parts.items():
            ev = _ap_evidence(pq, f"{enc} {m}")
            if ev is not None:
                out[f"{role}.{m}"] = ev
        a = agreement[agreement.encoder == enc] if len(agreement) else agreement
        if len(a) and "names" in a.columns:
            out[f"{role}.agree"] = Evidence("mean:rho", pd.DataFrame(
                {"unit": [str(n) for n in a.names.iloc[0]], "rho": np.asarray(a.rhos.iloc[0], float)}), f"{enc} agree",
                chance=0.0, bounds=(-1.0, 1.0))
    return out


def specialised_evidence(ev: Mapping[str, Evidence], encoder: str,
                         seed_runs: Mapping[int, Mapping[str, pd.DataFrame | None]], own_seed: int = 0
                         ) -> dict[str, Evidence]:
    """``ev`` with each ``specialised.*`` quantity pooled over training seeds (:func:`pool_seeds`):
    ``own_seed``'s evidence (in ``ev``) and that of every run in ``seed_runs`` ({seed: per_query,
    agreement, oracle_pq, bg_pq} of ``encoder``). Raises ValueError when a seed lacks a quantity
    the others have."""
    per = {int(own_seed): {k: v for k, v in ev.items() if k.startswith("specialised.")}}
    for s, r in seed_runs.items():
        if int(s) in per:
            raise ValueError(f"specialised_evidence: seed {s} is the own seed and in seed_runs")
        per[int(s)] = retrieval_evidence(r["per_query"], r["agreement"], {"specialised": encoder},
                                         r.get("oracle_pq"), r.get("bg_pq"))
    return {**ev, **pool_seeds(per)}


def retrieval_claims(main: pd.DataFrame, agreement: pd.DataFrame, specs, profile: str, per_query: pd.DataFrame,
                     oracle_pq: pd.DataFrame | None = None, bg_pq: pd.DataFrame | None = None,
                     rng: np.random.Generator | None = None, n_boot: int = CLAIM_REPLICATES,
                     general: str = "efficientnet-lite0", specialised: str = "nearid",
                     seed_runs: Mapping[int, Mapping[str, pd.DataFrame | None]] | None = None,
                     own_seed: int = 0) -> pd.DataFrame:
    """The four claims of the FPR reproduction (``verdict`` from numbers, never typed in).

    1. (v3) "the gallery protocol more clearly reveals identity drift than the overall high
       similarity scores" (Fig. 3) is about a *general* encoder (the paper's CLIP/DINO) over every
       method: holds when mAP's rank correlation with -drift is strictly larger than similarity's
       and its relative spread is larger (point values: a rank correlation over a handful of
       methods has no useful interval). The v1 and v2 criteria's verdicts are kept beside it.
    2.-4. :data:`FPR_CLAIMS`, from the per-query APs of the main comparison (``per_query``), the
       oracle (``oracle_pq``) and the background ablation (``bg_pq``) and the per-subject agreement.
       ``seed_runs`` ({seed: those four for the specialised encoder},
       :func:`~nearid_lib.fpr.seeds.specialised_seed_runs`): the specialised encoder's other training
       seeds; its quantities are then averaged over ``own_seed`` and them, and the intervals carry
       the seeds' spread (:func:`specialised_evidence`)."""
    avail = set(main.encoder)
    rows = []
    if "drift" not in main.columns or general not in avail:
        # real generators have no known drift (nor a copy-paste method): the claims cannot be computed
        row = claim("Gallery mAP orders methods by true drift (simulated methods only)", "Fig. 3",
                    "not measured", False, "no true drift in generated_data.csv (real generators) "
                    f"or general encoder {general!r} unavailable", profile)
        return pd.DataFrame([{**row, "verdict": "not testable"}])
    # 1. the general encoder's mAP reveals drift more clearly than its similarity (v3: all methods;
    #    v1 and v2 judged beside it)
    def over(enc, d):
        d = d[d.encoder == enc]
        return dict(rho_map=drift_agreement(d["map"], d.drift), rho_sim=drift_agreement(d.sim, d.drift),
                    spread_map=spread(d["map"]), spread_sim=spread(d.sim))

    def better(r, strict=True):
        rho = r["rho_map"] > r["rho_sim"] if strict else r["rho_map"] >= r["rho_sim"]
        rho = rho or (np.isnan(r["rho_sim"]) and not np.isnan(r["rho_map"]))
        return bool(rho and r["spread_map"] > r["spread_sim"])

    new_ctx = main[main.context == "new"] if "context" in main.columns else main
    encs = main.encoder.unique()
    res = {enc: over(enc, new_ctx) for enc in encs}                  # v2's subset
    alls = {enc: over(enc, main) for enc in encs}                    # every method
    details = [f"{enc} (context 'new': {', '.join(new_ctx[new_ctx.encoder == enc].method)}): "
               f"rho(mAP,-drift)={res[enc]['rho_map']:.2f} rho(sim,-drift)={res[enc]['rho_sim']:.2f} "
               f"spread mAP={res[enc]['spread_map']:.2f} sim={res[enc]['spread_sim']:.2f}; all methods: "
               f"rho(mAP)={alls[enc]['rho_map']:.2f} rho(sim)={alls[enc]['rho_sim']:.2f}" for enc in encs]
    r = alls[general]                                                # v3: general encoder, all methods
    v1_enc = specialised if specialised in avail else general
    v1, v2 = alls[v1_enc], res[general]
    verdict = lambda ok: "holds" if ok else "does not hold"          # noqa: E731
    rows.append(with_earlier(claim(
        "1. A general encoder's gallery mAP reveals the methods' identity drift more clearly than its "
        "pairwise similarity: it orders all methods by true drift better and separates them more",
        "'more clearly reveals identity drift ... compared with the overall high similarity scores' (Fig. 3)",
        f"{general}, all methods: rho_mAP={r['rho_map']:.2f} vs rho_sim={r['rho_sim']:.2f}; spread "
        f"{r['spread_map']:.2f} vs {r['spread_sim']:.2f}",
        better(r), "; ".join(details), profile),
        [("v1", f"{v1_enc}, all methods, rho and spread larger (rho {v1['rho_map']:.2f} vs {v1['rho_sim']:.2f}, "
                f"spread {v1['spread_map']:.2f} vs {v1['spread_sim']:.2f})", verdict(better(v1))),
         ("v2 (1dc7a21)", f"{general}, context 'new', rho >=, spread larger (rho {v2['rho_map']:.2f} vs "
                          f"{v2['rho_sim']:.2f}, spread {v2['spread_map']:.2f} vs {v2['spread_sim']:.2f})",
          verdict(better(v2, strict=False)))], REVISION_1))
    notes = {s.name: s.note for s in specs}
    roles = {r: e for r, e in (("specialised", specialised), ("general", general)) if e in avail}
    ev = retrieval_evidence(per_query, agreement, roles, oracle_pq, bg_pq)
    if seed_runs and "specialised" in roles:
        ev = specialised_evidence(ev, specialised, seed_runs, own_seed)
    declared = evaluate_claims(FPR_CLAIMS, ev, rng if rng is not None else np.random.default_rng(0), n_boot,
                               profile=profile)
    rng2 = np.random.default_rng(1)
    for i in np.flatnonzero(declared["key"].to_numpy() == "fpr.2"):
        cp = ev.get("specialised.copy_paste.map")
        point = cp.point() if cp is not None else float("nan")
        v2row = evaluate_claim(_FPR2_V2, ev, rng2, n_boot, profile=profile)
        earlier = [("v1", f"copy-paste mAP >= 0.9 as a point value ({point:.3f})",
                    verdict(point >= 0.9) if np.isfinite(point) else "not testable"),
                   ("v2 (1dc7a21)", f"copy-paste mAP >= 0.9 x oracle mAP ({v2row['ours']})", v2row["verdict"])]
        row = with_earlier(declared.iloc[i].to_dict(), earlier, REVISION_2)
        for k, v in row.items():
            declared.loc[declared.index[i], k] = v
    if specialised not in avail:
        declared["detail"] = declared["detail"] + f" ({specialised} unavailable: {notes.get(specialised, 'not configured')})"
    return pd.concat([pd.DataFrame(rows), declared], ignore_index=True)
