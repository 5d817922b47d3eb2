"""The VLM judge entry of the GPU suite: Qwen3-VL-30B-A3B at its released configuration (random
weights, bf16, built on the GPU) through the library's ``VLMJudge.generate`` -- the chat template, the
processor on two 512 px views, batched greedy decoding -- at several batch sizes.

Per batch B: ``t(1)`` = one call with a budget of one new token (prefill + one step) and ``t(N)``
with N; the decode step is ``(t(N) - t(1)) / (N - 1)``, the prefill ``t(1)`` less one step. Random
weights never emit the end token (it is switched off), so every call decodes exactly its budget; pairs
per second are then projected at the paper's answer length (~250 tokens, NearID E.11 and
``eval.vlm_max_new_tokens``' comment) and at the 512-token budget (a batch runs until its longest
answer stops). Prompt: the library's ``JUDGE_PROMPT`` (the authors' template is of similar length;
it is not shipped here); its text tokens come from the offline tokenizer (a 400-piece BPE: about
twice as many tokens as Qwen's 151k vocabulary would give, so the prefill is overstated, not
understated); the image tokens are exact (a 512 px view is 16 x 16 merged patches = 256 tokens).
"""
from __future__ import annotations

import torch

from gpu_suite_core import Ctx, peak_gb, photo, reset_peak, timed
from gpu_suite_models import describe, qwen3vl_judge

ANSWER_TOKENS = 250          # NearID App. E.11: the JSON answer is ~250 tokens
BUDGET_TOKENS = 512          # eval.vlm_max_new_tokens (paper profile)


def judge(ctx: Ctx) -> dict:
    """Build the 30B judge on the device, then prefill / decode rates and pairs per second per batch."""
    from nearid_lib.judge.model import JUDGE_PROMPT, VLMJudge

    reset_peak(ctx.dev)
    (model, proc), build_s = timed(ctx.dev, lambda: qwen3vl_judge(ctx.S, JUDGE_PROMPT, ctx.dev, ctx.dtype))
    weights_gb = peak_gb(ctx.dev)
    model.generation_config.eos_token_id = None           # fixed lengths: never stop early
    px = 64 if ctx.tiny else 512
    batches = (1, 2) if ctx.tiny else (1, 8, 32)
    N = 5 if ctx.tiny else 17
    imgs_a = [photo(i, px) for i in range(max(batches))]
    imgs_b = [photo(100 + i, px) for i in range(max(batches))]
    jd = VLMJudge(model, proc, max_new_tokens=1, batch_size=1, name="qwen3-vl-30b-a3b (random init)")
    text = proc.apply_chat_template(jd._messages(), add_generation_prompt=True, tokenize=False)
    enc = proc(text=[text], images=[[imgs_a[0], imgs_b[0]]], return_tensors="pt")
    n_in = int(enc["input_ids"].shape[1])
    n_img = int((enc["input_ids"] == model.config.image_token_id).sum())

    def call(b: int, new: int) -> float:
        jd.batch_size, jd.max_new_tokens = b, new
        return timed(ctx.dev, lambda: jd.generate(imgs_a[:b], imgs_b[:b]))[1]

    call(1, 2)                                              # warm-up: kernels, allocator
    rows = []
    for b in batches:
        reset_peak(ctx.dev)
        try:
            t1, tn = call(b, 1), call(b, N)
        except torch.OutOfMemoryError as err:
            rows.append({"batch": b, "oom": str(err).splitlines()[0]})
            break
        step = max(1e-9, (tn - t1) / (N - 1))
        pre = max(1e-9, t1 - step)
        rows.append({"batch": b, "t_budget1_s": t1, f"t_budget{N}_s": tn, "prefill_s": pre, "decode_step_s": step,
                     "prefill_tok_per_s": b * n_in / pre, "decode_tok_per_s": b / step,
                     f"pairs_per_s_at_{ANSWER_TOKENS}_tokens": b / (pre + ANSWER_TOKENS * step),
                     f"pairs_per_s_at_{BUDGET_TOKENS}_tokens": b / (pre + BUDGET_TOKENS * step),
                     "peak_mem_gb": peak_gb(ctx.dev)})
    ok = [r for r in rows if "oom" not in r]
    best = max(ok, key=lambda r: r[f"pairs_per_s_at_{ANSWER_TOKENS}_tokens"]) if ok else None
    total_gb = torch.cuda.get_device_properties(ctx.dev).total_memory / 1e9 if ctx.cuda else None
    impl = getattr(model.config.text_config, "_experts_implementation", None)
    return {"stands_for": "make judge: Qwen3-VL-30B-A3B on every NearID-bench pair (NearID Table 1/5's VLM row)",
            "sizes": {"model": describe(model), "experts_implementation": impl, "view_px": px,
                      "prompt_tokens": n_in, "image_tokens": n_img, "text_tokens": n_in - n_img,
                      "text_chars": len(JUDGE_PROMPT), "decode_budget_measured": N},
            "build_s": round(build_s, 2), "weights_gb": weights_gb, "batches": rows,
            "best_batch": best and best["batch"],
            f"pairs_per_s_at_{ANSWER_TOKENS}_tokens": best and best[f"pairs_per_s_at_{ANSWER_TOKENS}_tokens"],
            f"pairs_per_s_at_{BUDGET_TOKENS}_tokens": best and best[f"pairs_per_s_at_{BUDGET_TOKENS}_tokens"],
            "replicas_per_gpu": (int(total_gb // best["peak_mem_gb"]) if total_gb and best and best["peak_mem_gb"]
                                 else None),
            "gpu_memory_gb": total_gb}
