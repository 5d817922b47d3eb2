"""Finer-Personalization Rank: gallery retrieval (mAP) to judge identity preservation.

One call scores a user's generator::

    from nearid_lib.retrieval import rank_generator
    res = rank_generator("my_method/generated_data.csv", "fpr/gallery_data.csv", encoder="dinov2-base")
    res.summary        # per method: map, sim, top1, auc, ndcg, n_queries

Modules: :mod:`.layout` (the CSV layout, validation, the paper's dataset builders, gallery
sampling), :mod:`.encoders` (specialised encoders, embedding cache), :mod:`.protocol` (scoring),
:mod:`.methods` (simulated personalization methods with known drift, ``mini``).
"""
from .layout import (CUB_GROUPS, FPR_COLUMNS, N_CARS_MODELS, WILDLIFE_SPECIES, FPRLayoutError, FPRSplit,
                     build_cars_split, build_cub_split, build_wildlife_split, check_disjoint, load_fpr_split,
                     read_fpr_table, read_generated, resolve_paths, sample_gallery, split_reference_gallery,
                     write_fpr_table)
from .encoders import (EmbeddingCache, RemoteCodeError, clear_encoders, embed_images, encoder_fingerprint,
                       get_encoder, image_list_hash, remove_background, train_feature_classifier)
from .protocol import RankResult, clip_t, load_gallery, oracle_scores, rank_generator, score_embeddings, \
    summarise, top_k_lists
from .methods import DEFAULT_METHODS, fpr_identity, render_generated, simulate_methods
from .analysis import drift_agreement, spread

__all__ = [
    "rank_generator", "RankResult", "score_embeddings", "oracle_scores", "top_k_lists", "summarise",
    "clip_t", "load_gallery", "FPR_COLUMNS", "FPRLayoutError", "FPRSplit", "read_fpr_table",
    "write_fpr_table", "read_generated", "load_fpr_split", "check_disjoint", "resolve_paths",
    "sample_gallery", "split_reference_gallery", "build_cub_split", "build_cars_split",
    "build_wildlife_split", "CUB_GROUPS", "WILDLIFE_SPECIES", "N_CARS_MODELS", "EmbeddingCache",
    "embed_images", "encoder_fingerprint", "image_list_hash", "get_encoder", "clear_encoders",
    "remove_background", "train_feature_classifier", "RemoteCodeError", "DEFAULT_METHODS",
    "fpr_identity", "render_generated", "simulate_methods", "drift_agreement", "spread",
]
