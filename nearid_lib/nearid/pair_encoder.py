"""Bench encoders that score image pairs directly (the VLM judge) rather than embed images:
:class:`PairBenchEncoder`, and :class:`CosinePairScorer` (an embedding encoder's pair path, to check
it against the embedding path). :mod:`nearid_lib.nearid.scorers` documents the bench encoder calls."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import pandas as pd

from ..features import apply_variant
from ..judge import score_pairs_sharded
from .pairs import mtg_from_scores, mtg_pairs, nearid_from_pair_scores, nearid_pairs

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["CosinePairScorer", "PairBenchEncoder"]


class CosinePairScorer:
    """Pair scores as cosine similarities of precomputed embeddings (``lookup[relpath] -> [E]``);
    the pair-based path of an embedding encoder, e.g. to check it against the embedding path."""

    def __init__(self, lookup: Mapping[str, np.ndarray], name: str = "cosine"):
        self.lookup, self.name = lookup, name

    def score_pairs(self, images_a: Sequence[str], images_b: Sequence[str]):
        a = np.stack([np.asarray(self.lookup[x], float) for x in images_a]) if images_a else np.zeros((0, 1))
        b = np.stack([np.asarray(self.lookup[x], float) for x in images_b]) if images_b else np.zeros((0, 1))
        a = a / np.linalg.norm(a, axis=1, keepdims=True)
        b = b / np.linalg.norm(b, axis=1, keepdims=True)
        return (a * b).sum(1)


class PairBenchEncoder:
    """A bench encoder that scores image pairs directly (the VLM judge).

    ``scorer.score_pairs(images_a, images_b)`` returns a :class:`~nearid_lib.judge.JudgeScores` or a
    plain array; with ``load_images=True`` it receives PIL images (after the full/FG variant), else
    the relpaths. Judge answers with no score are NaN, their trials are dropped, and ``coverage``
    keeps, per (benchmark, variant), how many pairs were scored.

    Under ``torchrun`` / ``accelerate launch`` the pairs are judged by every process
    (:func:`~nearid_lib.judge.score_pairs_sharded`: whole batches per process, answers gathered to
    every process, so the tables rank 0 writes equal one process's); ``answers_dir`` keeps every
    answer (one file per rank) so that a killed run resumes and a rerun over the same pairs reads
    them instead of judging again (:func:`~nearid_lib.nearid.judges.judge_encoder` gives a real judge
    one under the profile's cache, keyed by the judge's fingerprint). ``workers``: the ranks of a
    launch that judge (one per replica of :func:`~nearid_lib.steps.placement.plan_replicas`; None: all)."""

    kind = "pairs"

    def __init__(self, scorer, name: str = "vlm", label: str | None = None, load_images: bool = True,
                 max_ids: int | None = None, answers_dir: str | Path | None = None):
        self.scorer, self.name, self.label = scorer, name, label or getattr(scorer, "name", name)
        self.load_images, self.max_ids = load_images, max_ids
        self.answers_dir = answers_dir
        self.workers: tuple[int, ...] | None = None
        self.coverage: dict[str, dict] = {}
        self._memo: dict[tuple, float] = {}

    def _prep(self, data: NearIDData, rel, mask, variant):
        if not self.load_images:
            return rel
        mk = data.mask(mask) if variant != "full" else None
        return apply_variant(data.image(rel), mk, variant)

    def pair_scores(self, data: NearIDData, pairs: Sequence[tuple], variant: str = "full", tag: str = "pairs") -> np.ndarray:
        """Scores of (img_a, mask_a, img_b, mask_b) pairs; repeated pairs are scored once."""
        todo = [p for p in dict.fromkeys((p[0], p[1], p[2], p[3], variant) for p in pairs) if p not in self._memo]
        if todo:
            def load(idx):     # only the pairs of this process's batches are read
                return ([self._prep(data, todo[i][0], todo[i][1], variant) for i in idx],
                        [self._prep(data, todo[i][2], todo[i][3], variant) for i in idx])

            res = score_pairs_sharded(self.scorer, ["|".join(map(str, p)) for p in todo], load,
                                      answers_dir=self.answers_dir, workers=self.workers)
            sc = np.asarray(getattr(res, "scores", res), dtype=np.float64)
            for p, s in zip(todo, sc):
                self._memo[p] = float(s)
            cov = self.coverage.setdefault(f"{tag}:{variant}", {"n": 0, "n_covered": 0, "status": {}})
            cov["n"] += len(todo)
            cov["n_covered"] += int(np.isfinite(sc).sum())
            for st in getattr(res, "status", []):
                cov["status"][st] = cov["status"].get(st, 0) + 1
        return np.array([self._memo[(p[0], p[1], p[2], p[3], variant)] for p in pairs], dtype=np.float64)

    def nearid(self, data: NearIDData, split: str = "test", variant: str = "full", sources: Sequence[str] | None = None):
        srcs = list(data.sources if sources is None else sources)
        pr = nearid_pairs(data, split, srcs, self.max_ids)
        pos_s = self.pair_scores(data, [p[3:] for p in pr["pos"]], variant, "nearid")
        dist_s = {s: self.pair_scores(data, [p[2:] for p in pr["dist"][s]], variant, "nearid") for s in srcs}
        return nearid_from_pair_scores(len(pr["ids"]), pr["pos"], pos_s, pr["dist"], dist_s, data.train_sources)

    def mtg(self, data: NearIDData, split: str = "test", variant: str = "full"):
        m, sets = mtg_pairs(data, split, self.max_ids)
        return mtg_from_scores(m, {k: self.pair_scores(data, v, variant, "mtg") for k, v in sets.items()})

    def grid_scores(self, data: NearIDData, gp: pd.DataFrame, variant: str = "full") -> np.ndarray:
        out = np.full(len(gp), np.nan)
        keep = np.ones(len(gp), bool)
        if self.max_ids is not None and len(gp):
            # the cost cap applies here too: only the first max_ids anchors are judged
            keep = gp["anchor_id"].isin(list(dict.fromkeys(gp["anchor_id"]))[:self.max_ids]).to_numpy()
        sub = gp[keep]
        out[keep] = self.pair_scores(data, list(zip(sub["ref"], sub["ref_mask"], sub["img"], sub["mask"])),
                                     variant, "dbpp")
        return out

    def coverage_summary(self) -> dict[str, float]:
        """``coverage_<benchmark>_<variant>`` = scored / judged pairs, plus overall ``coverage``."""
        out = {f"coverage_{k.replace(':', '_')}": v["n_covered"] / v["n"] if v["n"] else float("nan")
               for k, v in self.coverage.items()}
        n = sum(v["n"] for v in self.coverage.values())
        out["coverage"] = sum(v["n_covered"] for v in self.coverage.values()) / n if n else float("nan")
        out["n_judged"] = n
        return out
