"""The bench encoders of NearID-bench: every encoder is scored through the same calls, whether it
embeds images (frozen backbones, the NearID head, a user's callable: :class:`EmbeddingBenchEncoder`,
NearID's protocol over a core :class:`~nearid_lib.features.Embedder`) or judges pairs (the VLM judge:
:class:`PairBenchEncoder`, which scores exactly the pairs the protocol needs and reports coverage)::

    benc.nearid(data, split, variant) -> evaluate.nearid_bench-style dict (per_source, pooled, table)
    benc.mtg(data, split, variant)    -> (metrics.mtg_metrics dict or None, per-pair scores dict)
    benc.pair_scores(pairs, variant)  -> [M] similarities (NaN = not scored)

Embeddings themselves are the core's (:mod:`nearid_lib.features.embedder`): this module only says how
NearID's protocol reads them. :func:`load_bench_encoders` builds the encoders of a profile (the
embedders of :func:`~nearid_lib.features.profile_embedders` and the judges); :func:`as_bench_encoder`
takes an :class:`~nearid_lib.features.Embedder` as it comes (``score_encoder`` passes its participants').
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import pandas as pd

from .. import hub
from ..features import Embedder, profile_embedders
from ..judge.plan import JUDGE_MODELS, judge_gate
from .evaluate import embed_split, nearid_bench
from .judges import judge_answers_dir, judge_encoder, judge_encoders, judge_models, judge_name
from .pair_encoder import CosinePairScorer, PairBenchEncoder
from .pairs import mtg_from_scores, mtg_pairs

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["CosinePairScorer", "PairBenchEncoder", "EmbeddingBenchEncoder", "as_bench_encoder", "BenchEncoders",
           "load_bench_encoders", "judge_encoder", "judge_answers_dir"]


class EmbeddingBenchEncoder:
    """NearID-bench over an :class:`~nearid_lib.features.Embedder`: its name, label and seed, and the
    protocol's calls on its embeddings (every image, in the dataset's groups or not, goes through
    ``embedder.embed``)."""

    kind = "embedding"

    def __init__(self, embedder: Embedder, name: str | None = None, label: str | None = None):
        self.embedder = embedder
        self.name, self.label = name or embedder.name, label or embedder.label
        self.coverage: dict[str, dict] = {}

    @property
    def seed(self) -> int | None:
        """The training seed of a trained head (None: a frozen encoder)."""
        return self.embedder.seed

    @property
    def same_tower(self) -> bool | None:
        """``nearid-release-int8``: whether the profile's tower is the released one (else None)."""
        return getattr(self.embedder, "same_tower", None)

    def nearid(self, data: NearIDData, split: str = "test", variant: str = "full", sources: Sequence[str] | None = None):
        se = embed_split(self.embedder, data, split, variant, sources, with_mtg=False)
        return nearid_bench(se, data.train_sources, per_identity=True)

    def mtg(self, data: NearIDData, split: str = "test", variant: str = "full"):
        m, sets = mtg_pairs(data, split)
        if not len(m):
            return None, {}
        return mtg_from_scores(m, {k: self.pair_scores(data, v, variant) for k, v in sets.items()})

    def embed(self, data: NearIDData, rels: Sequence[str], masks: Sequence[str], variant: str = "full") -> np.ndarray:
        """L2-normalised embeddings [n, E] (float64) of any images of ``data`` with their masks."""
        return self.embedder.embed(list(rels), variant, masks=list(masks)).numpy().astype(np.float64)

    def pair_scores(self, data: NearIDData, pairs: Sequence[tuple], variant: str = "full", tag: str = "pairs") -> np.ndarray:
        if not pairs:
            return np.zeros(0)
        a = self.embed(data, [p[0] for p in pairs], [p[1] for p in pairs], variant)
        b = self.embed(data, [p[2] for p in pairs], [p[3] for p in pairs], variant)
        return (a * b).sum(1)

    def grid_scores(self, data: NearIDData, gp: pd.DataFrame, variant: str = "full") -> np.ndarray:
        return self.pair_scores(data, list(zip(gp["ref"], gp["ref_mask"], gp["img"], gp["mask"])), variant)

    def coverage_summary(self) -> dict[str, float]:
        return {}


def as_bench_encoder(enc):
    """``enc`` as a bench encoder: an :class:`~nearid_lib.features.Embedder` through
    :class:`EmbeddingBenchEncoder`, a bench encoder as it is."""
    return EmbeddingBenchEncoder(enc) if isinstance(enc, Embedder) else enc


class BenchEncoders(list):
    """The bench encoders of a profile (a list), with ``gated``: ``{encoder name: reason}`` for the
    encoders the profile asks for that cannot be scored now (a judge behind its gate, the released
    weights absent), whose rows the tables show empty with that reason (:mod:`.unscored`)."""

    def __init__(self, items=(), gated: Mapping[str, str] | None = None):
        super().__init__(items)
        self.gated: dict[str, str] = dict(gated or {})


def load_bench_encoders(cfg: Profile, data: NearIDData, checkpoint=None, judge=None,
                        checkpoints: Sequence[tuple[int, str | Path]] | None = None) -> BenchEncoders:
    """The bench encoders of ``cfg.eval.encoders`` (:func:`~nearid_lib.features.profile_embedders`:
    frozen encoders, the trained head of every seed in ``checkpoints`` or the single ``checkpoint``,
    the released model) + the VLM judges of ``cfg.eval.vlm_judge`` and ``cfg.eval.vlm_scales``
    (:func:`~nearid_lib.nearid.judges.judge_encoders`), as a :class:`BenchEncoders` whose ``gated``
    says which asked-for rows cannot be scored and why. ``judge`` overrides the judge object (tests)."""
    embs = profile_embedders(cfg, data, checkpoint=checkpoint, checkpoints=checkpoints)
    out = BenchEncoders([EmbeddingBenchEncoder(e) for e in embs], embs.gated)
    judges, gated = judge_encoders(cfg, judge)
    out.extend(judges)
    for model, why in gated.items():
        print(f"VLM judge {model}: rows skipped, {why}")
        out.gated[judge_name(model)] = why
    scored = {b.name for b in out if b.kind == "pairs"}
    if not judge_models(cfg) and "vlm" not in scored:
        out.gated["vlm"] = judge_gate(None, None, hub.is_available) or ""
    for model in JUDGE_MODELS:          # Table 7's judge scales this profile does not ask for
        if judge_name(model) not in scored | set(out.gated):
            out.gated[judge_name(model)] = f"{model} is not among this profile's judges (eval.vlm_scales)"
    return out
