"""Compatibility shim: the NearID losses live in :mod:`nearid_lib.nearid.losses` now."""
from __future__ import annotations

from .nearid.losses import (LOSS_INFO, LOSSES, Pool, cohesion_loss, compute_loss, loss_hparams,
                            make_loss_parameters, nearid_loss)

__all__ = ["Pool", "LOSSES", "LOSS_INFO", "nearid_loss", "compute_loss", "loss_hparams", "make_loss_parameters",
           "cohesion_loss"]
