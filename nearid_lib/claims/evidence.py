"""The evidence of a claim: the per-unit outcomes of one quantity (:class:`Evidence`) and their
pooling over training seeds (:func:`pool_seeds`).

Kept apart from :mod:`nearid_lib.claims` (how claims are declared, bootstrapped and decided) because
the training code builds evidence: a trained run writes its per-unit outcomes, and its run key
follows the code that makes them (:data:`nearid_lib.nearid.checkpoints.TRAINING_ROOTS`). With the
class here, an edit of how claims are judged does not re-key, and so retrain, every head."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..stats import statistic

__all__ = ["Evidence", "pool_seeds"]


@dataclass(frozen=True)
class Evidence:
    """Per-unit outcomes of one quantity. ``table`` has a ``unit`` column, an optional ``seed``
    column (absent: one deterministic run) and the fields of ``stat``; several rows per unit are
    summed (e.g. one row per distractor source of an identity: a cluster bootstrap over identities)."""

    stat: str
    table: pd.DataFrame
    label: str = ""
    chance: float | None = None                  # None: the statistic's own (``Statistic.chance``)
    bounds: tuple[float, float] | None = None    # None: the statistic's own (``Statistic.bounds``)

    def __post_init__(self):
        st = statistic(self.stat)
        miss = [c for c in ("unit", *st.fields) if c not in self.table.columns]
        if miss:
            raise ValueError(f"Evidence {self.label or self.stat!r}: table lacks column(s) {miss}")
        if len(self.table) == 0:
            raise ValueError(f"Evidence {self.label or self.stat!r}: empty table")

    @property
    def seeds(self) -> list[int]:
        return sorted(int(s) for s in self.table["seed"].unique()) if "seed" in self.table else [0]

    def unit_moments(self, units: Sequence[str]) -> np.ndarray:
        """Moments summed per unit and seed: [n_units, n_seeds, m] (zeros where a unit is absent)."""
        st = statistic(self.stat)
        t = self.table if "seed" in self.table else self.table.assign(seed=0)
        mom = st.moments(t)
        u_idx = pd.Index(list(units)).get_indexer(t["unit"].astype(str))
        if (u_idx < 0).any():
            raise ValueError(f"Evidence {self.label!r}: units not in the index")
        s_idx = pd.Index(self.seeds).get_indexer(t["seed"].astype(int))
        out = np.zeros((len(units), len(self.seeds), mom.shape[1]))
        np.add.at(out, (u_idx, s_idx), mom)
        return out

    def per_seed(self) -> np.ndarray:
        """The statistic of each seed (all units once)."""
        units = sorted(self.table["unit"].astype(str).unique())
        return statistic(self.stat).value(self.unit_moments(units).sum(axis=0))

    def point(self) -> float:
        """The estimate: the statistic averaged over seeds (NaN when no seed has a value)."""
        v = self.per_seed()
        return float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")

    @property
    def chance_level(self) -> float | None:
        """The value random scores get on this quantity, where it is known."""
        return self.chance if self.chance is not None else statistic(self.stat).chance

    @property
    def range(self) -> tuple[float, float] | None:
        """The metric's (floor, ceiling), where it is bounded."""
        return self.bounds if self.bounds is not None else statistic(self.stat).bounds


def pool_seeds(per_seed: Mapping[int, Mapping[str, Evidence]]) -> dict[str, Evidence]:
    """One evidence per quantity from the evidence of each training seed ({seed: {key: Evidence}},
    e.g. :func:`benchmark_evidence` of each seed's embeddings): the tables stacked with a ``seed``
    column, so a claim averages its statistic over the seeds and its bootstrap resamples them.
    Raises ValueError when the seeds do not have the same quantities."""
    keys = [tuple(sorted(ev)) for ev in per_seed.values()]
    if len(set(keys)) > 1:
        raise ValueError(f"pool_seeds: the seeds have different quantities: {sorted(set(keys))}")
    out: dict[str, Evidence] = {}
    for key in (keys[0] if keys else ()):
        evs = [(s, ev[key]) for s, ev in sorted(per_seed.items())]
        first = evs[0][1]
        out[key] = Evidence(first.stat, pd.concat([e.table.assign(seed=int(s)) for s, e in evs], ignore_index=True),
                            first.label, chance=first.chance, bounds=first.bounds)
    return out
