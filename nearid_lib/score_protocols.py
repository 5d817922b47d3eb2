"""The three protocols of :func:`nearid_lib.score.score_encoder`, each over a list of
:class:`~nearid_lib.score.Participant` (the scored encoder first, then the baselines). Every number
comes from the library code the notebooks use: NearID-bench (notebook 04), selective sensitivity
(notebook 10), Finer-Personalization Rank (notebook 11)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import pandas as pd

from .nearid.embedder import group_items, image_groups
from .nearid.evaluate import evaluate_encoder, source_groups
from .nearid.pairs import grid_pairs
from .nearid.tables import table1, table5, table7
from .paths import cache_dir
from .seeding import make_rng

if TYPE_CHECKING:
    from .config import Profile
    from .data import NearIDData
    from .score import Participant

__all__ = ["run_nearid", "run_idsim", "run_fpr", "prefetch"]


def prefetch(p: Participant, data: NearIDData, split: str, variants: Sequence[str], grid: pd.DataFrame | None) -> None:
    """Embed every image the NearID protocol reads, in one pass per variant (one progress bar):
    the feature caches of a library encoder, the embedding store of a callable."""
    from .score import StoreEmbedder

    emb = p.bench.embedder
    groups = image_groups(data, splits=(split,))
    if not isinstance(emb, StoreEmbedder):
        emb.build(groups, variants)
        return
    for v in variants:
        rels, masks = [], []
        for g in groups:
            r, m = group_items(data, g)
            rels += r
            masks += m
        if v == "full" and grid is not None and len(grid):
            rels += list(grid["ref"]) + list(grid["img"])
            masks += list(grid["ref_mask"]) + list(grid["mask"])
        emb.ensure(rels, masks, v)


def run_nearid(parts: Sequence[Participant], cfg: Profile, data: NearIDData) -> dict[str, Any]:
    """NearID-bench for every participant with a bench encoder: ``table1`` (full image, main
    sources), ``table7`` (full vs foreground only), ``per_source`` (Table 5 long form, each
    variant), ``results`` (the :class:`~nearid_lib.nearid.evaluate.EncoderResult` list) and ``keys``."""
    split = cfg.eval.split
    variants = ("full", "fg") if cfg.eval.fg_only else ("full",)
    groups = source_groups(data.sources, data.train_sources)
    grid = grid_pairs(data, split) if cfg.eval.dbpp_standin else None
    results = []
    for p in parts:
        prefetch(p, data, split, variants, grid)
        results.append(evaluate_encoder(p.bench, data, split, variants, grid=grid))
    t5 = pd.concat([table5(results, groups, cfg.name, v).assign(variant=v) for v in variants], ignore_index=True)
    label = {r.label: p.key for r, p in zip(results, parts)}
    t5.insert(0, "encoder", t5.ours_label.map(label))
    return {"keys": [p.key for p in parts], "results": results, "groups": groups,
            "table1": table1(results, groups, cfg.name),
            "table7": table7(results, groups, cfg.name) if "fg" in variants else None, "per_source": t5}


def run_idsim(parts: Sequence[Participant], cfg: Profile, data: NearIDData, seed: int,
              notes: list[str]) -> dict[str, Any]:
    """Selective sensitivity on the edit grids (every grid, as notebook 10): per-anchor OLS slopes and
    a seeded bootstrap over anchors (``cfg.idsim.n_bootstrap`` resamples) per participant."""
    from .idsim.sensitivity import grid_similarities, per_anchor_sensitivity, sensitivity_summary

    grids = data.grids
    if grids is None or not len(grids):
        notes.append("ID-Sim: the dataset has no edit grids (grids.csv); sensitivity not scored")
        return {}
    rels, masks = grids["path"].tolist(), grids["mask"].tolist()
    emb = {p.key: dict(zip(rels, p.grid_embed(data, rels, masks))) for p in parts}
    sims = grid_similarities(grids, emb)
    _, wide = per_anchor_sensitivity(sims)
    summary = sensitivity_summary(wide, cfg.idsim.n_bootstrap, make_rng(seed, "score-sensitivity"))
    return {"summary": summary, "wide": wide, "sims": sims}


def _fpr_data(cfg: Profile, data: NearIDData):
    """``(split, generated)``: the world's galleries and its simulated generators (procedural
    profiles, rendered once into ``<data>/fpr/generated``), or the released galleries (paper)."""
    from .fpr import load_fpr_split, read_generated, simulate_methods
    from .fpr.experiments import prepare_data

    if cfg.world.source != "procedural":
        split, gen, _ = prepare_data(cfg)
        return split, gen
    split = load_fpr_split(data.root / "fpr")
    gen = read_generated(simulate_methods(cfg, data.root, cfg.retrieval.methods, cfg.retrieval.n_generated_per_id))
    return split, gen


def run_fpr(parts: Sequence[Participant], cfg: Profile, data: NearIDData, batch_size: int, progress: bool,
            cache: bool, notes: list[str]) -> dict[str, Any]:
    """Finer-Personalization Rank for every participant: ``oracle`` (references as queries, FPR
    Table 1: mAP and similarity over all groups), ``methods`` (per simulated generator: mAP, sim,
    top-1, AUC, nDCG, true drift) and ``agreement`` (per encoder, the mean per-identity Spearman rho
    of mAP and of similarity with the negative true drift: which metric ranks generators right)."""
    from .fpr import EmbeddingCache, oracle_scores, rank_generator
    from .fpr.experiments import per_identity_agreement

    if cfg.world.source == "procedural" and data.fpr_gallery is None:
        notes.append("FPR: the dataset has no galleries (fpr/gallery_data.csv); not scored")
        return {}
    split, gen = _fpr_data(cfg, data)
    ec = EmbeddingCache(cache_dir(cfg.name) / "retrieval" if cache else None)
    gb = cfg.retrieval.group_by
    oracle, methods, per_query = [], [], []
    for p in parts:
        o = oracle_scores(p.model, split.train, split.gallery, gb, ec, batch_size)
        oracle.append(o[o.group == "all"].assign(encoder=p.key))
        res = rank_generator(gen, split.gallery, p.model, references=split.train, group_by=gb, cache_dir=ec,
                             batch_size=batch_size, progress=progress)
        s = res.summary.assign(encoder=p.key, label=p.label)
        if "drift" in gen.columns:
            s["drift"] = s.method.map(gen.drop_duplicates("method").set_index("method")["drift"])
        methods.append(s)
        per_query.append(res.per_query.assign(encoder=p.key))
    pq = pd.concat(per_query, ignore_index=True)
    agree = pd.concat([per_identity_agreement(pq, m).drop(columns=["names", "rhos"]) for m in ("ap", "sim")],
                      ignore_index=True)
    return {"oracle": pd.concat(oracle, ignore_index=True), "methods": pd.concat(methods, ignore_index=True),
            "agreement": agree, "per_query": pq}
