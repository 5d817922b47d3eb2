"""The NearID loss and every training objective of NearID Tables 3/4, by name (``compute_loss``), from
one registry (:mod:`.registry`).

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

Modules: :mod:`.registry` the table ``{name: LossSpec}`` and what is derived from it (``compute_loss``,
``LOSSES``, ``LOSS_INFO``, ``loss_hparams``, ``make_loss_parameters``); :mod:`.terms` the shared machinery
(masks, the pool G, logits, :class:`LossBatch`, NearID's ranking term); one module per family of
objectives: :mod:`.nearid` (Eqs. 1-3 and the cohesion term of E.6), :mod:`.infonce` (InfoNCE, +R neg,
+Oracle), :mod:`.siglip`, :mod:`.circle`; :mod:`.inputs` the checks of the embeddings at the public edge.
The ID-Sim losses live in :mod:`nearid_lib.idsim.losses`.

A new objective: a function ``terms(b: LossBatch) -> {"disc": ..., "rank": ...}`` and one
:func:`register_loss` call; ``compute_loss``, ``make_loss_parameters`` and the loss-ablation rows of
Table 3 (:func:`nearid_lib.nearid.ablations.loss_rows`, for the names in ``eval.ablation_losses``)
then know it.
"""
from __future__ import annotations

from .inputs import NORM_TOLERANCE, check_loss_inputs
from .nearid import cohesion_loss, nearid_loss
from .registry import (LOSS_INFO, LOSSES, REGISTRY, LossSpec, compute_loss, loss_hparams, loss_spec,
                       make_loss_parameters, register_loss)
from .terms import LossBatch, Pool

__all__ = ["Pool", "LossBatch", "LossSpec", "REGISTRY", "LOSSES", "LOSS_INFO", "register_loss", "loss_spec",
           "compute_loss", "loss_hparams", "make_loss_parameters", "nearid_loss", "cohesion_loss",
           "check_loss_inputs", "NORM_TOLERANCE"]
