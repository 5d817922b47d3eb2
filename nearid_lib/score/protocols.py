"""The three protocols of :func:`nearid_lib.score.score_encoder`, each over a list of
:class:`~nearid_lib.score.participants.Participant` (the scored encoder first, then the baselines). Every number
comes from the library code the notebooks use: NearID-bench (notebook 04), selective sensitivity
(notebook 10) or, without edit grids, ID-Sim's public benchmarks (notebook 09), Finer-Personalization
Rank (notebook 11)."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

import pandas as pd

from ..features import FeatureStore
from ..fpr import load_fpr_split, read_generated, simulate_methods
from ..fpr.experiments import prepare_data
from ..fpr.experiments import run_fpr as fpr_protocol
from ..idsim.released import load_benchmarks, public_scores
from ..idsim.sensitivity import run_sensitivity
from ..nearid.bench import run_bench
from ..nearid.tables import table1, table5, table7
from ..paths import cache_dir
from ..runtime.seeding import make_rng
from .participants import Participant

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["run_nearid", "run_idsim", "run_idsim_public", "run_fpr"]


def run_nearid(parts: Sequence[Participant], cfg: Profile, data: NearIDData) -> dict[str, Any]:
    """NearID-bench (:func:`~nearid_lib.nearid.bench.run_bench`, as notebook 04) for every
    participant with an embedder: ``table1`` (full image, main
    sources), ``table7`` (full vs foreground only), ``per_source`` (Table 5 long form, each
    variant), ``results`` (the :class:`~nearid_lib.nearid.evaluate.EncoderResult` list) and ``keys``."""
    bench = run_bench([p.embedder for p in parts], data, cfg)
    results, groups, variants = bench.results, bench.groups, bench.variants
    t5 = pd.concat([table5(results, groups, cfg.name, v).assign(variant=v) for v in variants], ignore_index=True)
    label = {r.label: p.key for r, p in zip(results, parts)}
    t5.insert(0, "encoder", t5.ours_label.map(label))
    return {"keys": [p.key for p in parts], "results": results, "groups": groups,
            "table1": table1(results, groups, cfg.name),
            "table7": table7(results, groups, cfg.name) if "fg" in variants else None, "per_source": t5}


def run_idsim(parts: Sequence[Participant], cfg: Profile, data: NearIDData, seed: int,
              notes: list[str]) -> dict[str, Any]:
    """Selective sensitivity on the edit grids (:func:`~nearid_lib.idsim.sensitivity.run_sensitivity`,
    as notebook 10): per-anchor OLS slopes and a seeded bootstrap over anchors
    (``cfg.idsim.n_bootstrap`` resamples) per participant."""
    grids = data.grids
    if grids is None or not len(grids):
        notes.append("ID-Sim: the dataset has no edit grids (grids.csv); sensitivity not scored")
        return {}
    rels, masks = grids["path"].tolist(), grids["mask"].tolist()
    emb: dict[str, dict] = {}
    seeded: dict[str, dict[int, dict]] = {}
    for p in parts:
        e = dict(zip(rels, p.grid_embed(data, rels, masks)))
        if p.seed is None:
            emb[p.key] = e
        else:                           # a trained encoder's seeds: regressed apart, then averaged
            seeded.setdefault(p.key, {})[int(p.seed)] = e
    res = run_sensitivity(grids, emb, cfg.idsim.n_bootstrap, make_rng(seed, "score-sensitivity"),
                          seeded=seeded or None)
    return {"summary": res.summary, "wide": res.wide, "sims": res.sims}


def run_idsim_public(parts: Sequence[Participant], cfg: Profile, notes: list[str]) -> dict[str, dict[str, float]]:
    """ID-Sim's public benchmarks (Subjects2k AP, DreamBench++ Spearman), as notebook 09 scores them
    (:func:`~nearid_lib.idsim.released.public_scores`), for every participant: ``{key: {"idsim_<metric>":
    value}}``; a benchmark that cannot be read goes to ``notes`` with its reason."""
    s2k, _, pairs, missing = load_benchmarks(cfg)
    notes += [f"ID-Sim {k}: {v}" for k, v in missing.items()]
    return {p.key: {f"idsim_{k}": float(v) for k, v in
                    public_scores(p.model, s2k, pairs, cfg.idsim.eval_batch_size).items()}
            for p in parts}


def _fpr_data(cfg: Profile, data: NearIDData):
    """``(split, generated)``: the world's galleries and its simulated generators (procedural
    profiles, rendered once into ``<data>/fpr/generated``), or the released galleries (paper)."""
    if cfg.world.source != "procedural":
        split, gen, _ = prepare_data(cfg)
        return split, gen
    split = load_fpr_split(data.root / "fpr")
    gen = read_generated(simulate_methods(cfg, data.root, cfg.retrieval.methods, cfg.retrieval.n_generated_per_id))
    return split, gen


def run_fpr(parts: Sequence[Participant], cfg: Profile, data: NearIDData, batch_size: int, progress: bool,
            cache: bool, notes: list[str]) -> dict[str, Any]:
    """Finer-Personalization Rank (:func:`~nearid_lib.fpr.experiments.run_fpr`, as notebook 11) for
    every participant: ``oracle`` (references as queries, FPR
    Table 1: mAP and similarity over all groups), ``methods`` (per simulated generator: mAP, sim,
    top-1, AUC, nDCG, true drift) and ``agreement`` (per encoder, the mean per-identity Spearman rho
    of mAP and of similarity with the negative true drift: which metric ranks generators right)."""

    if cfg.world.source == "procedural" and data.fpr_gallery is None:
        notes.append("FPR: the dataset has no galleries (fpr/gallery_data.csv); not scored")
        return {}
    split, gen = _fpr_data(cfg, data)
    ec = FeatureStore(cache_dir(cfg.name) / "retrieval" if cache else None)
    cfg = replace(cfg, retrieval=replace(cfg.retrieval, batch_size=batch_size))
    res = fpr_protocol({p.tag: p.model for p in parts}, split, gen, cfg, ec, progress=progress)
    oracle = res.oracle[res.oracle.group == "all"].drop(columns="dataset").reset_index(drop=True)
    methods = res.main.drop(columns="dataset").assign(label=res.main.encoder.map({p.tag: p.label for p in parts}))
    # the agreement needs a true drift (the procedural world's simulated generators): empty on the
    # released galleries, None without generated images
    agreement = res.agreement.drop(columns=["names", "rhos"]) if res.agreement is not None else None
    return {"oracle": oracle, "methods": methods, "agreement": agreement,
            "per_query": res.per_query, "keys": {p.tag: p.key for p in parts}}
