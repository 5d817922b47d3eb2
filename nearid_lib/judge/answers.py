"""Parsing the VLM judge's answers (NearID Appendix E.11): a robust reader of the 0-10 ``score`` in
its JSON answer, the status of every answer (parsed, recovered, truncated, no score, ...) and
:class:`JudgeScores`, the scores of a list of pairs with their coverage. Nothing here needs a model:
saved answers can be re-parsed with :func:`parse_judge_answer`."""
from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

__all__ = ["ParsedAnswer", "JudgeScores", "parse_judge_answer", "PARSED_STATUSES", "STATUSES", "AUTHORS_KEYS"]

PARSED_STATUSES = ("ok", "recovered", "clipped")
STATUSES = ("ok", "recovered", "clipped", "truncated", "no_score", "bad_score", "out_of_range", "unparseable",
            "empty")
# The NearID authors' reading of their judge (evaluation/sim_test.py, Qwen3VLJudgeCalculator): the
# score under one of these keys (ours: case-insensitive), else a regex "score": N, clipped to [0, 10]
AUTHORS_KEYS = ("score", "similarity")

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
# a "score" key with a number that is *finished*: followed by a delimiter, so a truncated "1" of "10"
# is not read as 1
def _kv_pattern(key: str) -> re.Pattern:
    return re.compile(r"""["']?\b""" + re.escape(key) + r"""["']?\s*[:=]\s*["']?\s*(""" + _NUM
                      + r""")\s*(?:/\s*10(?:\.0*)?)?\s*["']?\s*(?=[,}\n\r]|$)""", re.IGNORECASE)


_SCORE_KV = _kv_pattern("score")
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)(?:```|$)", re.DOTALL)


@dataclass(frozen=True)
class ParsedAnswer:
    """One parsed judge answer: ``score`` on 0-10 (None unless covered), ``status``, the JSON
    object when one was read (``data``), and a short ``note`` on what was repaired."""

    score: float | None
    status: str
    data: dict | None = None
    note: str = ""
    scale: float = 10.0          # the rubric's maximum (0-10 score; 1 for a 0-1 similarity field)

    @property
    def covered(self) -> bool:
        return self.status in PARSED_STATUSES

    @property
    def similarity(self) -> float:
        """``score / scale`` (score / 10 for the NearID rubric), NaN when not covered."""
        return self.score / self.scale if self.covered and self.score is not None else float("nan")


def _strip_fences(text: str) -> str:
    m = _FENCE.search(text)
    return m.group(1) if m else text


def _coerce_score(v: Any, hi: float = 10.0) -> tuple[float | None, str]:
    """A score value as a float, or (None, reason). Accepts numbers and numeric strings
    ("7", " 7.5 ", "7/10"); rejects booleans (``True`` is an int in Python), NaN and inf."""
    if isinstance(v, bool) or v is None:
        return None, "bad_score"
    if isinstance(v, (int, float)):
        f = float(v)
    elif isinstance(v, str):
        m = re.fullmatch(r"\s*(" + _NUM + r")\s*(?:/\s*10(?:\.0*)?)?\s*", v)
        if not m:
            return None, "bad_score"
        f = float(m.group(1))
    elif isinstance(v, (list, tuple)) and len(v) == 1:
        return _coerce_score(v[0], hi)
    else:
        return None, "bad_score"
    if not math.isfinite(f):
        return None, "bad_score"
    if f < 0 or f > hi:
        return f, "out_of_range"
    return f, "ok"


def _balanced_objects(s: str) -> list[str]:
    """Every top-level ``{...}`` substring (brace matching that respects quoted strings)."""
    out, depth, start, quote, esc = [], 0, None, None, False
    for i, ch in enumerate(s):
        if quote:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                quote = None
            continue
        if ch in "\"'" and depth > 0:
            # an apostrophe inside a word (don't, object's) is not a string opener
            if ch == "'" and i > 0 and s[i - 1].isalnum():
                continue
            quote = ch
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                out.append(s[start:i + 1])
    return out


def _loads_lenient(obj: str) -> dict | None:
    """json.loads, then repairs: trailing commas, Python literals / single quotes."""
    attempts = [obj, re.sub(r",\s*([}\]])", r"\1", obj)]
    for a in attempts:
        try:
            v = json.loads(a)
            return v if isinstance(v, dict) else None
        except (json.JSONDecodeError, ValueError):
            pass
    py = re.sub(r"\btrue\b", "True", attempts[1])
    py = re.sub(r"\bfalse\b", "False", py)
    py = re.sub(r"\bnull\b", "None", py)
    try:
        v = ast.literal_eval(py)
        return v if isinstance(v, dict) else None
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None


def _score_key(d: dict, key: str = "score", fallback: tuple[str, ...] = ()) -> Any:
    for want in (key, *fallback):
        for k, v in d.items():
            if isinstance(k, str) and k.strip().lower() == want:
                return v
    return _MISSING


_MISSING = object()


def parse_judge_answer(text: str | None, key: str = "score", hi: float = 10.0, clip: bool = False,
                       fallback_keys: tuple[str, ...] = ()) -> ParsedAnswer:
    """Read the 0-10 score from a judge answer, robustly, and say how it was read. ``key`` and
    ``hi`` name another numeric field and its range ``[0, hi]`` (ID-Sim's judge answers a 0-1
    ``similarity``: ``key="similarity", hi=1``); the reading rules are the same. ``fallback_keys``:
    further keys read when ``key`` is absent; ``clip``: a number outside ``[0, hi]`` is clipped into
    it with status ``clipped`` (covered) instead of ``out_of_range``, the NearID authors' reading
    (``clip=True, fallback_keys=AUTHORS_KEYS[1:]``: :data:`AUTHORS_KEYS`).

    Handles markdown code fences, text before/after the object, several objects (the first with a
    ``score`` wins), trailing commas, single quotes / Python literals, numbers as strings ("7",
    "7/10"). Statuses: ``ok`` (a JSON object with a valid score), ``recovered`` (no valid object, but
    a complete ``"score": N`` was found, e.g. in JSON cut off after the score, or in free text),
    ``truncated`` (an object opened but never closed, no complete score), ``no_score`` (an object
    without a score key), ``bad_score`` (a score that is not a number), ``out_of_range`` (outside
    0-10: not clipped, since an answer off the rubric is not a reading of it), ``unparseable``,
    ``empty``. Only ``ok``, ``recovered`` and ``clipped`` are covered."""
    def P(*a) -> ParsedAnswer:
        if clip and a[1] == "out_of_range" and a[0] is not None:      # the authors clip, and say so
            return ParsedAnswer(min(max(a[0], 0.0), float(hi)), "clipped", *a[2:], scale=float(hi))
        return ParsedAnswer(*a, scale=float(hi))

    if text is None or not str(text).strip():
        return P(None, "empty")
    raw = str(text)
    body = _strip_fences(raw).strip()
    notes = []
    if body != raw.strip():
        notes.append("fences")
    first_bad: ParsedAnswer | None = None
    objs = _balanced_objects(body)
    for o in objs:
        d = _loads_lenient(o)
        if d is None:
            continue
        v = _score_key(d, key.lower(), tuple(k.lower() for k in fallback_keys))
        if v is _MISSING:
            first_bad = first_bad or P(None, "no_score", d, ";".join(notes))
            continue
        if isinstance(v, str):
            notes.append("score_as_string")
        f, why = _coerce_score(v, hi)
        if why == "ok":
            if body.strip() != o.strip():
                notes.append("extra_text")
            return P(f, "ok", d, ";".join(notes))
        first_bad = first_bad or P(f if why == "out_of_range" else None, why, d,
                                              ";".join(notes))
    if first_bad is not None:
        return first_bad
    # No complete object with a usable score: look for a finished "score": N anywhere.
    m = (_SCORE_KV if key == "score" else _kv_pattern(key)).search(body)
    if m and m.end() >= len(body.rstrip()) and "{" in body and not objs:
        # the answer was cut off right after a number: "score": 1 may be the start of 10
        m = None
    if m:
        f, why = _coerce_score(m.group(1), hi)
        if why == "ok":
            return P(f, "recovered", None, ";".join(notes + ["regex"]))
        return P(f if why == "out_of_range" else None, why, None, ";".join(notes + ["regex"]))
    if "{" in body and not objs:
        return P(None, "truncated", None, ";".join(notes))
    bare = re.fullmatch(r"\s*(" + _NUM + r")\s*(?:/\s*10(?:\.0*)?)?\s*", body)
    if bare:
        f, why = _coerce_score(bare.group(1), hi)
        return P(f if why != "bad_score" else None, "recovered" if why == "ok" else why, None,
                            ";".join(notes + ["bare_number"]))
    return P(None, "unparseable", None, ";".join(notes))


@dataclass
class JudgeScores:
    """Scores of a list of pairs: ``scores`` [M] (s = score/10, NaN where not covered),
    ``status`` [M], ``raw`` answers [M], ``hit_limit`` [M] (generation stopped at the token budget)."""

    scores: np.ndarray
    status: list[str]
    raw: list[str]
    hit_limit: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    @property
    def n(self) -> int:
        return len(self.status)

    @property
    def n_covered(self) -> int:
        return int(sum(s in PARSED_STATUSES for s in self.status))

    @property
    def coverage(self) -> float:
        """Fraction of pairs whose answer gave a score (NaN for no pairs)."""
        return self.n_covered / self.n if self.n else float("nan")

    def counts(self) -> dict[str, int]:
        """Answers per status (every status listed, zeros included)."""
        return {s: int(sum(x == s for x in self.status)) for s in STATUSES}

    def summary(self) -> dict[str, Any]:
        """``n``, ``n_covered``, ``coverage``, ``n_hit_limit`` and ``n_<status>`` for every status."""
        return {"n": self.n, "n_covered": self.n_covered, "coverage": self.coverage,
                "n_hit_limit": int(np.sum(self.hit_limit)),
                **{f"n_{k}": v for k, v in self.counts().items()}}

    @classmethod
    def from_answers(cls, answers: Sequence[str], hit_limit: Sequence[bool] | None = None,
                     key: str = "score", hi: float = 10.0, clip: bool = False,
                     fallback_keys: tuple[str, ...] = ()) -> "JudgeScores":
        """Parse every answer (``key``/``hi``/``clip``/``fallback_keys``: :func:`parse_judge_answer`)."""
        parsed = [parse_judge_answer(a, key=key, hi=hi, clip=clip, fallback_keys=fallback_keys) for a in answers]
        return cls(scores=np.array([p.similarity for p in parsed], dtype=np.float64),
                   status=[p.status for p in parsed], raw=list(answers),
                   hit_limit=np.asarray(hit_limit if hit_limit is not None else [False] * len(parsed), bool))

    @classmethod
    def concat(cls, parts: Sequence["JudgeScores"]) -> "JudgeScores":
        """The scores of several lists of pairs, in order, as one."""
        if not parts:
            return cls(np.zeros(0), [], [], np.zeros(0, bool))
        return cls(np.concatenate([p.scores for p in parts]), sum((p.status for p in parts), []),
                   sum((p.raw for p in parts), []), np.concatenate([p.hit_limit for p in parts]))
