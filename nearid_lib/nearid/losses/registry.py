"""The loss registry: every NearID training objective by name with its metadata (:class:`LossSpec`),
and what follows from it: :func:`compute_loss`, :func:`loss_hparams`, :func:`make_loss_parameters`,
``LOSSES`` / ``LOSS_INFO``, the ablation rows and their table row ids (:mod:`nearid_lib.nearid.ablations`).

A loss is a function ``terms(b: LossBatch) -> {"disc": ..., "rank": ..., ...}`` returning its
*unscaled* terms; :func:`compute_loss` scales every term by the world size, weighs it (``weights``:
L = L_disc + alpha * L_rank by default) and sums. A new objective is that function (in its own module
or anywhere) and one :func:`register_loss` call; the built-in ones are registered at the end of this
module, in the order of NearID Table 3.
"""
from __future__ import annotations

from collections.abc import Mapping as MappingABC
from functools import partial
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, NamedTuple

import torch
from torch import Tensor

from .circle import circle_terms
from .infonce import infonce_terms
from .inputs import check_loss_inputs
from .nearid import nearid_cohesion_terms, nearid_terms
from .siglip import siglip_parameters, siglip_terms
from .terms import LossBatch, Pool, local_pool, pool_logits, validate_masks

__all__ = ["LossSpec", "REGISTRY", "LOSSES", "LOSS_INFO", "SHARED_HPARAMS", "register_loss", "loss_spec",
           "loss_hparams", "make_loss_parameters", "compute_loss"]

# Hyper-parameters every loss reads (each loss declares its own further ones when registered).
SHARED_HPARAMS: Mapping[str, Any] = MappingProxyType({"alpha": 0.5, "temperature": 0.07, "average": "per_index"})
# hyper-parameter -> TrainConfig field, where the two names differ
CONFIG_FIELDS: Mapping[str, str] = MappingProxyType({"average": "disc_average"})
# L = L_disc + alpha * L_rank: (term, the hyper-parameter that weighs it; None = weight 1)
DEFAULT_WEIGHTS: tuple[tuple[str, str | None], ...] = (("disc", None), ("rank", "alpha"))


class LossSpec(NamedTuple):
    """One registered training objective. A tuple on purpose: the code-keyed caches
    (:mod:`nearid_lib.runtime.code_closure`) follow a tuple's items, so ``terms`` and ``parameters`` key every
    run trained with this loss."""

    name: str
    terms: Callable[[LossBatch], Mapping[str, Tensor]]
    description: str
    r_usage: str                        # NearID Table 4 "R usage": "-", "D", "R", "D+R", "S"
    row_id: str                         # the row's id in the paper's Table 3 (paper_values row_id)
    hparams: Mapping[str, Any]          # its own hyper-parameters and their defaults
    weights: tuple[tuple[str, str | None], ...]
    parameters: Callable[[Mapping[str, Any], Any], torch.nn.ParameterDict] | None   # (hp, train) -> learnable
    first_positive: bool                # trains on one positive per row, drawn at random among the valid views


REGISTRY: dict[str, LossSpec] = {}
# the registered names in registration order: a live view (a loss registered later is in it)
LOSSES = REGISTRY.keys()


class _InfoView(MappingABC):
    """name -> (description, Table 4 "R usage"), live over :data:`REGISTRY`."""

    def __getitem__(self, name: str) -> tuple[str, str]:
        spec = REGISTRY[name]
        return spec.description, spec.r_usage

    def __iter__(self) -> Iterator[str]:
        return iter(REGISTRY)

    def __len__(self) -> int:
        return len(REGISTRY)


LOSS_INFO: Mapping[str, tuple[str, str]] = _InfoView()


def register_loss(name: str, terms: Callable[[LossBatch], Mapping[str, Tensor]], *, description: str,
                  r_usage: str = "-", row_id: str | None = None, hparams: Mapping[str, Any] | None = None,
                  weights: tuple[tuple[str, str | None], ...] = DEFAULT_WEIGHTS,
                  parameters: Callable[[Mapping[str, Any], Any], torch.nn.ParameterDict] | None = None,
                  first_positive: bool = False) -> LossSpec:
    """Register the objective ``name``: ``terms`` (a :class:`LossBatch` -> its unscaled terms, the keys
    of ``weights``), its description, Table 4's ``r_usage``, its table ``row_id`` (default: ``name``),
    its own hyper-parameters with defaults (``hparams``; set them with ``compute_loss(..., key=value)``,
    or from the config where ``train`` has a field of that name), the ``weights`` of its terms,
    ``parameters`` (``(hp, train) -> ParameterDict`` of learnable loss parameters) and whether training
    draws one positive per row into the first slot (``first_positive``). Raises on a taken name, on a
    hyper-parameter whose default differs from another loss's, and on a weight that names no
    hyper-parameter. The registry lives in each process: register in a module every process imports
    (sweep workers are spawned: a loss registered only in a notebook trains with ``runtime.workers``
    = 1; in a worker its name is unknown and ``make_loss_parameters`` says so)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"register_loss: name must be an identifier (it names runs and table rows), got {name!r}")
    if name in REGISTRY:
        raise ValueError(f"register_loss: loss {name!r} is already registered")
    if not callable(terms):
        raise TypeError(f"register_loss: terms of {name!r} must be callable, got {type(terms).__name__}")
    own = dict(hparams or {})
    known = all_hparams()
    for k, v in own.items():
        if k in SHARED_HPARAMS:
            raise ValueError(f"register_loss: {name!r} redeclares the shared hyper-parameter {k!r}")
        if k in known and known[k] != v:
            raise ValueError(f"register_loss: {name!r} declares {k}={v!r}, another loss {k}={known[k]!r}")
    keys = [k for k, _ in weights]
    if not keys or len(set(keys)) != len(keys):
        raise ValueError(f"register_loss: weights of {name!r} must name distinct terms, got {keys}")
    for k, w in weights:
        if w is not None and w not in SHARED_HPARAMS and w not in own:
            raise ValueError(f"register_loss: term {k!r} of {name!r} is weighed by {w!r}, not a hyper-parameter "
                             f"of it ({', '.join([*SHARED_HPARAMS, *own])})")
    spec = LossSpec(name, terms, description, r_usage, row_id or name, MappingProxyType(own), tuple(weights),
                    parameters, bool(first_positive))
    REGISTRY[name] = spec
    return spec


def loss_spec(name: str) -> LossSpec:
    """The registered loss ``name``; ``KeyError`` naming the valid ones otherwise."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise KeyError(f"unknown loss {name!r}; valid: {', '.join(REGISTRY)}") from None


def all_hparams() -> dict[str, Any]:
    """Every hyper-parameter of every registered loss, with its default (the shared ones first)."""
    out = dict(SHARED_HPARAMS)
    for spec in REGISTRY.values():
        out.update(spec.hparams)
    return out


def loss_hparams(cfg: Any = None, **overrides: Any) -> dict[str, Any]:
    """Loss hyper-parameters from a TrainConfig, a Profile (its ``.train``), a mapping or None (defaults),
    then ``overrides``. Unknown override keys raise."""
    out = all_hparams()
    if cfg is not None:
        src = getattr(cfg, "train", cfg)
        for k in list(out):
            key = CONFIG_FIELDS.get(k, k)
            if isinstance(src, Mapping):
                if key in src:
                    out[k] = src[key]
            elif hasattr(src, key):
                out[k] = getattr(src, key)
    for k, v in overrides.items():
        if k not in out:
            raise KeyError(f"unknown loss hyper-parameter {k!r}; valid: {', '.join(out)}")
        out[k] = v
    return out


def make_loss_parameters(name: str, cfg: Any = None) -> torch.nn.ParameterDict:
    """Learnable loss parameters for ``name`` (SigLIP: log-scale and bias, initialised from the config when
    ``train.siglip_learnable``); empty otherwise. Pass the result as ``params`` to :func:`compute_loss` and
    give it to the optimiser. An unknown name raises (before a run starts, not at its first step)."""
    spec = loss_spec(name)
    if spec.parameters is None:
        return torch.nn.ParameterDict()
    return spec.parameters(loss_hparams(cfg), getattr(cfg, "train", cfg))


def compute_loss(name: str, anchor: Tensor, positives: Tensor, distractors: Tensor,
                 pos_mask: Tensor | None = None, dist_mask: Tensor | None = None, cfg: Any = None, *,
                 dist_oracle: Tensor | None = None, rank_only: Tensor | None = None, pool: Pool | None = None,
                 params: Mapping[str, Tensor] | None = None, normalize: bool = False, **overrides: Any
                 ) -> tuple[Tensor, dict[str, Tensor]]:
    """Any registered training objective by name (see ``LOSSES``); returns (loss, parts).

    ``cfg``: TrainConfig / Profile / mapping / None, with keyword ``overrides`` (alpha, beta, temperature,
    oracle_margin, circle_gamma, circle_m, siglip_scale, siglip_bias, average, and any registered loss's
    own). Every built-in objective is L = L_disc + alpha * L_rank (+ beta * L_coh for nearid_cohesion);
    parts = {"disc", "rank", ("coh")}, each scaled by the world size. ``dist_oracle`` [B,K] float:
    per-distractor oracle score (MTG: 1 - |part|/|object| of the edit; higher = closer to the anchor
    identity; NaN = unknown), used only by the *_oracle variants. ``rank_only`` [B]: rows that form
    ranking terms only (no row of the NearID protocol uses it). ``pool``: the gathered global pool
    (multi-GPU).

    Where the paper's Table 4 fixes the form but not a constant or an averaging, the authors' released
    code decides (each documented at its term in :mod:`~nearid_lib.nearid.losses.infonce`,
    :mod:`~nearid_lib.nearid.losses.siglip` and :mod:`~nearid_lib.nearid.losses.circle`): margins
    are given in cosine units and enter Table 4's logit formulas divided by the temperature
    (``oracle_margin`` 0.05, Circle's ``circle_m`` 0.25); Circle's scale is gamma = 64; SigLIP's BCE
    is averaged, not summed, over pairs; InfoNCE's single positive is a random valid view (the
    training loop puts it in the first slot) and +R neg appends the distractors in both directions.
    Inputs are checked first (:func:`~nearid_lib.nearid.losses.inputs.check_loss_inputs`): one float
    dtype, finite and unit-norm valid slots; ``normalize=True`` L2-normalises them instead."""
    anchor, positives, distractors = check_loss_inputs(anchor, positives, distractors, pos_mask, dist_mask,
                                                       normalize)
    spec = loss_spec(name)
    hp = loss_hparams(cfg, **overrides)
    pm, dm, ro = validate_masks(anchor, positives, distractors, pos_mask, dist_mask, rank_only)
    P = pool if pool is not None else local_pool(anchor, positives, pm)
    L = pool_logits(anchor, positives, distractors, pm, dm, ro, P, float(hp["temperature"]))
    terms = spec.terms(LossBatch(anchor, positives, distractors, pm, dm, ro, P, L, hp, dist_oracle, params))
    if set(terms) != {k for k, _ in spec.weights}:
        raise ValueError(f"loss {name!r} returned the terms {sorted(terms)}; its weights name "
                         f"{[k for k, _ in spec.weights]}")
    loss: Tensor | None = None
    parts: dict[str, Tensor] = {}
    for key, weight in spec.weights:
        term = terms[key] * P.world_size
        weighed = term if weight is None else float(hp[weight]) * term
        loss = weighed if loss is None else loss + weighed
        parts[key] = term.detach()
    assert loss is not None                     # register_loss asks for at least one term
    return loss, parts


# --------------------------------------------------------------------------- the built-in objectives
# NearID Table 3's rows, in its order (the order of eval.ablation_losses' default).
register_loss("infonce", infonce_terms, first_positive=True,
              description="symmetric InfoNCE, first valid positive, batch negatives", r_usage="-")
register_loss("infonce_rneg", partial(infonce_terms, rneg=True), first_positive=True,
              description="symmetric InfoNCE + own distractors in the a->g denominator", r_usage="D")
register_loss("infonce_oracle", partial(infonce_terms, oracle=True), first_positive=True,
              hparams={"oracle_margin": 0.05}, r_usage="R",
              description="symmetric InfoNCE + alpha * RankNet on oracle-ordered distractor pairs")
register_loss("infonce_rneg_oracle", partial(infonce_terms, rneg=True, oracle=True), first_positive=True,
              hparams={"oracle_margin": 0.05}, description="InfoNCE + R neg + alpha * oracle RankNet",
              r_usage="D+R")
register_loss("siglip", siglip_terms, row_id="siglip_rank", hparams={"siglip_scale": None, "siglip_bias": -10.0},
              parameters=siglip_parameters, r_usage="S",
              description="pairwise sigmoid BCE over G and R + alpha * log-sigmoid rank (hard > batch)")
register_loss("circle", circle_terms, row_id="circle_rank", hparams={"circle_gamma": 64.0, "circle_m": 0.25},
              r_usage="S",
              description="Circle loss, R pooled with batch negatives + alpha * hinge max-rank (hard > batch)")
register_loss("nearid", nearid_terms, description="L_disc + alpha * L_rank (Eqs. 1-3)", r_usage="D+R")
register_loss("nearid_cohesion", nearid_cohesion_terms, hparams={"beta": 0.1},
              weights=(*DEFAULT_WEIGHTS, ("coh", "beta")),
              description="L_disc + alpha * L_rank + beta * L_coh (E.6)", r_usage="D+R")
