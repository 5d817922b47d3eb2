"""A VLM judge (Qwen3-VL through transformers) as an encoder-like pair scorer (NearID Appendix E.11),
shared by NearID (a bench encoder, :mod:`nearid_lib.nearid.scorers`) and ID-Sim (Table 2a,
:mod:`nearid_lib.idsim.mllm`).

The judge sees two images, is told to ignore the background and to use only instance-level evidence,
and answers with a JSON object holding a 0-10 ``score``; the score is mapped to a similarity proxy
``s = score / 10`` so that the same SSR/PA and correlation protocols apply to it as to embeddings.

Coverage is first-class: an answer that cannot be parsed (free text, JSON cut off by the token budget,
no score, a score outside the rubric) gets ``s = NaN`` and a status saying why; nothing is silently
dropped or clipped. The NearID authors' reading (``parsing="authors"``, NearID's default) clips a
score outside 0-10 into it, with its own status ``clipped``. Metrics are then computed on the covered pairs (``metrics.ssr_pa`` drops trials with
a NaN similarity) and the coverage is reported beside them.

- :mod:`.model`: :class:`VLMJudge`, the NearID prompt, the tiny offline Qwen3-VL
- :mod:`.answers`: :func:`parse_judge_answer` and :class:`JudgeScores` (no model needed)
- :mod:`.shards`: :func:`score_pairs_sharded`, the judge over every process of a launch
- :mod:`.prompts`: ID-Sim's standardised prompt (:data:`~.prompts.IDSIM_JUDGE_PROMPT`)
- :mod:`.cli`: ``python -m nearid_lib.judge``, a CSV of pairs judged
- :mod:`.plan`: the judge's gate, its replicas over the GPUs, its projected cost (no model needed)

Public API::

    judge = VLMJudge.from_pretrained("Qwen/Qwen3-VL-30B-A3B-Instruct", device="cuda")
    judge = VLMJudge.tiny()                   # random-init tiny Qwen3-VL, offline (tests / smoke)
    res = judge.score_pairs(images_a, images_b)   # JudgeScores: .scores [M] in [0,1] or NaN,
                                                  #   .status, .raw, .coverage, .summary()
    parse_judge_answer(text) -> ParsedAnswer  # the robust parser, usable on saved answers
    score_pairs_sharded(judge, keys, load, answers_dir=...)   # over every process of a launch

Scale-out (diffusers' / accelerate's distributed-inference pattern): under ``torchrun`` or ``accelerate
launch`` :func:`score_pairs_sharded` deals whole batches of pairs to the processes with
``PartialState().split_between_processes``, each process appends its answers to its own
``answers_rank<r>.jsonl`` (a killed run resumes from them, whatever its number of processes), and
the answers are gathered to every process; a batch holds the same pairs whatever the number of
processes, so the scores equal one process's. On one process without an answers folder it is one
plain ``judge.score_pairs`` call. The CLI judges a CSV of pairs and rank 0 writes the table::

    torchrun --nproc_per_node 8 -m nearid_lib.judge --pairs pairs.csv --root DATA \\
        --answers work/judge --out judged.csv --judge Qwen/Qwen3-VL-30B-A3B-Instruct

The answer parser is imported with the package; the model, the sharded scorer and the CLI (torch,
transformers) load on first use.
"""
from __future__ import annotations

from importlib import import_module

from .answers import PARSED_STATUSES, STATUSES, JudgeScores, ParsedAnswer, parse_judge_answer

_LAZY = {"VLMJudge": ".model", "JUDGE_PROMPT": ".model", "build_tiny_qwen3vl": ".model", "read_prompt_file": ".model",
         "score_pairs_sharded": ".shards", "judge_answers_dir": ".shards", "LazyJudge": ".model",
         "main": ".cli"}

__all__ = ["JUDGE_PROMPT", "ParsedAnswer", "JudgeScores", "VLMJudge", "parse_judge_answer",
           "PARSED_STATUSES", "STATUSES", "build_tiny_qwen3vl", "read_prompt_file", "score_pairs_sharded",
           "judge_answers_dir", "LazyJudge", "main"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'nearid_lib.judge' has no attribute {name!r}")
