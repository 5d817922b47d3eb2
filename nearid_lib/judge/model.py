"""The VLM judge's model (NearID Appendix E.11): :class:`VLMJudge`, a transformers image-text-to-text
model (Qwen3-VL) that sees two images and answers a JSON object, as a pair scorer; the NearID prompt
:data:`JUDGE_PROMPT`; and :func:`build_tiny_qwen3vl`, a random-init tiny Qwen3-VL with a real
processor that runs offline (tests, smoke). The answers are read by :mod:`nearid_lib.judge.answers`.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Sequence

import torch

from .. import hub
from ..runtime.compat import ensure_torchvision
from .answers import AUTHORS_KEYS, JudgeScores
from .plan import prompt_path

__all__ = ["JUDGE_PROMPT", "VLMJudge", "LazyJudge", "build_tiny_qwen3vl", "read_prompt_file"]

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

# --------------------------------------------------------------------------------------------- model
_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
             "<|image_pad|>", "<|video_pad|>"]
# Qwen's chat layout, reduced to what the judge sends (text and images in one user turn).
_TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|>"
    "<|vision_end|>{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_tiny_qwen3vl(seed: int = 0, vocab_size: int = 400, image_px: int = 64, extra_text: str = ""):
    """A random-init tiny ``Qwen3VLForConditionalGeneration`` and a real ``Qwen3VLProcessor``, offline.

    No hub files are needed: the tokenizer is a byte-level BPE trained on the judge prompt (so the
    prompt tokenises into real sub-words) with Qwen's special tokens; the image processor is
    ``Qwen2VLImageProcessor`` with small pixel bounds. The model's answers are random text, so
    parsing failures are the expected case."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    ensure_torchvision()
    from transformers import PreTrainedTokenizerFast, Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=_SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([JUDGE_PROMPT, *([extra_text] if extra_text else []),
                             '{"score": 7, "confidence": "high"}'], trainer)
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


def read_prompt_file(path: str | os.PathLike) -> str:
    """A judge instruction from a text file (``judge.prompt_file``; e.g. the NearID authors'
    ``evaluation/vl_template_v2.txt``), stripped as their code reads it; a missing or empty file is
    an error naming it."""
    p = prompt_path(path)
    try:
        text = p.read_text(encoding="utf-8").strip()
    except OSError as err:
        raise FileNotFoundError(f"judge.prompt_file {p}: cannot read it ({err}); the NearID authors' template is "
                                f"evaluation/vl_template_v2.txt of their GitHub release ($NEARID_DOWNLOADS/NearID)") from None
    if not text:
        raise ValueError(f"judge.prompt_file {p} is empty")
    return text


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
        prompt_after_images: send image A, image B, then the prompt text (the NearID authors'
            layout for their template file, :func:`read_prompt_file`); default: our prompt first.
        answer_key, answer_max: the numeric field of the JSON answer that is read and its range
            ``[0, answer_max]`` (default: NearID's 0-10 ``score``; ID-Sim's judge reads a 0-1
            ``similarity``, :mod:`nearid_lib.idsim.mllm`).
        parsing: ``"strict"`` (an answer off the rubric is not covered) or ``"authors"`` (the NearID
            authors' reading: ``score``, else ``similarity``, clipped to ``[0, answer_max]`` with
            status ``clipped``; :func:`~nearid_lib.judge.answers.parse_judge_answer`).
    """

    def __init__(self, model, processor, max_new_tokens: int = 512, batch_size: int = 4,
                 prompt: str = JUDGE_PROMPT, image_size: int | None = None, name: str = "qwen3-vl",
                 answer_key: str = "score", answer_max: float = 10.0, prompt_after_images: bool = False,
                 parsing: str = "strict"):
        self.model, self.processor = model, processor
        # the authors' template (evaluation/vl_template_v2.txt) is sent after image A and image B
        self.prompt_after_images = bool(prompt_after_images)
        self.answer_key, self.answer_max = answer_key, float(answer_max)
        if parsing not in ("strict", "authors"):
            raise ValueError(f"VLMJudge: parsing must be 'strict' or 'authors', got {parsing!r}")
        self.parsing = parsing
        self.max_new_tokens, self.batch_size = int(max_new_tokens), int(batch_size)
        self.prompt, self.image_size, self.name = prompt, image_size, name
        tok = getattr(processor, "tokenizer", None)
        if tok is not None:
            tok.padding_side = "left"

    # -- construction
    @classmethod
    def from_pretrained(cls, name_or_path: str, device: str = "cpu", dtype: str = "bfloat16",
                        trust_remote_code: bool = False, attn_implementation: str | None = None,
                        device_map: str | dict | None = None, max_memory: dict | None = None,
                        **kw) -> "VLMJudge":
        """Load a Qwen3-VL checkpoint (hub id or local folder, through :func:`nearid_lib.hub.model_source`)
        with ``AutoModelForImageTextToText``: on ``device``, or spread with ``device_map`` (the
        authors' ``"auto"``) over the GPUs ``max_memory`` allows (one replica of
        :func:`~nearid_lib.judge.plan.device_kwargs`). ``trust_remote_code`` stays off unless
        explicitly requested (Qwen3-VL is native in transformers)."""
        ensure_torchvision()
        from transformers import AutoModelForImageTextToText, AutoProcessor

        path, hk = hub.model_source(name_or_path)     # NEARID_HUB_DIR mirror / pinned revision
        hub.note_load(name_or_path, "VLM judge")
        mk = {"dtype": getattr(torch, dtype), "trust_remote_code": trust_remote_code, **hk}
        if attn_implementation:
            mk["attn_implementation"] = attn_implementation
        if device_map is not None:
            model = AutoModelForImageTextToText.from_pretrained(path, device_map=device_map, max_memory=max_memory,
                                                                **mk).eval()
        else:
            model = AutoModelForImageTextToText.from_pretrained(path, **mk).to(device).eval()
        proc = AutoProcessor.from_pretrained(path, trust_remote_code=trust_remote_code, **hk)
        return cls(model, proc, name=name_or_path.split("/")[-1], **kw)

    @classmethod
    def tiny(cls, seed: int = 0, max_new_tokens: int = 24, batch_size: int = 2, **kw) -> "VLMJudge":
        """The judge on a random-init tiny Qwen3-VL (offline): exercises the real code path."""
        model, proc = build_tiny_qwen3vl(seed=seed, extra_text=kw.get("prompt", ""))
        return cls(model, proc, max_new_tokens=max_new_tokens, batch_size=batch_size, image_size=64,
                   name="qwen3-vl-tiny", **kw)

    # -- scoring
    def _messages(self) -> list[dict]:
        if self.prompt_after_images:
            return [{"role": "user", "content": [{"type": "image"}, {"type": "image"},
                                                 {"type": "text", "text": self.prompt}]}]
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
        if len(images_a) != len(images_b):
            raise ValueError(f"VLMJudge: {len(images_a)} images A but {len(images_b)} images B")
        text = self.processor.apply_chat_template(self._messages(), add_generation_prompt=True, tokenize=False)
        dev = next(self.model.parameters()).device       # the first shard's under a device_map
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
        authors = self.parsing == "authors"
        return JudgeScores.from_answers(answers, hit, key=self.answer_key, hi=self.answer_max, clip=authors,
                                        fallback_keys=tuple(k for k in AUTHORS_KEYS if k != self.answer_key)
                                        if authors else ())

    def fingerprint(self) -> dict[str, Any]:
        """What decides its answers besides the images: an answers folder is only reused by the
        same judge (:func:`~nearid_lib.judge.shards.score_pairs_sharded`)."""
        return {"name": self.name, "max_new_tokens": self.max_new_tokens, "image_size": self.image_size,
                "answer_key": self.answer_key, "answer_max": self.answer_max,
                "prompt_sha1": hashlib.sha1(self.prompt.encode()).hexdigest()[:12],
                **({"prompt_after_images": True} if self.prompt_after_images else {}),
                **({"parsing": self.parsing} if self.parsing != "strict" else {})}

    def __repr__(self) -> str:
        return f"VLMJudge({self.name!r}, max_new_tokens={self.max_new_tokens}, batch_size={self.batch_size})"


class LazyJudge:
    """A judge whose weights load at its first pair and are freed by :meth:`release`, so that the
    profile's judge scales (Table 7: 4B, 8B, 30B) occupy the GPUs one after another, never together,
    and a judge whose answers are all kept loads nothing. Everything but scoring (its name, its
    fingerprint, which key its answers folder) comes from the weightless ``shell``."""

    def __init__(self, shell, load):
        self._shell, self._load, self._real = shell, load, None

    def __getattr__(self, name):
        return getattr(self._real if self._real is not None else self._shell, name)

    @property
    def loaded(self) -> bool:
        """Whether the weights are in memory now."""
        return self._real is not None

    def score_pairs(self, images_a, images_b):
        if self._real is None:
            self._real = self._load()
        return self._real.score_pairs(images_a, images_b)

    def release(self) -> None:
        """Free the weights (and the GPU memory they held); the next pair loads them again."""
        if self._real is not None:
            self._real = None
            import gc

            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
