"""MLLM judges of identity (ID-Sim Table 2a, Supp. D.3) on the concept-preservation benchmarks.

A judge sees two images and answers a JSON object with a binary ``same_instance``, a
``confidence`` and a 0-1 ``similarity`` (the fields of the paper's standardised prompt, Fig. 21);
the similarity ranks the pairs for Subjects2k's AP and DreamBench++'s rank correlation, exactly
where an embedding's cosine would. Answers that cannot be read count as not covered (NaN) and the
coverage is reported beside the metric; the metric is computed on the covered pairs.

Judges:

* :func:`idsim_judge` wraps :class:`nearid_lib.judge.VLMJudge` (a transformers
  image-text-to-text model, e.g. Qwen3-VL, the open stand-in for the paper's GPT-4o / GPT-5 /
  Gemini) with :data:`IDSIM_JUDGE_PROMPT`; ``idsim_judge("tiny")`` is a random-init tiny Qwen3-VL
  (offline tests and ``smoke``: its answers are noise, so coverage is ~0);
* any callable ``answer(images_a, images_b) -> list[str]`` (e.g. a client of a hosted API, which
  this offline project cannot call) through :class:`CallableJudge`.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..hub import resolve
from ..judge import JudgeScores, LazyJudge, VLMJudge, score_pairs_sharded
from ..judge.prompts import IDSIM_JUDGE_PROMPT
from .eval_suite import graded_metrics

__all__ = ["IDSIM_JUDGE_PROMPT", "CallableJudge", "idsim_judge", "judge_graded", "mllm_table"]

class CallableJudge:
    """A judge from any function ``answer(images_a, images_b) -> list[str]`` of raw answers (an API
    client, a saved-answers lookup); the answers are read like :class:`VLMJudge`'s."""

    def __init__(self, answer: Callable[[Sequence, Sequence], Sequence[str]], name: str = "callable"):
        self.answer, self.name = answer, name

    def score_pairs(self, images_a: Sequence, images_b: Sequence) -> JudgeScores:
        answers = list(self.answer(images_a, images_b))
        if len(answers) != len(images_a):
            raise ValueError(f"judge {self.name!r}: {len(answers)} answers for {len(images_a)} pairs")
        return JudgeScores.from_answers(answers, key="similarity", hi=1.0)


def idsim_judge(name: str, device: str = "cpu", placement: dict | None = None, **kw):
    """An ID-Sim MLLM judge: ``"tiny"`` (random-init tiny Qwen3-VL, offline) or a hub id / folder
    of a transformers image-text-to-text model, prompted with :data:`IDSIM_JUDGE_PROMPT` and read on
    its ``similarity`` field. ``placement``: ``device_map`` / ``max_memory`` of its replica
    (:func:`nearid_lib.steps.placement.device_kwargs`, e.g. a 30B judge over two 40 GB GPUs); without
    it the model goes to ``device`` whole."""
    opts = dict(prompt=IDSIM_JUDGE_PROMPT, answer_key="similarity", answer_max=1.0, **kw)
    if name == "tiny":
        return VLMJudge.tiny(**opts)
    where = dict(placement) if placement is not None else {"device": device}
    label = name.rstrip("/").split("/")[-1]

    def load() -> VLMJudge:
        # through the hub resolver: the NEARID_HUB_DIR mirror folder, or the repo id (hub / its cache)
        real = VLMJudge.from_pretrained(resolve(name, "model").source, **where, **opts)
        real.name = label
        return real

    # the weights load at the first pair that has no kept answer: after the launched judge step
    # (python -m nearid_lib.steps run idsim-judge) notebook 09 loads nothing
    return LazyJudge(VLMJudge(None, None, name=label, **opts), load)


def judge_graded(judge, graded: pd.DataFrame, image: Callable, max_pairs: int | None = None
                 ) -> tuple[dict[str, float], pd.DataFrame]:
    """Score the graded pairs (columns ``img1``, ``img2``, ``c``, ``rating``: the Subjects2k /
    DreamBench++ analogue of :func:`nearid_lib.idsim.eval_suite.mini_benchmark_sets`) with ``judge``.

    ``max_pairs`` keeps the first pairs of every ``rating`` level in turn (a cost cap that keeps the
    label mix). Returns ({subjects2k_ap, dreambench_spearman, coverage, n_pairs}, per-pair answers);
    a metric is NaN when the covered pairs cannot define it (one class, or fewer than 3 pairs)."""
    g = graded.reset_index(drop=True)
    if max_pairs is not None and len(g) > max_pairs:
        # round-robin over rating levels, so a small cap still spans the labels
        rank = g.groupby("rating", sort=True).cumcount()
        g = g.assign(_r=rank).sort_values(["_r", "rating"], kind="stable").head(int(max_pairs)).drop(columns="_r")
    a, b = list(g.img1), list(g.img2)
    # over every process of a torchrun / accelerate launch (one plain score_pairs call otherwise)
    res = score_pairs_sharded(judge, [f"{x}|{y}|{i}" for i, (x, y) in enumerate(zip(a, b))],
                              lambda idx: ([image(a[i]) for i in idx], [image(b[i]) for i in idx]))
    per = g.assign(similarity=res.scores, status=res.status, answer=res.raw)
    cov = per[np.isfinite(per.similarity)]
    m = graded_metrics(cov.similarity.to_numpy(float), cov) if len(cov) else {}
    return {"coverage": res.coverage, "n_pairs": int(len(per)),
            "subjects2k_ap": m.get("subjects2k_ap", float("nan")),
            "dreambench_spearman": m.get("dreambench_spearman", float("nan"))}, per


def mllm_table(results: Mapping[str, Mapping[str, float]], labels: Mapping[str, tuple[str, str]],
               profile: str) -> pd.DataFrame:
    """ID-Sim Table 2a beside the paper's: one row per scorer, ``labels``: scorer -> (paper row
    key or "" when the paper has no such row, what the scorer is here). Embedding rows have
    coverage 1."""
    rows = []
    for key, res in results.items():
        row, what = labels[key]
        rows.append({"row": row, "scorer": key, "ours_label": what,
                     "subjects2k_ap": float(res.get("subjects2k_ap", np.nan)),
                     "dreambench_spearman": float(res.get("dreambench_spearman", np.nan)),
                     "coverage": float(res.get("coverage", 1.0)), "n_pairs": res.get("n_pairs"),
                     "profile": profile})
    return pd.DataFrame(rows)
