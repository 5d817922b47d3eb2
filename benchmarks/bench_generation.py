"""Generation cost: one diffusers inpainting pipeline measured at full size with random weights,
and the projected cost of every distractor source of the paper (45,215 views per source).

    .venv/bin/python benchmarks/bench_generation.py    # CUDA: SD-1.5 size, 512 px, 20 steps; CPU: half width, 128 px, 2 steps (~1 min)

Writes ``benchmarks/results/bench_generation_<cpu|cuda>.json`` and ``.md``.

Measured: seconds per item of ``StableDiffusionInpaintPipeline`` (on CUDA at SD-1.5 sizes built
from configs: UNet 320-640-1280-1280 with the 9-channel inpainting input, the SD VAE, a 12-layer CLIP
text encoder; on a CPU at half the channel width, 6 text layers, 128 px; random init, no download)
with classifier-free guidance, and per component (UNet call,
VAE encode / decode, text encoder). Counted (``torch.utils.flop_counter`` on meta tensors, no
weights): FLOPs of every paper denoiser per call at its resolution. Projected: seconds per item =
FLOPs / the effective FLOP rate measured here for the same kind of model (UNet or VAE), times the
paper's step counts; GPUs without a GPU: FLOPs at an assumed utilisation (stated in the output).
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from nearid_lib.io_utils import atomic_write_text, write_json  # noqa: E402
from nearid_lib.generate.tiny_sd import clip_tokenizer_offline  # noqa: E402
from paper_scale_model import fmt_min  # noqa: E402
from paper_scale_parts import count_flops, loadavg, torch_setup  # noqa: E402

VIEWS_PER_SOURCE = 45_215
GPU_MFU = 0.40                      # assumed utilisation of diffusion denoisers on a GPU (no GPU here)
GPU_PEAK = {"A100-80GB": 312.0, "H100-SXM": 989.0}
# source -> (denoiser, resolution, steps, CFG batch multiplier); NearID App. B
SOURCES = {
    "SDXL": ("sdxl", 512, 30, 2), "SDXL_1024": ("sdxl", 1024, 30, 2),
    "Flux": ("flux_fill", 512, 50, 1), "Flux_1024": ("flux_fill", 1024, 50, 1),
    "FluxC": ("flux_canny", 512, 28, 1), "FluxC_1024": ("flux_canny", 1024, 28, 1),
    "Qwen": ("qwen_cn", 512, 8, 1), "Qwen_1328": ("qwen_cn", 1328, 8, 1),
    "PowerPaint": ("powerpaint", 512, 45, 2),
}


def sd15_components(width: float = 1.0, text_layers: int = 12):
    """UNet / VAE / CLIP text encoder of SD-1.5 inpainting (``width`` scales the channels)."""
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    ch = tuple(int(c * width) for c in (320, 640, 1280, 1280))
    unet = UNet2DConditionModel(
        sample_size=64, in_channels=9, out_channels=4, block_out_channels=ch, layers_per_block=2,
        cross_attention_dim=768, attention_head_dim=8,
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3)
    vch = tuple(int(c * width) for c in (128, 256, 512, 512))
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=vch, layers_per_block=2,
                        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                        sample_size=512)
    text = CLIPTextModel(CLIPTextConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=text_layers,
                                        num_attention_heads=12, vocab_size=49408, max_position_embeddings=77,
                                        projection_dim=768, hidden_act="quick_gelu"))
    return unet, vae, text


def build_pipeline(width: float, text_layers: int, dev, dtype):
    from diffusers import DDIMScheduler, StableDiffusionInpaintPipeline

    torch.manual_seed(0)
    unet, vae, text = sd15_components(width, text_layers)
    sched = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                          set_alpha_to_one=False, steps_offset=1)
    pipe = StableDiffusionInpaintPipeline(vae=vae, text_encoder=text, tokenizer=clip_tokenizer_offline(), unet=unet,
                                          scheduler=sched, safety_checker=None, feature_extractor=None,
                                          requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(dev, dtype)


def _timed(obj, name: str, log: dict):
    """Wrap ``obj.name`` so every call's wall time (synchronised on CUDA) is appended to log[name]."""
    fn = getattr(obj, name)

    def wrapped(*a, **k):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn(*a, **k)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        log.setdefault(name if name != "forward" else type(obj).__name__, []).append(time.perf_counter() - t0)
        return out

    setattr(obj, name, wrapped)


def measure_pipeline(width, text_layers, res, steps, reps, dev, warmup=1) -> dict:
    """Seconds per item (and per component) of the inpainting pipeline, CFG 7.5 (the median of
    ``reps`` calls after ``warmup`` calls; on a CPU a call takes minutes, so no warm-up there)."""
    from PIL import Image
    import skimage.data as skd

    dtype = torch.float16 if dev.type == "cuda" else torch.float32
    t0 = time.perf_counter()
    pipe = build_pipeline(width, text_layers, dev, dtype)
    build_s = time.perf_counter() - t0
    img = Image.fromarray(skd.astronaut()).resize((res, res))
    yy, xx = np.mgrid[:res, :res]
    mask = Image.fromarray((((yy - res / 2) ** 2 + (xx - res / 2) ** 2 < (res / 4) ** 2) * 255).astype(np.uint8))
    log: dict = {}
    for obj, name in ((pipe.unet, "forward"), (pipe.vae, "encode"), (pipe.vae, "decode"), (pipe.text_encoder, "forward")):
        _timed(obj, name, log)
    totals = []
    for r in range(warmup + reps):
        log.clear()
        t0 = time.perf_counter()
        pipe(prompt="a red ceramic mug with a blue handle", image=img, mask_image=mask, height=res, width=res,
             num_inference_steps=steps, guidance_scale=7.5, generator=torch.Generator().manual_seed(r))
        totals.append(time.perf_counter() - t0)
    comp = {k: statistics.median(v) for k, v in log.items()}
    # FLOPs of one UNet call (CFG batch 2) and of the VAE at this size, on meta tensors
    unet, vae, _ = _meta(lambda: sd15_components(width, 1))
    lat = res // 8
    with torch.device("meta"), torch.no_grad():
        f_unet = count_flops(lambda: unet(torch.empty(2, 9, lat, lat), torch.empty(2), torch.empty(2, 77, 768)))
        f_enc = count_flops(lambda: vae.encode(torch.empty(1, 3, res, res)))
        f_dec = count_flops(lambda: vae.decode(torch.empty(1, 4, lat, lat)))
    return {"width_factor": width, "text_layers": text_layers, "resolution": res, "steps": steps,
            "dtype": str(dtype).replace("torch.", ""), "build_s": build_s, "s_per_item": statistics.median(totals[warmup:]),
            "components_s": comp, "unet_params_M": sum(p.numel() for p in pipe.unet.parameters()) / 1e6,
            "unet_gflop_per_call_cfg2": f_unet / 1e9, "vae_encode_gflop": f_enc / 1e9, "vae_decode_gflop": f_dec / 1e9,
            "unet_tflops_achieved": f_unet / comp["UNet2DConditionModel"] / 1e12,
            "vae_tflops_achieved": (f_enc + f_dec) / (comp["encode"] + comp["decode"]) / 1e12}


def _meta(build):
    with torch.device("meta"):
        return build()


# ----------------------------------------------------------------------------- paper denoisers
def _layer_fit(make, args_fn, counts) -> float:
    """FLOPs of a transformer with ``counts`` blocks of each kind, from models with 1-2 blocks per
    kind (identical blocks: the cost is affine in the counts). Exact and seconds instead of minutes."""
    k = len(counts)
    ones = [1] * k
    base = _count(make(ones), args_fn)
    total = base
    for i in range(k):
        two = list(ones)
        two[i] = 2
        total += (counts[i] - 1) * (_count(make(two), args_fn) - base)
    return total


def _count(model, args_fn) -> float:
    with torch.device("meta"), torch.no_grad():
        return count_flops(lambda: model(**args_fn()))


@functools.lru_cache(maxsize=1)
def _sdxl_unet():
    """SDXL-1.0 inpainting UNet (9 input channels) on meta tensors."""
    from diffusers import UNet2DConditionModel

    return _meta(lambda: UNet2DConditionModel(
        sample_size=128, in_channels=9, out_channels=4, block_out_channels=(320, 640, 1280), layers_per_block=2,
        transformer_layers_per_block=(1, 2, 10), cross_attention_dim=2048, attention_head_dim=(5, 10, 20),
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"), use_linear_projection=True,
        addition_embed_type="text_time", addition_time_embed_dim=256, projection_class_embeddings_input_dim=2816))


@functools.lru_cache(maxsize=1)
def _sd15_meta():
    return _meta(lambda: sd15_components(1.0, 1))


def denoiser_flops(kind: str, res: int, cfg_batch: int) -> float:
    """FLOPs of one denoiser call (all CFG branches) of the paper's generators at ``res``."""
    from diffusers import FluxTransformer2DModel, QwenImageControlNetModel, QwenImageTransformer2DModel

    lat, b = res // 8, cfg_batch
    if kind == "sdxl":
        return _count(_sdxl_unet(), lambda: dict(
            sample=torch.empty(b, 9, lat, lat), timestep=torch.empty(b), encoder_hidden_states=torch.empty(b, 77, 2048),
            added_cond_kwargs={"text_embeds": torch.empty(b, 1280), "time_ids": torch.empty(b, 6)}))
    if kind == "powerpaint":          # SD-1.5 UNet + BrushNet (counted as a second SD-1.5 UNet: an approximation)
        unet = _sd15_meta()[0]
        return 2 * _count(unet, lambda: dict(sample=torch.empty(b, 9, lat, lat), timestep=torch.empty(b),
                                             encoder_hidden_states=torch.empty(b, 77, 768)))
    if kind.startswith("flux"):
        n_img, n_txt, cin = (lat // 2) ** 2, 512, 384 if kind == "flux_fill" else 128

        def make(c):
            return _meta(lambda: FluxTransformer2DModel(
                patch_size=1, in_channels=cin, out_channels=64, num_layers=c[0], num_single_layers=c[1],
                attention_head_dim=128, num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768,
                guidance_embeds=True, axes_dims_rope=(16, 56, 56)))
        return b * _layer_fit(make, lambda: dict(
            hidden_states=torch.empty(1, n_img, cin), encoder_hidden_states=torch.empty(1, n_txt, 4096),
            pooled_projections=torch.empty(1, 768), timestep=torch.empty(1), img_ids=torch.empty(n_img, 3),
            txt_ids=torch.empty(n_txt, 3), guidance=torch.empty(1)), (19, 38))
    if kind == "qwen_cn":
        h = lat // 2
        n_txt = 128

        def args(cond=False):
            d = dict(hidden_states=torch.empty(1, h * h, 64), encoder_hidden_states=torch.empty(1, n_txt, 3584),
                     encoder_hidden_states_mask=torch.ones(1, n_txt, dtype=torch.long), timestep=torch.empty(1),
                     img_shapes=[(1, h, h)])
            if cond:
                d["controlnet_cond"] = torch.empty(1, h * h, 64 + 4)
            return d
        tr = _layer_fit(lambda c: _meta(lambda: QwenImageTransformer2DModel(num_layers=c[0])), args, (60,))
        cn = _layer_fit(lambda c: _meta(lambda: QwenImageControlNetModel(num_layers=c[0], extra_condition_channels=4)),
                        lambda: args(True), (6,))
        return b * (tr + cn)
    raise KeyError(kind)


def project_sources(meas: dict, dev) -> list[dict]:
    """Seconds per item and cost per source (45,215 views): here from the measured UNet/VAE rates,
    and on GPUs at the assumed utilisation when no GPU is present."""
    vae_cache: dict = {}
    rows = []
    for name, (kind, res, steps, cfg_b) in SOURCES.items():
        t0 = time.perf_counter()
        f_call = denoiser_flops(kind, res, cfg_b)
        if res not in vae_cache:
            vae = _sd15_meta()[1]
            with torch.device("meta"), torch.no_grad():
                vae_cache[res] = (count_flops(lambda: vae.encode(torch.empty(1, 3, res, res)))
                                  + count_flops(lambda: vae.decode(torch.empty(1, 4, res // 8, res // 8))))
        f_item_den = steps * f_call
        f_vae = vae_cache[res]
        s_here = f_item_den / (meas["unet_tflops_achieved"] * 1e12) + f_vae / (meas["vae_tflops_achieved"] * 1e12)
        row = {"source": name, "denoiser": kind, "resolution": res, "steps": steps, "cfg_batch": cfg_b,
               "tflop_per_call": f_call / 1e12, "tflop_per_item": (f_item_den + f_vae) / 1e12,
               "s_per_item_here": s_here, "hours_per_source_here": s_here * VIEWS_PER_SOURCE / 3600,
               "count_s": time.perf_counter() - t0}
        if dev.type != "cuda":
            for g, peak in GPU_PEAK.items():
                s = (f_item_den + f_vae) / (peak * 1e12 * GPU_MFU)
                row[f"s_per_item_{g}"] = s
                row[f"gpu_hours_{g}"] = s * VIEWS_PER_SOURCE / 3600
        rows.append(row)
    return rows


def render(res: dict) -> str:
    m = res["measured"]
    c = m["components_s"]
    L = ["# Generation cost: one inpainting pipeline measured, every paper source projected", "",
         f"Device: {res['device']}; torch {res['torch']}; {res['threads']} threads; load average "
         f"{res['load_start']} at start, {res['load_end']} at the end (a shared machine: timings are noisy). "
         "Generated by `benchmarks/bench_generation.py`.", "",
         "## Measured: `StableDiffusionInpaintPipeline`, random weights", "",
         f"SD-1.5 sizes x{m['width_factor']:g} width (UNet {m['unet_params_M']:.0f} M parameters, 9-channel "
         f"inpainting input), {m['resolution']} px, {m['steps']} DDIM steps, CFG 7.5 (UNet batch 2), {m['dtype']}.", "",
         "| | seconds | counted GFLOP | achieved TFLOP/s |", "|---|---|---|---|",
         f"| whole item ({m['steps']} steps) | {m['s_per_item']:.2f} | | |",
         f"| UNet call (CFG batch 2) | {c['UNet2DConditionModel']:.2f} | {m['unet_gflop_per_call_cfg2']:.0f} | "
         f"{m['unet_tflops_achieved']:.3f} |",
         f"| VAE encode | {c['encode']:.2f} | {m['vae_encode_gflop']:.0f} | |",
         f"| VAE decode | {c['decode']:.2f} | {m['vae_decode_gflop']:.0f} | {m['vae_tflops_achieved']:.3f} (enc+dec) |",
         f"| CLIP text encoder | {c.get('CLIPTextModel', float('nan')):.3f} | | |", "",
         "## Projected cost per source (45,215 views each; the paper's step counts)", "",
         "Denoiser FLOPs per call counted on meta tensors from each model's diffusers config (FLUX and "
         "Qwen-Image from 1-2-block models, exact for identical blocks); PowerPaint's BrushNet counted as "
         "a second SD-1.5 UNet and every VAE as the SD VAE (approximations; the text encoders are "
         "omitted: < 1% of an item). 'here' = FLOPs / the rates measured above."]
    gcols = [g for g in GPU_PEAK if f"s_per_item_{g}" in res["sources"][0]]
    head = "| source | denoiser | px | steps x CFG | TFLOP / item | s / item here | here, per source |"
    head += "".join(f" s / item {g} | {g}-hours per source |" for g in gcols)
    L += ["", head, "|" + "---|" * (7 + 2 * len(gcols))]
    for r in res["sources"]:
        line = (f"| {r['source']} | {r['denoiser']} | {r['resolution']} | {r['steps']} x {r['cfg_batch']} | "
                f"{r['tflop_per_item']:.0f} | {r['s_per_item_here']:.0f} | {fmt_min(r['hours_per_source_here'] * 60)} |")
        line += "".join(f" {r[f's_per_item_{g}']:.1f} | {r[f'gpu_hours_{g}']:.0f} |" for g in gcols)
        L.append(line)
    if gcols:
        tot = {g: sum(r[f"gpu_hours_{g}"] for r in res["sources"]) for g in gcols}
        L += ["", "GPU columns: FLOPs at an assumed " f"{GPU_MFU:.0%} of the dense bf16 peak ("
              + ", ".join(f"{g} {p:.0f} TFLOP/s" for g, p in GPU_PEAK.items()) + "); no GPU was available. "
              "All 9 sources: " + ", ".join(f"{tot[g]:,.0f} {g}-hours" for g in gcols) + "."]
    return "\n".join(L) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: keep OMP_NUM_THREADS' value)")
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args(argv)
    dev, args.threads = torch_setup(args.device, args.threads)
    res = {"mode": dev.type, "device": torch.cuda.get_device_name() if dev.type == "cuda" else "CPU",
           "threads": args.threads, "torch": torch.__version__, "load_start": loadavg()}
    if dev.type == "cuda":
        res["measured"] = measure_pipeline(1.0, 12, 512, 20, 3, dev, warmup=1)
    else:   # full size at 512 px is ~1.6 TFLOP per UNet call: many minutes on 2 shared cores
        res["measured"] = measure_pipeline(0.5, 6, 128, 2, 1, dev, warmup=0)
    res["sources"] = project_sources(res["measured"], dev)
    res["load_end"] = loadavg()
    name = f"bench_generation_{dev.type}"
    write_json(res, Path(args.out) / f"{name}.json")
    md = render(res)
    atomic_write_text(Path(args.out) / f"{name}.md", md)
    print(md)
    return res


if __name__ == "__main__":
    main()
