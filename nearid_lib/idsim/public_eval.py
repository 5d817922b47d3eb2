"""ID-Sim's public benchmarks' metrics, for any encoder or judge: Subjects2k (read by
:func:`nearid_lib.data.eval_datasets.load_subjects2k`; AP / ROC AUC of a similarity against
``binary_label``; the dataset's own GPT-4o ``gpt_score`` as a row) and DreamBench++ (Spearman /
Kendall-b against the mean human concept-preservation rating; the release's GPT-4o ratings as a
row), and a VLM judge over both. :mod:`nearid_lib.idsim.released` assembles the paper tables."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from .. import hub
from .. import metrics as M
from ..data.eval_datasets import DreamBenchPP
from ..imageio import load_images
from ..judge import score_pairs_sharded

__all__ = ["PUBLIC_METRICS", "pair_scores", "subjects2k_metrics",
           "subjects2k_gpt_metrics", "dbpp_metrics", "dbpp_gpt_metrics", "judge_pairs", "judge_metrics", "public_scores"]

# our metric ids of the public benchmarks (nearid_lib.idsim.eval_suite.BENCH_INFO keys) -> what was scored
PUBLIC_METRICS = {"subjects2k_ap": "Subjects2k (chaenayo/Subjects2k), binary_label",
                  "subjects2k_auc": "Subjects2k (chaenayo/Subjects2k), binary_label",
                  "dreambench_spearman": "DreamBench++ generated images, mean human concept-preservation score",
                  "dreambench_kendall": "DreamBench++ generated images, mean human concept-preservation score"}

def _pair_embed(encoder, images: Sequence[Any], kind: str, batch_size: int) -> torch.Tensor:
    """L2-normalised ``kind`` embeddings: ``"pooled"`` (the encoder's own: CLS / MAP head / GAP) or
    ``"patch"`` (mean of the L2-normalised patch tokens, the aggregated patch embedding of Table 2b)."""
    if kind == "pooled":
        return encoder.embed(list(images), batch_size=batch_size)
    if kind == "patch":
        tok = encoder.encode(list(images), batch_size=batch_size).tokens      # [B, N, D]
        if tok is None:
            raise ValueError(f"encoder {encoder.name}: no patch tokens for a patch embedding")
        return torch.nn.functional.normalize(torch.nn.functional.normalize(tok, dim=-1).mean(1), dim=-1)
    raise ValueError(f"pair_scores: kind must be 'pooled' or 'patch', got {kind!r}")


def pair_scores(encoder, first: Sequence[Any], second: Sequence[Any], batch_size: int = 16,
                kind: str = "pooled") -> np.ndarray:
    """Cosine similarity of the ``kind`` embeddings (:func:`_pair_embed`) of ``first[i]`` and
    ``second[i]`` (PIL images or paths), in batches of ``batch_size`` pairs."""
    if len(first) != len(second):
        raise ValueError(f"pair_scores: {len(first)} first images vs {len(second)} second images")
    out = []
    with torch.no_grad():
        for i in range(0, len(first), batch_size):
            a = _pair_embed(encoder, first[i:i + batch_size], kind, batch_size)
            b = _pair_embed(encoder, second[i:i + batch_size], kind, batch_size)
            out.append((a * b).sum(-1).double().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)


def _binary_metrics(scores: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    y = np.asarray(labels, dtype=int)
    if not len(scores) or not 0 < y.sum() < len(y):
        return {}
    return {"subjects2k_ap": M.verification_ap(scores, y), "subjects2k_auc": M.verification_auc(scores, y)}


def subjects2k_metrics(encoder, ds, batch_size: int = 16, kind: str = "pooled"
                       ) -> tuple[dict[str, float], np.ndarray]:
    """``({subjects2k_ap, subjects2k_auc, n_pairs}, scores)``: AP (the paper's main metric) and
    ROC-AUC of the reference-test cosine against the released ``binary_label`` (both metrics absent
    when the pairs hold one class only); images streamed in batches."""
    scores = []
    for i in range(0, len(ds), batch_size):
        rows = ds[i:i + batch_size]
        scores.append(pair_scores(encoder, rows["reference_image"], rows["test_image"], batch_size, kind))
    s = np.concatenate(scores) if scores else np.zeros(0)
    return {"n_pairs": int(len(s)), **_binary_metrics(s, np.asarray(ds["binary_label"]))}, s


def subjects2k_gpt_metrics(ds) -> dict[str, float]:
    """Table 2a's MLLM* row on Subjects2k: the released ``gpt_score`` (Subjects200K's own GPT-4o
    identity-preservation score, 0-5) ranked against ``binary_label``."""
    s = np.asarray(ds["gpt_score"], dtype=float)
    return {"n_pairs": int(len(s)), **_binary_metrics(s, np.asarray(ds["binary_label"]))}


def _rank_metrics(scores: np.ndarray, ratings: np.ndarray) -> dict[str, float]:
    ok = np.isfinite(scores) & np.isfinite(ratings)
    if ok.sum() < 3:
        return {}
    rc = M.rank_correlations(scores[ok], ratings[ok])
    return {"dreambench_spearman": rc["spearman"], "dreambench_kendall": rc["kendall"]}


def dbpp_metrics(encoder, pairs: pd.DataFrame, batch_size: int = 16, kind: str = "pooled"
                 ) -> tuple[dict[str, float], np.ndarray]:
    """``({dreambench_spearman, dreambench_kendall, n_pairs, n_subjects}, scores)`` over
    :func:`nearid_lib.data.eval_datasets.dbpp_mean_ratings` rows: rank correlations of the reference-image
    cosine with the mean human rating (absent under 3 pairs)."""
    s = pair_scores(encoder, pairs["reference"].tolist(), pairs["image"].tolist(), batch_size, kind)
    res = {"n_pairs": int(len(s)), "n_subjects": int(pairs["subject"].nunique())}
    return {**res, **_rank_metrics(s, pairs["rating"].to_numpy(dtype=float))}, s


def dbpp_gpt_metrics(db: DreamBenchPP, pairs: pd.DataFrame) -> dict[str, float]:
    """Table 2a's MLLM* row on DreamBench++: the release's own GPT-4o concept-preservation ratings
    (``data_gpt_rating/concept_preservation_full``) against the mean human rating, on the pairs of
    ``pairs`` that GPT rated (``n_pairs``; no metric when fewer than 3)."""
    gpt = db.ratings[db.ratings["rater"] == "gpt"]
    g = gpt.groupby(["method", "subject", "prompt_index"])["score"].mean()
    key = pd.MultiIndex.from_frame(pairs[["method", "subject", "prompt_index"]])
    s = g.reindex(key).to_numpy(dtype=float)
    ok = np.isfinite(s)
    res = {"n_pairs": int(ok.sum())}
    return {**res, **_rank_metrics(s[ok], pairs["rating"].to_numpy(dtype=float)[ok])}


def judge_pairs(judge, first: Sequence[Any], second: Sequence[Any], batch_size: int = 16,
                keys: Sequence[str] | None = None, answers_dir=None, workers: Sequence[int] | None = None
                ) -> tuple[np.ndarray, pd.DataFrame]:
    """An MLLM judge's 0-1 identity similarity of each pair (NaN where its answer cannot be read),
    and the per-pair answers (``similarity``, ``status``, ``answer``). With ``answers_dir`` (and
    ``keys``, one per pair) the pairs go through the judge's sharded, resumable path: answers kept
    per pair, a rerun (or the notebook after the launched judge step) reads them instead of judging,
    ``workers`` the ranks of a launch that judge."""
    if answers_dir is not None or workers is not None:
        first, second = list(first), list(second)
        res = score_pairs_sharded(judge, list(keys), lambda idx: (load_images([first[i] for i in idx]),
                                                                   load_images([second[i] for i in idx])),
                                  answers_dir=answers_dir, batch_size=batch_size, workers=workers)
        return (np.asarray(res.scores, dtype=float),
                pd.DataFrame({"similarity": list(res.scores), "status": list(res.status), "answer": list(res.raw)}))
    scores, status, raw = [], [], []
    for i in range(0, len(first), batch_size):
        res = judge.score_pairs(load_images(list(first[i:i + batch_size])),
                                load_images(list(second[i:i + batch_size])))
        scores += list(res.scores)
        status += list(res.status)
        raw += list(res.raw)
    return np.asarray(scores, dtype=float), pd.DataFrame({"similarity": scores, "status": status, "answer": raw})


def judge_metrics(judge, s2k=None, dbpp_pairs: pd.DataFrame | None = None, max_pairs: int | None = None,
                  batch_size: int = 16, answers_dir=None, workers: Sequence[int] | None = None
                  ) -> tuple[dict[str, float], pd.DataFrame]:
    """Table 2a's open-judge row: the judge on the first ``max_pairs`` pairs of Subjects2k and of
    the DreamBench++ mean-rating pairs; metrics on the pairs it answered (``coverage`` = answered
    share over both benchmarks). Returns the metrics and the per-pair answers. ``answers_dir`` /
    ``workers``: the judge's answers folder and judging ranks (:func:`judge_pairs`)."""
    res: dict[str, float] = {}
    answers = []
    n = lambda k: k if max_pairs is None else min(int(max_pairs), k)     # noqa: E731
    if s2k is not None and len(s2k):
        sub = s2k.select(range(n(len(s2k))))
        s, per = judge_pairs(judge, sub["reference_image"], sub["test_image"], batch_size,
                             keys=[f"s2k|{p}" for p in sub["pair_id"]], answers_dir=answers_dir, workers=workers)
        ok = np.isfinite(s)
        res.update(_binary_metrics(s[ok], np.asarray(sub["binary_label"])[ok]))
        res["n_subjects2k"] = int(len(sub))
        answers.append(per.assign(benchmark="Subjects2k", pair=list(sub["pair_id"])))
    if dbpp_pairs is not None and len(dbpp_pairs):
        sub = dbpp_pairs.iloc[:n(len(dbpp_pairs))]
        s, per = judge_pairs(judge, sub["reference"].tolist(), sub["image"].tolist(), batch_size,
                             keys=[f"dbpp|{a}|{b}" for a, b in zip(sub["reference"], sub["image"])],
                             answers_dir=answers_dir, workers=workers)
        res.update(_rank_metrics(s, sub["rating"].to_numpy(dtype=float)))
        res["n_dreambench"] = int(len(sub))
        answers.append(per.assign(benchmark="DreamBench++", pair=sub["image"].tolist()))
    per = pd.concat(answers, ignore_index=True) if answers else pd.DataFrame()
    res["n_pairs"] = int(len(per))
    res["coverage"] = float(np.isfinite(per["similarity"].to_numpy(float)).mean()) if len(per) else float("nan")
    return res, per


def public_scores(enc, s2k, pairs: pd.DataFrame | None, batch_size: int, kind: str = "pooled",
                  scores: dict | None = None) -> dict[str, float]:
    """ID-Sim's public benchmark metrics of one encoder (``kind``: its pooled or its mean-patch
    embedding): Subjects2k AP / ROC-AUC and DreamBench++ Spearman / Kendall, for the benchmarks
    that are there (``s2k`` / ``pairs`` None: absent). ``scores``: a dict that receives the per-pair
    similarities (``"s2k"``, ``"dbpp"``), the evidence of the claims."""
    res = {}
    if s2k is not None:
        m, s = subjects2k_metrics(enc, s2k, batch_size, kind)
        res.update(m)
        if scores is not None:
            scores["s2k"] = s
    if pairs is not None:
        m, s = dbpp_metrics(enc, pairs, batch_size, kind)
        res.update({k: v for k, v in m.items() if k.startswith("dreambench")})
        if scores is not None:
            scores["dbpp"] = s
    return {k: v for k, v in res.items() if k in PUBLIC_METRICS}
