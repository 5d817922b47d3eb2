"""Who a score card scores: :class:`Participant` (the user's encoder, the frozen baselines, the
trained heads) and the protocols each one goes through (:data:`PROTOCOLS`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..features import FeatureStore, dataset_refs, dataset_scope, embed

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["PROTOCOLS", "Participant"]

PROTOCOLS = ("nearid", "idsim", "fpr")


@dataclass
class Participant:
    """One row of the report: ``key`` (short id), ``label``, ``kind`` ("yours" | "frozen" | "nearid" |
    "idsim"), its NearID bench encoder (``bench``) and the model FPR embeds with (``model``)."""

    key: str
    label: str
    kind: str
    bench: Any = None
    model: Any = None

    def grid_embed(self, data: NearIDData, rels: Sequence[str], masks: Sequence[str]) -> np.ndarray:
        """L2-normalised embeddings of edit-grid images (full image) for the ID-Sim protocol."""
        if self.bench is not None:
            return np.asarray(self.bench.embed(data, list(rels), list(masks), "full"), dtype=np.float64)
        rows = embed(self.model, dataset_refs(data, list(rels), list(masks)), "full", FeatureStore(),
                     scope=dataset_scope(data), batch_size=32, progress=True, desc=f"embed ({self.label})")
        return rows.astype(np.float64)
