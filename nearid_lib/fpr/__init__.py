"""Finer-Personalization Rank (Kilrain, Carlyn et al.): gallery retrieval (mAP) to judge identity
preservation of personalized generators.

One call scores a user's generator::

    from nearid_lib.fpr import rank_generator
    res = rank_generator("my_method/generated_data.csv", "fpr/gallery_data.csv", encoder="dinov2-base")
    res.summary        # per method: map, sim, top1, auc, ndcg, n_queries

Modules: :mod:`.layout` (the CSV layout: reading, validation, writing), :mod:`.datasets` (the paper's
dataset builders, gallery sampling), :mod:`.downloads` (the paper's galleries from the published
CUB-200-2011 / WildlifeReID-10k / Stanford Cars layouts and the user's generated-image folders), :mod:`.encoders` (evaluation encoders, embedding cache, the
feature classifier), :mod:`.protocol` (scoring), :mod:`.methods` (simulated personalization methods
with known drift, ``mini``), :mod:`.analysis` (agreement with the true drift), :mod:`.experiments`
and :mod:`.ablations` (the notebook's tables), :mod:`.claims`, :mod:`.figures`, :mod:`.reproduction`
(notebook 11's stages over them, one function per stage).
"""
from ..data.fpr_layout import (
                       FPR_COLUMNS,
                       FPRLayoutError,
                       FPRSplit,
                       check_disjoint,
                       load_fpr_split,
                       read_fpr_table,
                       read_generated,
                       resolve_paths,
                       write_fpr_table,
)
from .analysis import drift_agreement, spread
from .datasets import (
                       CUB_GROUPS,
                       N_CARS_MODELS,
                       WILDLIFE_SPECIES,
                       build_cars_split,
                       build_cub_split,
                       build_wildlife_split,
                       sample_gallery,
                       split_reference_gallery,
)
from .encoders import (
                       FeatureClassifier,
                       FeatureStore,
                       RemoteCodeError,
                       embed_images,
                       encoder_fingerprint,
                       remove_background,
                       train_feature_classifier,
)
from .methods import DEFAULT_METHODS, fpr_identity, render_generated, simulate_methods
from .protocol import (
                       RankResult,
                       clip_t,
                       load_gallery,
                       oracle_scores,
                       rank_generator,
                       score_embeddings,
                       summarise,
                       top_k_lists,
)

__all__ = [
    "rank_generator", "RankResult", "score_embeddings", "oracle_scores", "top_k_lists", "summarise",
    "clip_t", "load_gallery", "FPR_COLUMNS", "FPRLayoutError", "FPRSplit", "read_fpr_table",
    "write_fpr_table", "read_generated", "load_fpr_split", "check_disjoint", "resolve_paths",
    "sample_gallery", "split_reference_gallery", "build_cub_split", "build_cars_split",
    "build_wildlife_split", "CUB_GROUPS", "WILDLIFE_SPECIES", "N_CARS_MODELS", "FeatureStore",
    "embed_images", "encoder_fingerprint",
    "remove_background", "train_feature_classifier", "FeatureClassifier", "RemoteCodeError",
    "DEFAULT_METHODS", "fpr_identity", "render_generated", "simulate_methods", "drift_agreement", "spread",
]
