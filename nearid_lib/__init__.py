"""nearid_lib: reference reproduction of NearID, ID-Sim and Finer-Personalization Rank.

One shared core and one package per paper:

- core: ``config/`` (profiles), ``paths``, ``runtime/`` (numerics, ``seeding``, ``runmeta``), ``io_utils``,
  ``run`` (one notebook setup: ``start_run``), ``data/``, ``generate/``, ``models/``, ``features/``,
  ``metrics/``, ``stats``, ``plots/``, ``report``, ``claims/``
- ``nearid/``: NearID losses, head training, sweeps, NearID-bench evaluation and tables, VLM judge
- ``idsim/``: ID-Sim losses, training, benchmarks, selective sensitivity
- ``fpr/``: Finer-Personalization Rank (galleries, retrieval protocol, experiments)

Public entry points:

- ``score_encoder(encoder, profile=...)`` - your encoder on all three protocols, beside the baselines
  and the papers, with a report card (``nearid_lib.score``)
- ``similarity(a, b, encoder=None)`` - cosine similarity of two images, two folders of same-named
  files or a CSV of pairs (``nearid_lib.sim``; the command is ``nearid sim``)
- ``get_profile(name)`` - typed profiles ``smoke`` / ``mini`` / ``paper`` (``nearid_lib.config``)
- ``load_encoder(spec)`` - ``model, preprocess`` for every encoder: registered backbones and heads,
  hub ids, your callables (``nearid_lib.models``, the one factory)
- ``nearid_loss`` and the ablation losses (``nearid_lib.nearid.losses``)
- ``ssr_pa``, ``fisher_z_mean``, ``retrieval_map`` (``nearid_lib.metrics``)
- ``rank_generator`` (``nearid_lib.fpr``), ``start_run`` (``nearid_lib.run``)
"""
from __future__ import annotations

from importlib import import_module

# Portable numerics first: numpy (imported by .runtime.seeding below) and torch read their code paths and
# thread pools once, when they load or first run, so the variables must be set before either
# starts (nearid_lib.runtime; NEARID_PORTABLE=0 turns it off). The runtime module imports nothing
# heavy at import time.
from .runtime import apply_portable

apply_portable()

from .config import Profile, get_profile  # noqa: E402
from .runtime.seeding import derive_seed, make_rng, seed_everything  # noqa: E402

__version__ = "0.1.0"

# Heavy submodules are imported lazily so `import nearid_lib` stays fast (no torch import).
_LAZY = {
    "score_encoder": ("nearid_lib.score", "score_encoder"),
    "similarity": ("nearid_lib.sim", "similarity"),
    "ScoreReport": ("nearid_lib.score", "ScoreReport"),
    "load_encoder": ("nearid_lib.models", "load_encoder"),
    "MAPHead": ("nearid_lib.models", "MAPHead"),
    "load_backbone": ("nearid_lib.models", "load_backbone"),
    "TokenCache": ("nearid_lib.features", "TokenCache"),
    "nearid_loss": ("nearid_lib.nearid.losses", "nearid_loss"),
    "compute_loss": ("nearid_lib.nearid.losses", "compute_loss"),
    "ssr_pa": ("nearid_lib.metrics", "ssr_pa"),
    "fisher_z_mean": ("nearid_lib.metrics", "fisher_z_mean"),
    "retrieval_map": ("nearid_lib.metrics", "retrieval_map"),
    "rank_generator": ("nearid_lib.fpr", "rank_generator"),
    "load_idsim": ("nearid_lib.idsim.model", "load_idsim"),
    "start_run": ("nearid_lib.run", "start_run"),
}

__all__ = ["Profile", "get_profile", "seed_everything", "derive_seed", "make_rng", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        mod, attr = _LAZY[name]
        return getattr(import_module(mod), attr)
    raise AttributeError(f"module 'nearid_lib' has no attribute {name!r}")
