"""The NearID-bench protocol in one call (NearID Section 3.4): :func:`run_bench` makes every test
image ready for each bench encoder (feature caches, or a callable's embeddings), then scores each
encoder over NearID (full image and foreground only), MTG and DreamBench++ (human ratings, or the
procedural stand-in on the edit grids). Notebook 04 and :func:`nearid_lib.score_encoder` both run
it; the tables of :mod:`nearid_lib.nearid.tables` are built from its :class:`BenchRun`."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import pandas as pd

from .dbpp import dbpp_standin
from ..data.groups import image_groups
from .evaluate import EncoderResult, evaluate_encoder, source_groups
from .pairs import grid_pairs
from .scorers import as_bench_encoder

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["BenchRun", "bench_variants", "run_bench", "standin_scorer", "StandinScorer"]


@dataclass(frozen=True)
class StandinScorer:
    """The procedural DreamBench++ stand-in as a scorer: called on a bench encoder it returns
    :func:`~.dbpp.dbpp_standin`'s ``(m_h dict, scores)`` over ``pairs`` (the edit-grid pairs of
    :func:`~.pairs.grid_pairs`, kept so that the scores can become per-anchor claims evidence:
    :func:`~.dbpp.graded_evidence`)."""

    data: Any
    pairs: pd.DataFrame

    def __call__(self, benc) -> tuple:
        return dbpp_standin(benc, self.data, self.pairs, "full")


def standin_scorer(cfg: Profile, data: NearIDData, split: str | None = None) -> StandinScorer | None:
    """The procedural DreamBench++ stand-in as a scorer ``benc -> (m_h dict, scores)`` over the edit
    grids of ``split`` (default ``eval.split``) -- the column ``dbpp_mh_procedural`` of the ablation
    tables, labelled as such, never human ratings -- or None when the profile has no stand-in
    (``eval.dbpp_standin``) or no grids."""
    if not cfg.eval.dbpp_standin:
        return None
    gp = grid_pairs(data, split or cfg.eval.split)
    if not len(gp):
        return None
    return StandinScorer(data, gp)


@dataclass
class BenchRun:
    """What :func:`run_bench` returns: one :class:`~nearid_lib.nearid.evaluate.EncoderResult` per
    encoder (in order), the source groups of Table 5, the variants and edit-grid pairs scored, and
    the seconds spent making the images ready (``cache_seconds``)."""

    results: list[EncoderResult]
    groups: dict[str, list[str]]
    variants: tuple[str, ...]
    split: str
    grid: pd.DataFrame | None
    cache_seconds: float

    def summary(self) -> pd.DataFrame:
        """One row per encoder: name, seed, seconds to score it and its coverage (share of trials
        with every embedding present)."""
        return pd.DataFrame([{"encoder": r.name, "seed": r.seed, "seconds": round(r.seconds.get("total", 0.0), 1),
                              **{k: round(v, 3) for k, v in r.coverage.items() if k.startswith("coverage")}}
                             for r in self.results])


def bench_variants(cfg: Profile) -> tuple[str, ...]:
    """The image variants the profile scores: full image, and foreground only with ``eval.fg_only``."""
    return ("full", "fg") if cfg.eval.fg_only else ("full",)


def run_bench(encoders: Sequence[Any], data: NearIDData, cfg: Profile,
              dbpp: Callable[[Any], tuple] | None = None, clock: Callable[[], float] = time.perf_counter) -> BenchRun:
    """NearID-bench of every bench encoder (:mod:`nearid_lib.nearid.scorers`; an
    :class:`~nearid_lib.features.Embedder` is taken as it is, :func:`~.scorers.as_bench_encoder`) on
    ``cfg.eval.split``.

    First every image of the split's groups is made ready for each embedding encoder
    (``embedder.prefetch``: feature caches of a library encoder, the embeddings of a callable, which
    also takes the edit-grid images), then each encoder is scored by
    :func:`~nearid_lib.nearid.evaluate.evaluate_encoder` (``dbpp``: DreamBench++ human ratings,
    :func:`~nearid_lib.nearid.dbpp.dbpp_for_profile`; without them the procedural stand-in on the
    edit grids when ``eval.dbpp_standin``). ``seconds["total"]`` of each result is its scoring time."""
    encoders = [as_bench_encoder(b) for b in encoders]
    split, variants = cfg.eval.split, bench_variants(cfg)
    grid = grid_pairs(data, split) if cfg.eval.dbpp_standin else None
    extra = None
    if grid is not None and len(grid):
        extra = (list(grid["ref"]) + list(grid["img"]), list(grid["ref_mask"]) + list(grid["mask"]))
    test_groups = image_groups(data, splits=(split,))
    t0 = clock()
    for b in encoders:
        if b.kind == "embedding":
            b.embedder.prefetch(test_groups, variants, extra)
    cache_seconds = clock() - t0
    results = []
    for b in encoders:
        t0 = clock()
        # Table 7's extra judge scales score NearID and MTG only (no DB++ column there)
        skip = getattr(b, "skip_dbpp", False)
        r = evaluate_encoder(b, data, split, variants, grid=None if skip else grid, dbpp=None if skip else dbpp)
        r.seconds["total"] = clock() - t0
        # a judge's weights leave the GPUs before the next encoder's arrive
        getattr(getattr(b, "scorer", None), "release", lambda: None)()
        results.append(r)
    return BenchRun(results, source_groups(data.sources, data.train_sources), variants, split, grid, cache_seconds)
