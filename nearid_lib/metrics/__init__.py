"""Evaluation metrics of the three papers: retrieval mAP (FPR, ID-Sim), SSR/PA (NearID),
Fisher-z aggregation of correlations, MTG metric-to-oracle / SSR / PA, DreamBench++ metric-to-human,
and the ID-Sim benchmark metrics (verification AP / ROC-AUC, nDCG, rank correlations, triplet accuracy).

Conventions (shared by every function here):
- Inputs may be numpy arrays, torch tensors or lists; everything is computed in float64 numpy.
- Similarities are cosine similarities; embeddings are L2-normalised here, so callers may pass raw ones.
- Missing data is NaN (never a zero pad): a padded zero image would otherwise look like a real view.
- Bad input raises ``ValueError`` naming the offending index / field; nothing is silently dropped.

One module per family, everything re-exported here (``from nearid_lib.metrics import ssr_pa``):
:mod:`.retrieval` (mAP), :mod:`.nearid` (SSR/PA and pooling over sources), :mod:`.mtg` (part-level
metrics), :mod:`.correlation` (Pearson, Fisher-z, metric-to-human), :mod:`.idsim` (ID-Sim benchmark
metrics).
"""
from __future__ import annotations

from ._arrays import cosine_similarity_matrix
from .correlation import MH_COLUMNS, fisher_z_mean, metric_to_human, metric_to_human_groups, pearson
from .idsim import ndcg, rank_correlations, subjects2k_ap, triplet_accuracy, verification_ap, verification_auc
from .mtg import mtg_metrics, mtg_ssr_pa
from .nearid import nearid_similarities, pool_sources, source_breakdown, ssr_pa
from .retrieval import average_precision, random_ranking_ap, retrieval_map

__all__ = [
    "retrieval_map",
    "average_precision",
    "random_ranking_ap",
    "cosine_similarity_matrix",
    "ssr_pa",
    "nearid_similarities",
    "pool_sources",
    "source_breakdown",
    "fisher_z_mean",
    "pearson",
    "mtg_metrics",
    "mtg_ssr_pa",
    "metric_to_human",
    "metric_to_human_groups",
    "MH_COLUMNS",
    "verification_ap",
    "verification_auc",
    "ndcg",
    "rank_correlations",
    "triplet_accuracy",
    "subjects2k_ap",
]
