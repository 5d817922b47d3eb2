"""Feature cache for frozen backbones: encode every image once, train and evaluate heads over it.

A cache is a folder under ``cache_dir(profile) / "features"`` named
``<backbone>-<variant>-<hash>``, where the hash covers the backbone's identity and preprocessing
(:meth:`Encoder.cache_key`: name, weights, image size, resize, normalisation), the variant
(``"full"`` image, or ``"fg"``: background blacked out with the object mask), the storage dtype, and
the list of (image, mask) paths plus a fingerprint of the dataset (its ``manifest.json``, else the
files' sizes and mtimes). Anything that would change the features gives a new folder::

    meta.json      written last: key, N, n_tokens, token_dim, embed_dim, dtype, variant, ...
    index.csv      relpath, mask, row
    tokens.npy     float16 [N, n_tokens, token_dim]   (np.load(mmap_mode="r"): no RAM cost)
    pooled.npy     float16 [N, embed_dim]             (the backbone's own pooled output)

Builds run in chunks into ``<name>.partial/`` with a chunk manifest (``chunks.jsonl``): a killed
build resumes where it stopped, and the folder is renamed into place only when complete, so a
half-built cache is never read.

Augmentations that cannot be cached (random crops, colour jitter of the pixels) use
:class:`OnTheFlyFeatures`, which has the same ``features(relpaths)`` call but runs the backbone.

Every feature of the three papers and ``score_encoder`` is read through one call,
:func:`embed` over a :class:`FeatureStore` keyed by encoder, variant, payload and scope
(:mod:`.store`, :mod:`.embed`): per-item rows for embeddings and prefixes, and for token grids
(payloads ``tokens``, ``pooled``) the layouts of :mod:`.layouts`: the caches above per image
group (:class:`~.layouts.GroupArrays`) or the int8 shard store (:class:`~.layouts.ShardGrids`,
filled by :class:`~.stream.StreamFeatures`). Protocols get embeddings through one interface,
:class:`Embedder` (:mod:`.embedder`): a dataset's images, images outside its tables, files and
images in memory, whichever layout keeps them.

Modules: :mod:`.variants` (image variants and loaders), :mod:`.store` (:class:`FeatureStore`),
:mod:`.layouts` (token-grid layouts), :mod:`.payloads` (:class:`ImageRef`, :data:`PAYLOADS`),
:mod:`.embed` (:func:`embed`), :mod:`.cache` (:class:`TokenCache`), :mod:`.shards` (the int8 store),
:mod:`.stream` (:class:`StreamFeatures`: the store filled as training asks), :mod:`.disk` (the store's
grids at a run's sizes, the free space it leaves, what else lies in a cache), :mod:`.embedder`
(:class:`Embedder`), :mod:`.profile_encoders` (:func:`profile_embedders`: the encoders a profile
scores), :mod:`.on_the_fly` (:class:`OnTheFlyFeatures`); every name is re-exported here.
"""
from __future__ import annotations

from .cache import TokenCache, cache_name
from .embed import dataset_refs, dataset_scope, embed, feature_table, file_refs, memory_refs
from .on_the_fly import OnTheFlyFeatures
from .payloads import PAYLOADS, ImageRef, encoder_fingerprint, variant_images
from .store import FeatureStore, FeatureTable
from .variants import BG_GREY, VARIANTS, apply_variant, default_loaders, fill_background, register_variant
from .stream import StreamFeatures, open_train_store, process_writer, store_dir
from .disk import ReservedTokenStore, reserve_bytes, store_grids
from .embedder import Embedder
from .profile_encoders import Embedders, profile_embedders

__all__ = ["FeatureStore", "FeatureTable", "embed", "feature_table", "dataset_scope", "ImageRef", "PAYLOADS", "file_refs", "dataset_refs", "memory_refs",
           "variant_images", "encoder_fingerprint", "TokenCache", "OnTheFlyFeatures", "VARIANTS", "BG_GREY",
           "fill_background", "register_variant", "apply_variant", "default_loaders", "cache_name",
           "StreamFeatures", "open_train_store", "process_writer", "store_dir", "ReservedTokenStore", "reserve_bytes",
           "store_grids", "Embedder", "Embedders",
           "profile_embedders"]
