"""Who a score card scores: :class:`Participant` (the user's encoder, the frozen baselines, the
trained heads) and the protocols each one goes through (:data:`PROTOCOLS`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..features import Embedder

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["PROTOCOLS", "Participant"]

PROTOCOLS = ("nearid", "idsim", "fpr")


@dataclass
class Participant:
    """One row of the report: ``key`` (short id), ``label``, ``kind`` ("yours" | "frozen" | "nearid" |
    "idsim"), its :class:`~nearid_lib.features.Embedder` (``embedder``: the participants NearID-bench
    scores) and the model FPR embeds with (``model``). ``seed``: the training seed of one of several
    participants that share a ``key`` (a trained encoder's seeds): the row is their mean, as the
    claims' numbers are."""

    key: str
    label: str
    kind: str
    embedder: Embedder | None = None
    model: Any = None
    seed: int | None = None

    @property
    def tag(self) -> str:
        """A name unique among the participants: ``key``, or ``key@seed<n>`` for one of its seeds."""
        return self.key if self.seed is None else f"{self.key}@seed{self.seed}"

    def grid_embed(self, data: NearIDData, rels: Sequence[str], masks: Sequence[str]) -> np.ndarray:
        """L2-normalised embeddings of edit-grid images (full image) for the ID-Sim protocol: through
        the participant's embedder, else its model's own embeddings (rows in memory)."""
        emb = self.embedder if self.embedder is not None else Embedder(self.model, data, layout="rows", batch_size=32,
                                                                        name=self.label)
        return emb.embed(list(rels), "full", masks=list(masks)).numpy().astype(np.float64)
