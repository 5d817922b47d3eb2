"""The VLM judge over every process of a launch, resumable (:func:`score_pairs_sharded`).

Whole batches of pairs are dealt to the processes in contiguous blocks, as accelerate's
``PartialState().split_between_processes`` deals them (diffusers' distributed-inference pattern), or
to the judging ranks only (``workers``: one per replica of a judge that spans several GPUs,
:func:`~nearid_lib.steps.placement.plan_replicas`); each process
appends its answers to its own ``answers_rank<r>.jsonl`` (a killed run resumes from them, whatever
its number of processes) and the answers are gathered to every process. A batch holds the same
pairs whatever the number of processes, so the scores equal one process's; on one process without
an answers folder it is one plain ``scorer.score_pairs`` call."""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from ..io_utils import atomic_write_text
from ..paths import cache_dir
from ..runtime.launch import launched_state
from .answers import JudgeScores

__all__ = ["score_pairs_sharded", "judge_answers_dir", "ROUND_BATCHES_PER_RANK"]


def _answers_files(answers_dir: Path) -> list[Path]:
    return sorted(answers_dir.glob("answers_rank*.jsonl"))


def _load_answers(answers_dir: Path | None) -> dict[str, dict]:
    """Every recorded answer of every rank (a line torn by a kill is skipped: that batch is redone)."""
    out: dict[str, dict] = {}
    if answers_dir is None:
        return out
    for f in _answers_files(answers_dir):
        for line in f.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            out[rec["key"]] = rec
    return out


def _append_answers(path: Path, recs: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fh.seek(0, os.SEEK_END)
        if fh.tell():                       # a torn last line must not swallow the next record
            fh.seek(fh.tell() - 1)
            if fh.read(1) != "\n":
                fh.write("\n")
        fh.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in recs))
        fh.flush()
        os.fsync(fh.fileno())


def _check_fingerprint(answers_dir: Path, fp: dict | None, is_main: bool) -> None:
    """An answers folder holds one judge's answers: a different judge (prompt, budget, ...) fails."""
    path = answers_dir / "judge.json"
    if path.exists():
        old = json.loads(path.read_text())
        if fp is not None and old != json.loads(json.dumps(fp)):
            raise ValueError(f"{answers_dir} holds the answers of another judge ({old}), not of {fp}; "
                             "use another answers folder")
    elif is_main and fp is not None:
        answers_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(fp, sort_keys=True))


def _share(items: list, rank: int, world: int, workers: Sequence[int] | None) -> list:
    """This rank's contiguous block of ``items`` among the judging ranks ``workers`` (default all
    ``world``): ``divmod`` blocks, the first ranks one longer (accelerate's rule); [] for a rank that
    does not judge."""
    # ranks beyond the launch (a plan for more GPUs than processes, or one process) do not exist
    ws = sorted({int(w) for w in workers if int(w) < world}) if workers is not None else []
    ws = ws or list(range(world))
    if rank not in ws:
        return []
    i, (per, extra) = ws.index(rank), divmod(len(items), len(ws))
    start = i * per + min(i, extra)
    return items[start:start + per + (1 if i < extra else 0)]


def _records(keys: Sequence[str], res) -> list[dict]:
    """One JSON record per pair of a ``score_pairs`` result (JudgeScores or a plain array)."""
    sc = np.asarray(getattr(res, "scores", res), dtype=np.float64)
    if len(sc) != len(keys):
        raise RuntimeError(f"the judge returned {len(sc)} scores for {len(keys)} pairs")
    st, raw = getattr(res, "status", None), getattr(res, "raw", None)
    hit = getattr(res, "hit_limit", None)
    return [{"key": k, "score": float(s) if np.isfinite(s) else None,
             "status": st[i] if st is not None else None, "raw": raw[i] if raw is not None else None,
             "hit": bool(hit[i]) if hit is not None and len(hit) == len(keys) else False}
            for i, (k, s) in enumerate(zip(keys, sc))]


# batches each judging rank scores between two gathers (a round: ~3 min at 4 pairs a batch, ~5 s a pair)
ROUND_BATCHES_PER_RANK = 8


def score_pairs_sharded(scorer, keys: Sequence[str], load: Callable[[Sequence[int]], tuple[list, list]],
                        answers_dir: str | os.PathLike | None = None, batch_size: int | None = None,
                        state: Any = "auto", progress: bool = False, workers: Sequence[int] | None = None):
    """Score pairs ``0..len(keys)-1`` with ``scorer.score_pairs`` over every process of a launch.

    Args:
        scorer: a :class:`VLMJudge` or anything with ``score_pairs(images_a, images_b)`` returning
            a :class:`JudgeScores` or an array.
        keys: one unique string per pair (what the answers folder is keyed on, e.g. the two relpaths).
        load: ``load(indices) -> (images_a, images_b)``; called on a process for its batches only.
        answers_dir: where each process appends ``answers_rank<r>.jsonl`` (fsynced per batch); pairs
            found there (from any rank of any earlier run) are not judged again. ``None``: no store.
        batch_size: pairs per ``score_pairs`` call (default ``scorer.batch_size``). Batches are cut
            from the full list of pairs and dealt whole to processes, so a pair meets the same batch
            companions (the same padding) whatever the number of processes.
        state: ``"auto"`` (:func:`launched_state`), ``None`` (one process) or a ``PartialState``.
        workers: the ranks that judge (default: every rank); the others only gather the answers.

    Returns the scorer's kind of result over all pairs, on every process: a :class:`JudgeScores`
    when the scorer answers with statuses, else a float array. On one process without
    ``answers_dir`` this is exactly one ``scorer.score_pairs(*load(all))`` call."""
    keys = list(keys)
    n = len(keys)
    if len(set(keys)) != n:
        raise ValueError("score_pairs_sharded: pair keys must be unique")
    state = launched_state() if state == "auto" else state
    world = state.num_processes if state is not None else 1
    if world == 1 and answers_dir is None:
        return scorer.score_pairs(*load(list(range(n))))
    rank = state.process_index if state is not None else 0
    is_main = rank == 0
    adir = Path(answers_dir) if answers_dir is not None else None
    if adir is not None:
        fp = scorer.fingerprint() if hasattr(scorer, "fingerprint") else None
        _check_fingerprint(adir, fp, is_main)
    bs = int(batch_size or getattr(scorer, "batch_size", 16) or 16)
    done = _load_answers(adir)
    batches = [list(range(b, min(b + bs, n))) for b in range(0, n, bs)]
    pending = [b for b in batches if any(keys[i] not in done for i in b)]
    if state is not None:
        # every rank has read the answers (and so agrees on `pending`) before any rank appends
        state.wait_for_everyone()
        if adir is not None:
            _check_fingerprint(adir, fp, False)
    # rounds of a few batches per judging rank, gathered after each: a rank that judges nothing (the
    # other GPUs of a replica spread over several) waits in a collective for one round, never for the
    # whole list (hours at ~5 s a pair), which would outlast the collective's timeout
    judging = len({int(w) for w in workers if int(w) < world} or range(world)) if workers is not None else world
    per_round = max(1, judging) * ROUND_BATCHES_PER_RANK
    rounds = [pending[r:r + per_round] for r in range(0, len(pending), per_round)] if world > 1 else [pending]
    bar = tqdm(total=len(_share(pending, rank, world, workers)), desc=f"judge rank {rank}/{world}",
               disable=not progress, position=rank)
    for chunk in rounds:
        new: list[dict] = []
        for idx in _share(chunk, rank, world, workers):
            recs = _records([keys[i] for i in idx], scorer.score_pairs(*load(idx)))
            if adir is not None:
                _append_answers(adir / f"answers_rank{rank}.jsonl", recs)
            new += recs
            bar.update(1)
        if state is not None and world > 1:
            from accelerate.utils import gather_object

            new = gather_object(new)        # a flat list: every rank's records, on every rank
        done.update({r["key"]: r for r in new})
    bar.close()
    recs = [done[k] for k in keys]
    scores = np.array([np.nan if r["score"] is None else r["score"] for r in recs], dtype=np.float64)
    if n and all(r.get("status") is not None for r in recs):
        return JudgeScores(scores, [r["status"] for r in recs], [r["raw"] for r in recs],
                           np.array([bool(r.get("hit")) for r in recs], dtype=bool))
    return scores


def judge_answers_dir(profile: str, judge) -> Path | None:
    """Where a real judge's answers are kept (per pair, per judge fingerprint) for a run of
    ``profile``: a killed evaluation resumes, a rerun -- or a notebook after the launched judge step --
    reads them instead of judging again. None for the tiny test judge."""
    if getattr(judge, "name", "").endswith("-tiny") or not hasattr(judge, "fingerprint"):
        return None
    fp = hashlib.sha1(json.dumps(judge.fingerprint(), sort_keys=True).encode()).hexdigest()[:10]
    return cache_dir(profile) / "judge_answers" / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', judge.name)}-{fp}"
