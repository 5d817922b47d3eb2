"""The FPR generation entries of the GPU suite: one image per personalization method through the
library's ``personalize.generate_image`` at the paper's settings (native resolution, guidance, the
reference, the diptych's panels) with fewer denoising steps, scaled to the paper's step count, and
DreamBooth's training step (full fine-tune and LoRA) through ``dreambooth.train_dreambooth``.

Scaling: after a warm-up call, the method runs at n1 and n2 steps; the step costs
``(t(n2) - t(n1)) / (n2 - n1)``, the rest of a call (text encoders, VAE, image encoder) is
``t(n1) - n1 * step``, and a paper image is that rest plus the paper's steps. DreamBooth training:
``train_dreambooth`` with 1 and 3 steps, the same difference (the rest: prompt embedding, the fp32
copy of the transformer, the optimiser), projected to the paper's 800 steps per subject.
Pipelines are the real diffusers classes at the released configurations, random weights in bf16,
built on the GPU (``gpu_suite_models``); the IP-Adapter weights are written in the original file
layout and loaded with ``load_ip_adapter``, as the paper path loads them.
"""
from __future__ import annotations

from gpu_suite_core import Ctx, peak_gb, photo, reset_peak, timed
from gpu_suite_models import describe, flux_pipeline, flux_text, sd3_pipeline, sdxl_pipeline

STEPS_TINY, STEPS_GPU = (1, 2), (2, 4)
CLS = "leopard"


def _scaled(ctx: Ctx, run, paper_steps: int) -> dict:
    """Seconds per image at ``paper_steps`` from two step counts (module docstring)."""
    n1, n2 = STEPS_TINY if ctx.tiny else STEPS_GPU
    if not ctx.tiny:
        run(1)                                                   # warm-up: kernels, allocator
    reset_peak(ctx.dev)
    t1 = timed(ctx.dev, lambda: run(n1))[1]
    t2 = timed(ctx.dev, lambda: run(n2))[1]
    step = max(0.0, (t2 - t1) / (n2 - n1))
    rest = max(0.0, t1 - n1 * step)
    return {"steps_measured": [n1, n2], "seconds_measured": [t1, t2], "s_per_step": step, "s_rest": rest,
            "paper_steps": paper_steps, "s_per_image": rest + paper_steps * step, "peak_mem_gb": peak_gb(ctx.dev)}


def _image(ctx: Ctx, key: str, pipe, build_s: float, what: str) -> dict:
    from nearid_lib.generate.personalize import METHODS, fpr_prompts, generate_image

    spec = METHODS[key]
    prompt = fpr_prompts(CLS, token="sks" if key == "dreambooth" else None)[0]
    ref = photo(3, 512)
    px = 32 if ctx.tiny else None                                   # None: the method's native size
    res = _scaled(ctx, lambda n: generate_image(key, pipe, prompt, ref, 0, cls=CLS, px=px, steps=n), spec.steps)
    return {"stands_for": f"{spec.name}: 10 images x 80 subjects (FPR Tables 2, 5-13)", "build_s": round(build_s, 2),
            "sizes": {"pipeline": spec.pipeline, **describe(pipe), "what": what,
                      "px": px or "native", "guidance": spec.guidance}, **res}


def _ip_adapter(ctx: Ctx, plus: bool) -> dict:
    from tools.tiny_models.pipelines import IP_ADAPTER_WEIGHT_NAMES, write_tiny_ip_adapter

    pipe, build_s = timed(ctx.dev, lambda: sdxl_pipeline(ctx.S, "ipa_vit_h" if plus else "ipa_vit_g", ctx.dev, ctx.dtype))
    folder = ctx.work / ("ipa_plus" if plus else "ipa")
    _, w_s = timed(ctx.dev, lambda: write_tiny_ip_adapter(folder, pipe, plus=plus))   # the original file layout
    _, l_s = timed(ctx.dev, lambda: pipe.load_ip_adapter(str(folder), subfolder="sdxl_models", image_encoder_folder=None,
                                                        weight_name=IP_ADAPTER_WEIGHT_NAMES[plus]))
    pipe.set_ip_adapter_scale(0.6)
    key = "ip_adapter_plus" if plus else "ip_adapter"
    out = _image(ctx, key, pipe, build_s, "SDXL UNet + IP-Adapter" + ("-Plus (ViT-H)" if plus else " (ViT-G)"))
    out.update(adapter_write_s=round(w_s, 2), adapter_load_s=round(l_s, 2))
    return out


def ip_adapter(ctx: Ctx) -> dict:
    """IP-Adapter ViT-G on SDXL: 1024 px, 50 steps, CFG 5, adapter scale 0.6."""
    return _ip_adapter(ctx, False)


def ip_adapter_plus(ctx: Ctx) -> dict:
    """IP-Adapter-Plus ViT-H on SDXL: 1024 px, 50 steps, CFG 5, adapter scale 0.6."""
    return _ip_adapter(ctx, True)


def _flux(ctx: Ctx, fill: bool) -> dict:
    text, text_s = ctx.share("flux_text", lambda: flux_text(ctx.S, ctx.dev, ctx.dtype))
    pipe, tr_s = timed(ctx.dev, lambda: flux_pipeline(ctx.S, text, fill, ctx.dev, ctx.dtype))
    key = "diptych" if fill else "flux_kontext"
    out = _image(ctx, key, pipe, text_s + tr_s,
                 "FLUX.1 Fill, two 784 px panels" if fill else "FLUX.1 Kontext, 1024 px output + reference")
    out["text_stack_shared"] = text_s == 0.0
    return out


def flux_kontext(ctx: Ctx) -> dict:
    """FLUX.1 Kontext: the reference (512 px, snapped to Kontext's ~1 MP), 30 steps, guidance 5."""
    return _flux(ctx, False)


def diptych(ctx: Ctx) -> dict:
    """Diptych over FLUX.1 Fill: reference left, right panel inpainted, 30 steps, guidance 3.5."""
    return _flux(ctx, True)


def _sd3(ctx: Ctx):
    return ctx.share("sd3", lambda: sd3_pipeline(ctx.S, ctx.dev, ctx.dtype))


def dreambooth_infer(ctx: Ctx) -> dict:
    """DreamBooth's inference: SD3-Medium, 1024 px, 30 steps, CFG 5 (the fine-tuned transformer has the
    base's size)."""
    pipe, build_s = _sd3(ctx)
    return _image(ctx, "dreambooth", pipe, build_s, "SD3-Medium, CLIP-L + CLIP-bigG + T5-XXL")


def _train(ctx: Ctx, mode: str) -> dict:
    from nearid_lib.generate.dreambooth import DreamBoothConfig, restore_base, train_dreambooth

    pipe, build_s = _sd3(ctx)
    res = 32 if ctx.tiny else DreamBoothConfig().resolution
    inst = [photo(20 + i, max(res, 512 if not ctx.tiny else 48)) for i in range(4)]
    klass = [photo(40 + i, max(res, 512 if not ctx.tiny else 48)) for i in range(4)]

    def run(steps: int) -> float:
        cfg = DreamBoothConfig(steps=steps, mode=mode, resolution=res, mixed_precision="bf16")
        return train_dreambooth(pipe, inst, CLS, klass, cfg, None, progress=False).seconds

    if not ctx.tiny:
        run(1)                                                              # warm-up
    reset_peak(ctx.dev)
    t1 = timed(ctx.dev, lambda: run(1))[1]
    t3 = timed(ctx.dev, lambda: run(3))[1]
    peak = peak_gb(ctx.dev)
    restore_base(pipe)                                                      # drops the LoRA; frozen, eval
    step = max(0.0, (t3 - t1) / 2)
    cfg = DreamBoothConfig()
    return {"stands_for": f"DreamBooth training ({mode}): {cfg.steps} steps per subject x 80 subjects",
            "build_s": round(build_s, 2),
            "sizes": {"transformer": describe(pipe.transformer), "mode": mode, "resolution": res,
                      "batch": f"{cfg.batch_size} instance + {cfg.batch_size} class image (prior preservation)",
                      "optimizer": "torch AdamW, fp32 master weights, bf16 autocast",
                      "lora_rank": cfg.lora_rank if mode == "lora" else None},
            "seconds_measured": [t1, t3], "s_per_step": step, "s_rest": max(0.0, t1 - step),
            "paper_steps": cfg.steps, "s_per_subject": max(0.0, t1 - step) + cfg.steps * step, "peak_mem_gb": peak}


def dreambooth_train_full(ctx: Ctx) -> dict:
    """One DreamBooth step, the whole SD3 transformer trained (the authors' setting)."""
    return _train(ctx, "full")


def dreambooth_train_lora(ctx: Ctx) -> dict:
    """One DreamBooth step with a rank-16 LoRA (``retrieval.dreambooth_mode=lora``)."""
    return _train(ctx, "lora")
