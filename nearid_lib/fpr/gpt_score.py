"""DreamBench++'s GPT concept-preservation score, the DB++ column of FPR Tables 1 and 5-13, as the FPR
authors compute it (``evaluation/dreambench_plus_eval.py`` of OSU-MLB/Finer-Personalization-Rank,
after DreamBench++'s ``eval_concept_preservation.py``):

- the chat-completions API of the ``openai`` client, model ``gpt-4o-2024-05-13``
  (``retrieval.gpt_model``), at ``retrieval.gpt_base_url`` (or ``$OPENAI_BASE_URL``: any
  OpenAI-compatible server stands in), key ``$OPENAI_API_KEY``, ``temperature=1``, ``seed`` = the
  pair's draw from the authors' stream (below);
- three messages: the user turn is DreamBench++'s ``user_prompt_subject_full.txt``, the assistant
  turn its ``gpt_prompt_subject_full.txt``, then a user turn of two images -- the reference (first)
  and the image judged -- each resized to 512 x 512 (PIL's default bicubic), JPEG-encoded at PIL's
  default quality and sent as base64 data URLs with ``detail: "high"``. The prompts are
  DreamBench++'s text: they are read at run time from the user's DreamBench++ download
  (:func:`read_prompts`), never shipped here;
- the answer's score is the one number after ``score:`` / ``Score:`` (an optional word between);
  an answer without exactly one such number is asked again, up to five times (the authors'); the
  pair's score is that number x 0.25 (0-4 -> 0-1); a subject's score the mean over its pairs, a
  gallery's the mean over its subjects.

Pairs (:func:`plan_pairs`): Table 1 (references as queries) and DreamBooth's rows pair *one* image
per subject, drawn from the subject's gallery (Table 1) or references (DreamBooth), with every
query image; the other methods pair each generated image with its own ``ref_path``. The draws
replay the authors' stream: ``random.seed(101)`` per table and dataset, then per subject (in
order of first appearance) ``random.sample`` of one image when there are several, and
``random.randint(0, 100)`` for each request's ``seed``. A re-asked pair (no score) draws its
next seeds from a stream of its own (the authors' would shift every later draw).

Answers are cached per subject and image pair (:class:`GptJudge`: one JSON line each, appended and
flushed as it comes, a torn line ignored: a stopped run resumes), with the tokens the server
reports. A request that fails (the server unreachable or answering an HTTP error after the client's
own retries, a response that cannot be read) does not stop the column: the pair is recorded as
failed with the reason, left without a score in this run and asked again by the next one; only
:data:`MAX_FAILURES` failed pairs in a row stop the run (:class:`GptUnavailableError`, naming the
answers file). Before any request the gate checks that the server is reachable from this node at
all (:func:`endpoint_reason`: one TCP connection, a few seconds, once per process), since compute
nodes often have no internet. Cost (``gpt-4o-2024-05-13`` list price, USD 5 / 1M input and 15 / 1M output tokens): two
512 px images at high detail are 2 x 255 tokens, the two prompts ~930 (4,299 characters), so
~1,450 input and ~5 output tokens a request: about USD 7.3 per 1,000 requests (:data:`COST`). The
paper's tables need ~6,400 requests (Table 1: one per reference, ~800; Tables 5-13: one per
generated image, 10 per subject x 80 subjects x 7 methods), about USD 47.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from PIL import Image

from ..generate.personalize import method_key
from ..imageio import load_image
from ..runtime.reach import DEFAULT_BASE_URL, REACH_TIMEOUT, api_url, endpoint_reason

__all__ = ["GPT_MODEL", "PROMPT_FILES", "SCORE_SCALE", "STREAM_SEED", "COST", "TRIES", "GptPromptError", "read_prompts",
           "parse_score", "encode_image", "messages", "Pair", "plan_pairs", "GptJudge", "gpt_config_reason",
           "subject_scores", "DEFAULT_BASE_URL", "REACH_TIMEOUT", "MAX_FAILURES", "GptUnavailableError",
           "api_url", "endpoint_reason"]

GPT_MODEL = "gpt-4o-2024-05-13"
PROMPT_FILES = ("user_prompt_subject_full.txt", "gpt_prompt_subject_full.txt")   # DreamBench++ dreambench_plus/prompts
SCORE_SCALE = 0.25
STREAM_SEED = 101
TRIES = 5
IMAGE_PX = 512
MAX_FAILURES = 5                                    # failed pairs in a row that stop a run
# USD per 1M tokens (gpt-4o-2024-05-13) and the tokens of one request (see the module docstring)
COST = {"input_per_mtok": 5.0, "output_per_mtok": 15.0, "input_tokens": 1450, "output_tokens": 5,
        "usd_per_1000_requests": 1000 * (1450 * 5.0 + 5 * 15.0) / 1e6}
_SCORE = re.compile(r"(?:score|Score):\s*[a-zA-Z]*\s*(\d+)")


class GptPromptError(FileNotFoundError):
    """DreamBench++'s prompt files are not in the download; the message names where they were looked for."""


class GptUnavailableError(RuntimeError):
    """:data:`MAX_FAILURES` pairs in a row failed; the message names the server, the last reason and
    the answers file a rerun resumes from."""


def read_prompts(dbpp_root: str | os.PathLike) -> tuple[str, str]:
    """``(user_prompt, gpt_prompt)``: DreamBench++'s subject prompts from its download (the
    repository's ``dreambench_plus/prompts/``, or ``prompts/`` or the folder itself), stripped as the
    authors strip them. Missing files: :class:`GptPromptError` naming every place looked at."""
    root = Path(dbpp_root)
    places = [root / "dreambench_plus" / "prompts", root / "prompts", root]
    for d in places:
        if all((d / f).is_file() for f in PROMPT_FILES):
            return tuple((d / f).read_text().strip() for f in PROMPT_FILES)   # type: ignore[return-value]
    raise GptPromptError(f"DreamBench++'s prompts {', '.join(PROMPT_FILES)} not found in any of "
                         f"{', '.join(str(p) for p in places)}: they are in github.com/yuangpeng/dreambench_plus "
                         f"(dreambench_plus/prompts/); clone it into {root} or copy the two files there")


def gpt_config_reason(base_url: str | None, dbpp_root: str | os.PathLike | None) -> str | None:
    """Why the DB++ column cannot be computed here (the gate), or None: no key and no server, the
    ``openai`` client absent, DreamBench++'s prompts absent, the server unreachable from this node
    (:func:`endpoint_reason`, checked last: the only check that waits)."""
    if not (os.environ.get("OPENAI_API_KEY") or base_url or os.environ.get("OPENAI_BASE_URL")):
        return ("no OpenAI key ($OPENAI_API_KEY) and no OpenAI-compatible server (retrieval.gpt_base_url or "
                "$OPENAI_BASE_URL): the DreamBench++ GPT score is not computed")
    try:
        import openai  # noqa: F401
    except ImportError:
        return "the openai client is not installed (pip install 'nearid_lib[paper]')"
    if dbpp_root is None:
        return "no DreamBench++ download to read its GPT prompts from"
    try:
        read_prompts(dbpp_root)
    except GptPromptError as err:
        return str(err)
    return endpoint_reason(base_url)


def parse_score(text: str | None) -> int | None:
    """The score of an answer: the number after ``score:`` / ``Score:`` (a word may sit between),
    only when the answer holds exactly one; else None (the pair is asked again)."""
    found = _SCORE.findall(text or "")
    return int(found[0]) if len(found) == 1 else None


def encode_image(path: str | os.PathLike) -> str:
    """The image as the authors send it: 512 x 512 (bicubic, PIL's default), JPEG at PIL's default
    quality, base64 (RGB first: the authors' ``save`` fails on an RGBA / palette file)."""
    im = load_image(path).resize((IMAGE_PX, IMAGE_PX), Image.BICUBIC)
    buf = io.BytesIO()
    im.save(buf, format="JPEG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def messages(user_prompt: str, gpt_prompt: str, src_b64: str, tgt_b64: str) -> list[dict]:
    """The three chat messages (user prompt, assistant prompt, the two images; reference first)."""
    def img(b64: str) -> dict:
        return {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{b64}", "detail": "high"}}
    return [{"role": "user", "content": user_prompt}, {"role": "assistant", "content": gpt_prompt},
            {"role": "user", "content": [img(src_b64), img(tgt_b64)]}]


@dataclass(frozen=True)
class Pair:
    """One request: ``subject``, the reference ``src`` and the judged ``tgt`` image, the request's ``seed``."""

    subject: str
    src: str
    tgt: str
    seed: int

    @property
    def key(self) -> str:
        return f"{self.subject}|{self.src}|{self.tgt}"


def plan_pairs(queries: pd.DataFrame, sources: pd.DataFrame | None = None,
               seed: int = STREAM_SEED) -> list[Pair]:
    """The requests of one table and dataset in the authors' order and stream (module docstring).
    ``sources`` given (Table 1: the gallery; DreamBooth: the references): one of each subject's
    ``sources`` images x every query image of the subject; None: each query's own ``ref_path``."""
    rng = random.Random(int(seed))
    out = []
    for subject in dict.fromkeys(queries["name"]):
        q = queries[queries["name"] == subject]
        if sources is None:
            out += [Pair(str(subject), str(r), str(f), rng.randint(0, 100)) for r, f in zip(q.ref_path, q.file_path)]
            continue
        cands = sources[sources["name"] == subject]["file_path"].tolist()
        if not cands:
            raise ValueError(f"DB++ score: subject {subject!r} has no image to compare with")
        picked = rng.sample(cands, 1) if len(cands) > 1 else cands
        out += [Pair(str(subject), str(g), str(f), rng.randint(0, 100)) for g in picked for f in q.file_path]
    return out


def pairs_for(method: str, generated: pd.DataFrame, train: pd.DataFrame) -> list[Pair]:
    """A method's requests on one dataset: DreamBooth against one reference per subject (the
    authors pass the reference table as its gallery), the others against each image's ``ref_path``."""
    return plan_pairs(generated, train if method_key(method) == "dreambooth" else None)


def _request_errors() -> tuple[type[BaseException], ...]:
    """What one failed request raises: the client's errors (connection, timeout, HTTP status, a body
    it cannot validate), the socket's, and the lookups of a response without the expected fields."""
    errs: tuple[type[BaseException], ...] = (OSError, AttributeError, IndexError, KeyError, TypeError, ValueError)
    try:
        import openai
    except ImportError:
        return errs
    return (openai.OpenAIError, *errs)


class GptJudge:
    """The DB++ scorer (module docstring) with its answers cached in ``cache_dir/<fingerprint>/answers.jsonl``.
    ``client``: an ``openai.OpenAI`` (default: one for ``base_url`` and ``$OPENAI_API_KEY``, with
    the client's own retries of transport errors and rate limits). A pair whose request fails is
    recorded there as failed (``failed``: the reason) and asked again by the next run;
    ``max_failures`` failed pairs in a row raise :class:`GptUnavailableError`."""

    def __init__(self, user_prompt: str, gpt_prompt: str, cache_dir: str | os.PathLike, model: str = GPT_MODEL,
                 base_url: str | None = None, client=None, tries: int = TRIES, timeout: float = 120.0,
                 max_retries: int = 4, max_failures: int = MAX_FAILURES):
        if client is None:
            import openai

            client = openai.OpenAI(base_url=base_url or os.environ.get("OPENAI_BASE_URL") or None,
                                   api_key=os.environ.get("OPENAI_API_KEY") or "none", timeout=timeout,
                                   max_retries=max_retries)
        self.client, self.model, self.tries = client, model, int(tries)
        self.user_prompt, self.gpt_prompt = user_prompt, gpt_prompt
        fp = hashlib.sha256(json.dumps([model, str(getattr(client, "base_url", base_url)), user_prompt, gpt_prompt,
                                        IMAGE_PX]).encode()).hexdigest()[:12]
        self.path = Path(cache_dir) / fp / "answers.jsonl"
        self.url = str(getattr(client, "base_url", None) or api_url(base_url))
        self.requests = 0
        self.max_failures = int(max_failures)
        self._in_a_row = 0                          # failed pairs since the last answered one
        self._answers, self.failed = self._load()

    def _load(self) -> tuple[dict[str, dict], dict[str, dict]]:
        """``(answered, failed)`` records of the answers file by pair key; a pair answered after it
        failed is answered."""
        answered, failed = {}, {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                    key = rec["key"]
                except (json.JSONDecodeError, TypeError, KeyError):
                    continue                        # a line torn by a kill: that pair is asked again
                (failed if rec.get("failed") else answered)[key] = rec
        return answered, {k: v for k, v in failed.items() if k not in answered}

    def _append(self, rec: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell():
                fh.seek(fh.tell() - 1)
                if fh.read(1) != "\n":              # a torn last line must not swallow this record
                    fh.write("\n")
            fh.write(json.dumps(rec, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def ask(self, pair: Pair) -> dict:
        """The cached answer of ``pair``, or up to ``tries`` requests until one answer holds exactly
        one score (the first at the pair's seed, the others at seeds of a stream of the pair's own)."""
        if pair.key in self._answers:
            return self._answers[pair.key]
        # outside the request's error handling: an unreadable image is the data's fault, not the server's
        msgs = messages(self.user_prompt, self.gpt_prompt, encode_image(pair.src), encode_image(pair.tgt))
        retry = random.Random(f"{STREAM_SEED}|{pair.key}")
        texts, tokens, seeds = [], [0, 0], []
        score, failed = None, None
        for attempt in range(self.tries):
            seed = pair.seed if attempt == 0 else retry.randint(0, 100)
            self.requests += 1
            seeds.append(seed)
            try:
                c = self.client.chat.completions.create(model=self.model, messages=msgs, temperature=1, seed=seed)
                text = c.choices[0].message.content or ""
                use = getattr(c, "usage", None)
                used = (int(getattr(use, "prompt_tokens", 0) or 0), int(getattr(use, "completion_tokens", 0) or 0))
            except _request_errors() as err:
                failed = f"{type(err).__name__}: {err}".splitlines()[0][:300]
                break
            texts.append(text)
            tokens[0] += used[0]
            tokens[1] += used[1]
            score = parse_score(text)
            if score is not None:
                break
        rec = {"key": pair.key, "subject": pair.subject, "src": pair.src, "tgt": pair.tgt, "seeds": seeds,
               "score": score, "answers": texts, "prompt_tokens": tokens[0], "completion_tokens": tokens[1],
               "model": self.model, "time": time.time()}
        if failed:
            # kept out of the answers, so the next run (a new GptJudge on this file) asks the pair again
            rec["failed"] = failed
            self._append(rec)
            self.failed[pair.key] = rec
            self._in_a_row += 1
            if self._in_a_row >= self.max_failures:
                raise GptUnavailableError(
                    f"{self._in_a_row} requests in a row to the GPT server {self.url} failed, the last: {failed}. "
                    f"The {len(self._answers)} answered pairs are kept in {self.path} (one JSON line each; the "
                    f"failed ones marked 'failed'); rerun when the server answers: answered pairs are not asked "
                    f"again, failed ones are")
            return rec
        self._in_a_row = 0
        self._append(rec)
        self._answers[pair.key] = rec
        self.failed.pop(pair.key, None)
        return rec

    def score(self, pairs: Sequence[Pair]) -> pd.DataFrame:
        """One row per pair: ``subject``, ``src``, ``tgt``, ``score`` (x 0.25; NaN when no answer held
        one or the request failed), ``attempts``, tokens, ``failed`` (why the request failed, else None)."""
        rows = []
        for p in pairs:
            r = self.ask(p)
            rows.append({"subject": p.subject, "src": p.src, "tgt": p.tgt,
                         "score": np.nan if r["score"] is None else SCORE_SCALE * r["score"],
                         "attempts": len(r["answers"]), "prompt_tokens": r["prompt_tokens"],
                         "completion_tokens": r["completion_tokens"], "failed": r.get("failed")})
        return pd.DataFrame(rows, columns=["subject", "src", "tgt", "score", "attempts", "prompt_tokens",
                                           "completion_tokens", "failed"])


def subject_scores(rows: pd.DataFrame) -> tuple[float, int, int]:
    """``(score, n_subjects, n_unanswered)``: the mean over subjects of each subject's mean pair score
    (pairs without a score left out and counted), the authors' aggregation."""
    ok = rows.dropna(subset=["score"])
    per = ok.groupby("subject", sort=False)["score"].mean()
    return (float(per.mean()) if len(per) else float("nan")), int(len(per)), int(rows["score"].isna().sum())
