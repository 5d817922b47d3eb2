"""A VLM judge (Qwen3-VL through transformers) as an encoder-like pair scorer (NearID Appendix E.11).

The judge sees two images, is told to ignore the background and to use only instance-level evidence,
and answers with a JSON object holding a 0-10 ``score``; the score is mapped to a similarity proxy
``s = score / 10`` so that the same SSR/PA and correlation protocols apply to it as to embeddings.

Coverage is first-class: an answer that cannot be parsed (free text, JSON cut off by the token budget,
no score, a score outside the rubric) gets ``s = NaN`` and a status saying why; nothing is silently
dropped or clipped. Metrics are then computed on the covered pairs (``metrics.ssr_pa`` drops trials with
a NaN similarity) and the coverage is reported beside them.

Public API::

    judge = VLMJudge.from_pretrained("Qwen/Qwen3-VL-30B-A3B-Instruct", device="cuda")
    judge = VLMJudge.tiny()                   # random-init tiny Qwen3-VL, offline (tests / smoke)
    res = judge.score_pairs(images_a, images_b)   # JudgeScores: .scores [M] in [0,1] or NaN,
                                                  #   .status, .raw, .coverage, .summary()
    parse_judge_answer(text) -> ParsedAnswer  # the robust parser, usable on saved answers
"""
from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

__all__ = ["JUDGE_PROMPT", "ParsedAnswer", "JudgeScores", "VLMJudge", "parse_judge_answer",
           "PARSED_STATUSES", "STATUSES", "build_tiny_qwen3vl"]

# Our wording of the structure of the paper's Figure 10 prompt: instance (not category) identity,
# background excluded as evidence, an evidence hierarchy, a 0-10 rubric, JSON only.
JUDGE_PROMPT = """You judge INSTANCE identity: whether two images show the same physical object, not merely the same kind of object.

Image A and Image B follow.

Task: decide whether A and B depict the SAME individual object instance. Background, scene, framing, viewpoint and lighting may differ and are NOT evidence.

Rules:
- Never use the background or the scene as evidence, even when it is identical in both images.
- Category-level similarity ("both are red", "both are mugs") is not evidence of the same instance.
- Use only cues on the object itself, in this order: (1) unique markings (decals, stains, scratches, spots, stripes), (2) fine geometry and parts (shape of parts, proportions, seams), (3) readable text or logos, (4) colour only when it forms a distinctive pattern.
- If the object is small, blurred or occluded, give about 5 and say the evidence is insufficient.

Score rubric (0-10): 10 = certainly the same instance; 7-9 = likely the same; 4-6 = uncertain; 1-3 = likely different instances; 0 = certainly different instances.

Answer with ONE JSON object and nothing else, no markdown fences:
{"match_cues": ["..."], "conflict_cues": ["..."], "background_used": false, "confidence": "high" | "medium" | "low", "score": <number 0-10>}
The score must be a number. Keep the cue lists short."""

# Statuses of one answer. The first two count as covered (a score was read).
PARSED_STATUSES = ("ok", "recovered")
STATUSES = ("ok", "recovered", "truncated", "no_score", "bad_score", "out_of_range", "unparseable", "empty")

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
# a "score" key with a number that is *finished*: followed by a delimiter, so a truncated "1" of "10"
# is not read as 1
_SCORE_KV = re.compile(r"""["']?\bscore["']?\s*[:=]\s*["']?\s*(""" + _NUM + r""")\s*(?:/\s*10(?:\.0*)?)?\s*["']?\s*(?=[,}\n\r]|$)""",
                       re.IGNORECASE)
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)(?:```|$)", re.DOTALL)


@dataclass(frozen=True)
class ParsedAnswer:
    """One parsed judge answer: ``score`` on 0-10 (None unless covered), ``status``, the JSON
    object when one was read (``data``), and a short ``note`` on what was repaired."""

    score: float | None
    status: str
    data: dict | None = None
    note: str = ""

    @property
    def covered(self) -> bool:
        return self.status in PARSED_STATUSES

    @property
    def similarity(self) -> float:
        """``score / 10``, NaN when not covered."""
        return self.score / 10.0 if self.covered and self.score is not None else float("nan")


def _strip_fences(text: str) -> str:
    m = _FENCE.search(text)
    return m.group(1) if m else text


def _coerce_score(v: Any) -> tuple[float | None, str]:
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
        return _coerce_score(v[0])
    else:
        return None, "bad_score"
    if not math.isfinite(f):
        return None, "bad_score"
    if f < 0 or f > 10:
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


def _score_key(d: dict) -> Any:
    for k, v in d.items():
        if isinstance(k, str) and k.strip().lower() == "score":
            return v
    return _MISSING


_MISSING = object()


def parse_judge_answer(text: str | None) -> ParsedAnswer:
    """Read the 0-10 score from a judge answer, robustly, and say how it was read.

    Handles markdown code fences, text before/after the object, several objects (the first with a
    ``score`` wins), trailing commas, single quotes / Python literals, numbers as strings ("7",
    "7/10"). Statuses: ``ok`` (a JSON object with a valid score), ``recovered`` (no valid object, but
    a complete ``"score": N`` was found, e.g. in JSON cut off after the score, or in free text),
    ``truncated`` (an object opened but never closed, no complete score), ``no_score`` (an object
    without a score key), ``bad_score`` (a score that is not a number), ``out_of_range`` (outside
    0-10: not clipped, since an answer off the rubric is not a reading of it), ``unparseable``,
    ``empty``. Only ``ok`` and ``recovered`` are covered."""
    if text is None or not str(text).strip():
        return ParsedAnswer(None, "empty")
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
        v = _score_key(d)
        if v is _MISSING:
            first_bad = first_bad or ParsedAnswer(None, "no_score", d, ";".join(notes))
            continue
        if isinstance(v, str):
            notes.append("score_as_string")
        f, why = _coerce_score(v)
        if why == "ok":
            if body.strip() != o.strip():
                notes.append("extra_text")
            return ParsedAnswer(f, "ok", d, ";".join(notes))
        first_bad = first_bad or ParsedAnswer(f if why == "out_of_range" else None, why, d,
                                              ";".join(notes))
    if first_bad is not None:
        return first_bad
    # No complete object with a usable score: look for a finished "score": N anywhere.
    m = _SCORE_KV.search(body)
    if m and m.end() >= len(body.rstrip()) and "{" in body and not objs:
        # the answer was cut off right after a number: "score": 1 may be the start of 10
        m = None
    if m:
        f, why = _coerce_score(m.group(1))
        if why == "ok":
            return ParsedAnswer(f, "recovered", None, ";".join(notes + ["regex"]))
        return ParsedAnswer(f if why == "out_of_range" else None, why, None, ";".join(notes + ["regex"]))
    if "{" in body and not objs:
        return ParsedAnswer(None, "truncated", None, ";".join(notes))
    bare = re.fullmatch(r"\s*(" + _NUM + r")\s*(?:/\s*10(?:\.0*)?)?\s*", body)
    if bare:
        f, why = _coerce_score(bare.group(1))
        return ParsedAnswer(f if why != "bad_score" else None, "recovered" if why == "ok" else why, None,
                            ";".join(notes + ["bare_number"]))
    return ParsedAnswer(None, "unparseable", None, ";".join(notes))


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
    def from_answers(cls, answers: Sequence[str], hit_limit: Sequence[bool] | None = None) -> "JudgeScores":
        parsed = [parse_judge_answer(a) for a in answers]
        return cls(scores=np.array([p.similarity for p in parsed], dtype=np.float64),
                   status=[p.status for p in parsed], raw=list(answers),
                   hit_limit=np.asarray(hit_limit if hit_limit is not None else [False] * len(parsed), bool))

    @classmethod
    def concat(cls, parts: Sequence["JudgeScores"]) -> "JudgeScores":
        if not parts:
            return cls(np.zeros(0), [], [], np.zeros(0, bool))
        return cls(np.concatenate([p.scores for p in parts]), sum((p.status for p in parts), []),
                   sum((p.raw for p in parts), []), np.concatenate([p.hit_limit for p in parts]))


# --------------------------------------------------------------------------------------------- model
_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
             "<|image_pad|>", "<|video_pad|>"]
# Qwen's chat layout, reduced to what the judge sends (text and images in one user turn).
_TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|>"
    "<|vision_end|>{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_tiny_qwen3vl(seed: int = 0, vocab_size: int = 400, image_px: int = 64):
    """A random-init tiny ``Qwen3VLForConditionalGeneration`` and a real ``Qwen3VLProcessor``, offline.

    No hub files are needed: the tokenizer is a byte-level BPE trained on the judge prompt (so the
    prompt tokenises into real sub-words) with Qwen's special tokens; the image processor is
    ``Qwen2VLImageProcessor`` with small pixel bounds. The model's answers are random text, so
    parsing failures are the expected case."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from .models._compat import ensure_torchvision

    ensure_torchvision()
    from transformers import (PreTrainedTokenizerFast, Qwen3VLConfig, Qwen3VLForConditionalGeneration,
                              Qwen3VLProcessor)
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=_SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([JUDGE_PROMPT, '{"score": 7, "confidence": "high"}'], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.padding_side = "left"      # decoder-only batched generation pads on the left
    patch, merge = 16, 2
    ip = Qwen2VLImageProcessor(patch_size=patch, merge_size=merge, temporal_patch_size=2,
                               min_pixels=(patch * merge) ** 2, max_pixels=image_px * image_px)
    vp = Qwen3VLVideoProcessor(patch_size=patch, merge_size=merge, temporal_patch_size=2)
    proc = Qwen3VLProcessor(image_processor=ip, tokenizer=fast, video_processor=vp,
                            chat_template=_TINY_CHAT_TEMPLATE)
    ids = {k: fast.convert_tokens_to_ids(k) for k in _SPECIALS}
    cfg = Qwen3VLConfig(
        text_config=dict(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                         max_position_embeddings=1024, eos_token_id=ids["<|im_end|>"],
                         pad_token_id=ids["<|endoftext|>"],
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "mrope_section": [2, 3, 3], "mrope_interleaved": True}),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=patch,
                           spatial_merge_size=merge, temporal_patch_size=2, out_hidden_size=32,
                           num_position_embeddings=64, deepstack_visual_indexes=[1]),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(cfg).eval()
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    return model, proc


class VLMJudge:
    """Pairwise instance-identity judge: ``score_pairs(A, B) -> JudgeScores`` (s = score/10).

    Args:
        model: a transformers image-text-to-text model (Qwen3-VL) in eval mode.
        processor: its processor (chat template + image processor + tokenizer).
        max_new_tokens: generation budget; the paper uses 512 because the JSON answer is ~250 tokens
            and a shorter budget truncates answers (then counted as not covered, never dropped).
        batch_size: pairs per ``generate`` call.
        prompt: the instruction text (default :data:`JUDGE_PROMPT`).
        image_size: if set, images are resized to this square size before the processor.
        name: label used in tables.
    """

    def __init__(self, model, processor, max_new_tokens: int = 512, batch_size: int = 4,
                 prompt: str = JUDGE_PROMPT, image_size: int | None = None, name: str = "qwen3-vl"):
        self.model, self.processor = model, processor
        self.max_new_tokens, self.batch_size = int(max_new_tokens), int(batch_size)
        self.prompt, self.image_size, self.name = prompt, image_size, name
        tok = getattr(processor, "tokenizer", None)
        if tok is not None:
            tok.padding_side = "left"

    # -- construction
    @classmethod
    def from_pretrained(cls, name_or_path: str, device: str = "cpu", dtype: str = "bfloat16",
                        trust_remote_code: bool = False, attn_implementation: str | None = None,
                        **kw) -> "VLMJudge":
        """Load a Qwen3-VL checkpoint (hub id or local folder) with ``AutoModelForImageTextToText``.
        ``trust_remote_code`` stays off unless explicitly requested (Qwen3-VL is native in transformers)."""
        import torch

        from .models._compat import ensure_torchvision

        ensure_torchvision()
        from transformers import AutoModelForImageTextToText, AutoProcessor

        mk = {"dtype": getattr(torch, dtype), "trust_remote_code": trust_remote_code}
        if attn_implementation:
            mk["attn_implementation"] = attn_implementation
        model = AutoModelForImageTextToText.from_pretrained(name_or_path, **mk).to(device).eval()
        proc = AutoProcessor.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
        return cls(model, proc, name=name_or_path.split("/")[-1], **kw)

    @classmethod
    def tiny(cls, seed: int = 0, max_new_tokens: int = 24, batch_size: int = 2, **kw) -> "VLMJudge":
        """The judge on a random-init tiny Qwen3-VL (offline): exercises the real code path."""
        model, proc = build_tiny_qwen3vl(seed=seed)
        return cls(model, proc, max_new_tokens=max_new_tokens, batch_size=batch_size, image_size=64,
                   name="qwen3-vl-tiny", **kw)

    # -- scoring
    def _messages(self) -> list[dict]:
        return [{"role": "user", "content": [
            {"type": "text", "text": self.prompt + "\n\nImage A:"}, {"type": "image"},
            {"type": "text", "text": "\nImage B:"}, {"type": "image"},
            {"type": "text", "text": "\nReturn the JSON object now."}]}]

    def _prep(self, im):
        im = im.convert("RGB")
        if self.image_size:
            im = im.resize((self.image_size, self.image_size))
        return im

    def generate(self, images_a: Sequence, images_b: Sequence) -> tuple[list[str], list[bool]]:
        """Raw answers for aligned pairs (batched greedy decoding) and whether each hit the budget."""
        import torch

        if len(images_a) != len(images_b):
            raise ValueError(f"VLMJudge: {len(images_a)} images A but {len(images_b)} images B")
        text = self.processor.apply_chat_template(self._messages(), add_generation_prompt=True, tokenize=False)
        dev = next(self.model.parameters()).device
        eos = self.model.generation_config.eos_token_id
        eos = set(eos if isinstance(eos, (list, tuple)) else [eos])
        answers, hit = [], []
        for b0 in range(0, len(images_a), self.batch_size):
            a = images_a[b0:b0 + self.batch_size]
            b = images_b[b0:b0 + self.batch_size]
            imgs = [[self._prep(x), self._prep(y)] for x, y in zip(a, b)]
            inputs = self.processor(text=[text] * len(imgs), images=imgs, padding=True, return_tensors="pt")
            inputs = {k: (v.to(dev) if hasattr(v, "to") else v) for k, v in inputs.items()}
            with torch.no_grad():
                out = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False)
            new = out[:, inputs["input_ids"].shape[1]:]              # [b, <= max_new_tokens]
            answers += self.processor.batch_decode(new, skip_special_tokens=True)
            for row in new.tolist():
                # budget hit = the row is full length and never emitted an end token
                hit.append(len(row) >= self.max_new_tokens and not any(t in eos for t in row))
        return answers, hit

    def score_pairs(self, images_a: Sequence, images_b: Sequence) -> JudgeScores:
        """Judge every pair (A_k, B_k): scores s = score/10 with NaN (and a status) where no score
        could be read."""
        answers, hit = self.generate(images_a, images_b)
        return JudgeScores.from_answers(answers, hit)

    def __repr__(self) -> str:
        return f"VLMJudge({self.name!r}, max_new_tokens={self.max_new_tokens}, batch_size={self.batch_size})"
