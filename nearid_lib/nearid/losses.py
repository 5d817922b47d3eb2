"""The NearID loss and every training objective of NearID Tables 3/4, by name (``compute_loss``).

Conventions shared by every NearID-family loss (``compute_loss``):

* Inputs are L2-normalised embeddings: ``anchor`` [B,D], ``positives`` [B,P,D], ``distractors`` [B,K,D],
  with boolean validity masks ``pos_mask`` [B,P] and ``dist_mask`` [B,K] (None = all valid).
  Logits are l(u,v) = u.v / temperature.
* **Masked slots never influence anything.** Masked embeddings are replaced by zeros with ``torch.where``
  *before* any product, so a masked slot holding random values, 1e30 or NaN leaves the loss value and the
  gradients of valid entries bit-for-bit unchanged, and its own gradient is exactly 0 (multiplying by a 0
  mask would leak NaN through ``0 * nan``). The authors' code feeds padded slots into its softmax.
* **Global pool G.** The positives of every row of the (global) batch form the candidate pool G. In a
  multi-GPU run G is gathered across ranks with gradients (:func:`nearid_lib.nearid.distributed.gather_pool`);
  local row i is global row ``pool.offset + i``, and anchor i's own positives G_i are excluded from its
  batch-negative pool B_neg(i) = G minus G_i. Distractors are per-anchor and never enter G.
* **Normalisation is global.** Every average divides by counts summed over all ranks, and the local loss is
  multiplied by the world size, so that (a) the mean of the per-rank losses equals the single-process loss
  of the global batch and (b) after DDP's gradient *averaging* the parameter gradient equals the
  single-process gradient. On one process both factors are 1.
* **rank_only rows** ([B] bool; MTG part edits, paper 4.1 "Joint Training") contribute ranking terms only:
  no discrimination / InfoNCE / SigLIP / Circle / cohesion term is formed for them. Their valid positives do
  stay in G (they are genuine images of *other* identities for every other anchor, and the batch-negative
  pool for their own ranking term is G minus their own positives, as for any row).
* Degenerate rows contribute nothing and are not counted: a row without a valid positive forms no
  discrimination term; a distractor whose anchor has an empty B_neg forms no ranking term.

Averaging of L_disc and L_rank (paper Eqs. 1-2, ``average="per_index"``, the default):
    L_disc = mean over positive indices p that are valid for at least one anchor of
             ( mean over anchors i whose slot p is valid of L_disc(i,p) )
and likewise L_rank over distractor indices k. ``average="flat"`` instead takes one mean over all valid
(i,p) (resp. (i,k)) terms; the two agree when the masks are full.

Modules: this one holds the public API (``nearid_loss``, ``compute_loss``, ``LOSSES``, hyper-parameters);
:mod:`.loss_terms` the shared machinery (masks, the pool G, logits) and the two terms of Eqs. 1-2;
:mod:`.loss_variants` the terms of the Table 3/4 variants (InfoNCE, SigLIP, Circle, oracle RankNet,
cohesion). The ID-Sim losses live in :mod:`nearid_lib.idsim.losses`.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import Tensor

from .loss_inputs import check_loss_inputs
from .loss_terms import Pool, _disc_nearid, _local_pool, _logits, _masks, _rank_softplus, _resolve_pool
from .loss_variants import _circle_disc, _infonce_sym, _rank_hinge_max, _rank_oracle, _siglip_disc, cohesion_loss

__all__ = ["Pool", "LOSSES", "LOSS_INFO", "nearid_loss", "compute_loss", "loss_hparams", "make_loss_parameters",
           "cohesion_loss"]


def nearid_loss(anchor: Tensor, positives: Tensor, distractors: Tensor, pos_mask: Tensor | None = None,
                dist_mask: Tensor | None = None, alpha: float = 0.5, temperature: float = 0.07,
                gathered_positives: Tensor | None = None, gathered_pos_mask: Tensor | None = None,
                owner_offset: int = 0, *, rank_only: Tensor | None = None, pool: Pool | None = None,
                average: str = "per_index") -> tuple[Tensor, dict[str, Tensor]]:
    """NearID loss L = L_disc + alpha * L_rank (paper Section 3.2, Eqs. 1-3).

    L_disc(i,p) = -log e^l(a_i,g_ip) / (sum_{g in G} e^l(a_i,g) + sum_k e^l(a_i,r_ik)), over valid (i,p) of
    non-rank_only rows; the anchor's other positives stay in the denominator.
    L_rank(i,k) = softplus(LSE_{g in B_neg(i)} l(a_i,g) - l(a_i,r_ik)), over valid (i,k).
    Averaging, masking, rank_only and multi-GPU conventions: see the module docstring.

    The pool G is the local batch, or ``pool`` (from ``distributed.gather_pool``: exact global
    normalisation), or ``gathered_positives``/``gathered_pos_mask``/``owner_offset`` (a gathered G with
    local normalisation). Returns (loss, {"disc", "rank"}), each already scaled by the world size."""
    pm, dm, ro = _masks(anchor, positives, distractors, pos_mask, dist_mask, rank_only)
    P = _resolve_pool(pool, anchor, positives, pm, gathered_positives, gathered_pos_mask, owner_offset)
    L = _logits(anchor, positives, distractors, pm, dm, ro, P, temperature)
    disc = _disc_nearid(L, P, average) * P.world_size
    rank = _rank_softplus(L, P, average) * P.world_size
    return disc + alpha * rank, {"disc": disc.detach(), "rank": rank.detach()}


# name -> (description, Table 4 "R usage")
LOSS_INFO: dict[str, tuple[str, str]] = {
    "infonce": ("symmetric InfoNCE, first valid positive, batch negatives", "-"),
    "infonce_rneg": ("symmetric InfoNCE + own distractors in the a->g denominator", "D"),
    "infonce_oracle": ("symmetric InfoNCE + alpha * RankNet on oracle-ordered distractor pairs", "R"),
    "infonce_rneg_oracle": ("InfoNCE + R neg + alpha * oracle RankNet", "D+R"),
    "siglip": ("pairwise sigmoid BCE over G and R + alpha * log-sigmoid rank (hard > batch)", "S"),
    "circle": ("Circle loss, R pooled with batch negatives + alpha * hinge max-rank (hard > batch)", "S"),
    "nearid": ("L_disc + alpha * L_rank (Eqs. 1-3)", "D+R"),
    "nearid_cohesion": ("L_disc + alpha * L_rank + beta * L_coh (E.6)", "D+R"),
}
LOSSES = tuple(LOSS_INFO)

_DEFAULTS: dict[str, Any] = {
    "alpha": 0.5, "beta": 0.1, "temperature": 0.07, "oracle_margin": 0.05, "circle_gamma": 64.0,
    "circle_m": 0.25, "siglip_scale": None, "siglip_bias": -10.0, "average": "per_index",
}


def loss_hparams(cfg: Any = None, **overrides: Any) -> dict[str, Any]:
    """Loss hyper-parameters from a TrainConfig, a Profile (its ``.train``), a mapping or None (defaults),
    then ``overrides``. Unknown override keys raise."""
    out = dict(_DEFAULTS)
    if cfg is not None:
        src = getattr(cfg, "train", cfg)
        for k in _DEFAULTS:
            key = "disc_average" if k == "average" else k
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
    give it to the optimiser."""
    hp = loss_hparams(cfg)
    src = getattr(cfg, "train", cfg)
    learnable = bool(getattr(src, "siglip_learnable", False)) if src is not None else False
    if name != "siglip" or not learnable:
        return torch.nn.ParameterDict()
    t0 = hp["siglip_scale"] if hp["siglip_scale"] is not None else 1.0 / hp["temperature"]
    return torch.nn.ParameterDict({
        "siglip_log_scale": torch.nn.Parameter(torch.tensor(math.log(t0))),
        "siglip_bias": torch.nn.Parameter(torch.tensor(float(hp["siglip_bias"]))),
    })


def compute_loss(name: str, anchor: Tensor, positives: Tensor, distractors: Tensor,
                 pos_mask: Tensor | None = None, dist_mask: Tensor | None = None, cfg: Any = None, *,
                 dist_oracle: Tensor | None = None, rank_only: Tensor | None = None, pool: Pool | None = None,
                 params: Mapping[str, Tensor] | None = None, normalize: bool = False, **overrides: Any
                 ) -> tuple[Tensor, dict[str, Tensor]]:
    """Any training objective of NearID Tables 3/4 by name (see ``LOSSES``); returns (loss, parts).

    ``cfg``: TrainConfig / Profile / mapping / None, with keyword ``overrides`` (alpha, beta, temperature,
    oracle_margin, circle_gamma, circle_m, siglip_scale, siglip_bias, average). Every variant is
    L = L_disc + alpha * L_rank (+ beta * L_coh for nearid_cohesion); parts = {"disc", "rank", ("coh")}.
    ``dist_oracle`` [B,K] float: per-distractor oracle score (MTG: 1 - |part|/|object| of the edit; higher =
    closer to the anchor identity; NaN = unknown), used only by the *_oracle variants. ``rank_only`` [B]:
    rows that form ranking terms only (no row of the NearID protocol uses it). ``pool``: the gathered
    global pool (multi-GPU).

    Where the paper's Table 4 fixes the form but not a constant or an averaging, the authors' released
    code decides (each documented at its term in :mod:`~nearid_lib.nearid.loss_variants`): margins
    are given in cosine units and enter Table 4's logit formulas divided by the temperature
    (``oracle_margin`` 0.05, Circle's ``circle_m`` 0.25); Circle's scale is gamma = 64; SigLIP's BCE
    is averaged, not summed, over pairs; InfoNCE's single positive is a random valid view (the
    training loop puts it in the first slot) and +R neg appends the distractors in both directions.
    Inputs are checked first (:func:`~nearid_lib.nearid.loss_inputs.check_loss_inputs`): one float
    dtype, finite and unit-norm valid slots; ``normalize=True`` L2-normalises them instead."""
    anchor, positives, distractors = check_loss_inputs(anchor, positives, distractors, pos_mask, dist_mask,
                                                       normalize)
    if name not in LOSS_INFO:
        raise KeyError(f"unknown loss {name!r}; valid: {', '.join(LOSSES)}")
    hp = loss_hparams(cfg, **overrides)
    tau, alpha, avg = float(hp["temperature"]), float(hp["alpha"]), hp["average"]
    pm, dm, ro = _masks(anchor, positives, distractors, pos_mask, dist_mask, rank_only)
    P = pool if pool is not None else _local_pool(anchor, positives, pm)
    L = _logits(anchor, positives, distractors, pm, dm, ro, P, tau)
    zero = anchor.sum() * 0.0
    parts: dict[str, Tensor] = {}
    if name in ("infonce", "infonce_rneg", "infonce_oracle", "infonce_rneg_oracle"):
        disc = _infonce_sym(anchor, positives, pm, L, P, tau, use_distractors="rneg" in name)
        rank = (_rank_oracle(L, P, dist_oracle, float(hp["oracle_margin"]) / tau) if "oracle" in name
                else zero)
    elif name == "siglip":
        scale, bias = hp["siglip_scale"], hp["siglip_bias"]
        if params is not None and "siglip_log_scale" in params:
            scale, bias = params["siglip_log_scale"].exp(), params["siglip_bias"]
        disc = _siglip_disc(L, P, tau, scale, bias)
        # -log sigma(l_rk - LSE_b) == softplus(LSE_b - l_rk): the same term as NearID's L_rank.
        rank = _rank_softplus(L, P, avg)
    elif name == "circle":
        disc = _circle_disc(L, P, tau, float(hp["circle_gamma"]), float(hp["circle_m"]))
        rank = _rank_hinge_max(L, P, avg, float(hp["circle_m"]) / tau)
    else:  # nearid, nearid_cohesion
        disc = _disc_nearid(L, P, avg)
        rank = _rank_softplus(L, P, avg)
    W = P.world_size
    disc, rank = disc * W, rank * W
    loss = disc + alpha * rank
    parts["disc"], parts["rank"] = disc.detach(), rank.detach()
    if name == "nearid_cohesion":
        coh = cohesion_loss(positives, pm, ro, P) * W
        loss = loss + float(hp["beta"]) * coh
        parts["coh"] = coh.detach()
    return loss, parts
