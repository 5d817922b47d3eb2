"""FPR generation cost: the personalization methods' real diffusers pipelines measured with tiny
random weights on this machine, side by side in one run, and the paper-size cost of generating
every method's images for the nine FPR datasets, projected from counted FLOPs.

    .venv/bin/python benchmarks/bench_fpr_generation.py [--reps 5]

Writes ``benchmarks/results/bench_fpr_generation_cpu.{json,md}``.

Measured: seconds per image of :func:`nearid_lib.generate.personalize.generate_image` for each
method on the tiny pipelines of :mod:`tools.tiny_models.pipelines` (32 px, 2 steps: the dry
run's settings; this times the code path, not the models), and seconds per DreamBooth training step
(tiny SD3, 32 px, prior preservation on). Counted (``torch.utils.flop_counter`` on meta tensors, no
weights): FLOPs of each method's denoiser per call at the paper's sizes. Projected: GPU seconds =
FLOPs / (peak bf16 rate x an assumed utilisation, stated in the output), for the paper's workload:
10 prompts x 80 subjects (5 Re-ID species x 10 identities, 3 CUB groups x 5 species, 15 car models).
"""
from __future__ import annotations

import argparse
import functools
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch
from PIL import Image

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from bench_generation import GPU_MFU, GPU_PEAK, _count, _layer_fit, _meta, denoiser_flops  # noqa: E402
from nearid_lib.generate import dreambooth as DB  # noqa: E402
from nearid_lib.generate.personalize import METHODS, generate_image  # noqa: E402
from tools.tiny_models.pipelines import (IP_ADAPTER_WEIGHT_NAMES, build_tiny_flux_fill_pipeline,  # noqa: E402
                                                build_tiny_flux_kontext_pipeline, build_tiny_sd3_pipeline,
                                                build_tiny_sdxl_pipeline, write_tiny_ip_adapter)
from nearid_lib.io_utils import atomic_write_text, write_json  # noqa: E402
from paper_scale_parts import loadavg, torch_setup  # noqa: E402

SUBJECTS = 5 * 10 + 3 * 5 + 15          # FPR Sec. 4.1: Re-ID species x ids, CUB groups x species, car models
PROMPTS = 10


def tiny_pipes(tmp: Path) -> dict:
    """The tiny pipelines of every method (IP-Adapter weights loaded from files, as on the paper path)."""
    out = {}
    for key, plus in (("ip_adapter", False), ("ip_adapter_plus", True)):
        pipe = build_tiny_sdxl_pipeline(0)
        write_tiny_ip_adapter(tmp, pipe, plus=plus)
        pipe.load_ip_adapter(str(tmp), subfolder="sdxl_models", weight_name=IP_ADAPTER_WEIGHT_NAMES[plus],
                             image_encoder_folder=None)
        pipe.set_ip_adapter_scale(0.6)
        out[key] = pipe
    out.update(flux_kontext=build_tiny_flux_kontext_pipeline(0), diptych=build_tiny_flux_fill_pipeline(0),
               dreambooth=build_tiny_sd3_pipeline(0, with_t5=False))
    return out


def measure(reps: int, tmp: Path) -> dict:
    """Median seconds per image per method (interleaved rounds, so load drifts hit all alike), and
    per DreamBooth step."""
    pipes = tiny_pipes(tmp)
    ref = Image.new("RGB", (32, 32), (120, 90, 60))
    times: dict[str, list[float]] = {k: [] for k in pipes}
    for k, p in pipes.items():          # warm-up
        generate_image(k, p, "a photo of a leopard", ref, 0, cls="leopard", px=32, steps=2)
    for r in range(reps):
        for k, p in pipes.items():
            t = time.perf_counter()
            generate_image(k, p, "a photo of a leopard on the beach", ref, r, cls="leopard", px=32, steps=2)
            times[k].append(time.perf_counter() - t)
    sd3 = pipes["dreambooth"]
    cfg = DB.DreamBoothConfig(steps=reps + 1, resolution=32, lr=1e-4, mixed_precision="no")
    res = DB.train_dreambooth(sd3, [ref] * 2, "leopard", [ref] * 2, cfg, None, progress=False)
    step_s = res.seconds / res.steps
    return {"s_per_image": {k: statistics.median(v) for k, v in times.items()},
            "dreambooth_s_per_step": step_s}


# ----------------------------------------------------------------------------- paper-size FLOPs
@functools.lru_cache(maxsize=None)
def sd3_medium_flops(res: int, batch: int) -> float:
    """One SD3-Medium transformer call (24 joint blocks, 1536 wide; 77 CLIP + 256 T5 tokens)."""
    from diffusers import SD3Transformer2DModel

    lat = res // 8

    def make(c):
        return _meta(lambda: SD3Transformer2DModel(
            sample_size=128, patch_size=2, in_channels=16, num_layers=c[0], attention_head_dim=64,
            num_attention_heads=24, joint_attention_dim=4096, caption_projection_dim=1536,
            pooled_projection_dim=2048, out_channels=16, pos_embed_max_size=192))
    return batch * _layer_fit(make, lambda: dict(
        hidden_states=torch.empty(1, 16, lat, lat), encoder_hidden_states=torch.empty(1, 333, 4096),
        pooled_projections=torch.empty(1, 2048), timestep=torch.empty(1)), (24,))


@functools.lru_cache(maxsize=None)
def flux_flops(n_img: int, cin: int) -> float:
    """One FLUX.1 transformer call (19 double + 38 single blocks) on ``n_img`` image tokens."""
    from diffusers import FluxTransformer2DModel

    def make(c):
        return _meta(lambda: FluxTransformer2DModel(
            patch_size=1, in_channels=cin, out_channels=64, num_layers=c[0], num_single_layers=c[1],
            attention_head_dim=128, num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768,
            guidance_embeds=True, axes_dims_rope=(16, 56, 56)))
    return _layer_fit(make, lambda: dict(
        hidden_states=torch.empty(1, n_img, cin), encoder_hidden_states=torch.empty(1, 512, 4096),
        pooled_projections=torch.empty(1, 768), timestep=torch.empty(1), img_ids=torch.empty(n_img, 3),
        txt_ids=torch.empty(512, 3), guidance=torch.empty(1)), (19, 38))


def paper_flops() -> list[dict]:
    """Per method: denoiser FLOPs per image at the paper's settings (VAE and text encoders omitted,
    < 2% of an image), and DreamBooth's per-subject training and the class images per dataset."""
    tok = lambda px: (px // 16) ** 2  # noqa: E731 - FLUX packs 2x2 latent patches of the /8 VAE
    rows = [
        {"method": "ip_adapter", "what": "SDXL UNet 1024 px, CFG 2", "calls": 50,
         "tflop_per_call": denoiser_flops("sdxl", 1024, 2) / 1e12},
        {"method": "ip_adapter_plus", "what": "SDXL UNet 1024 px, CFG 2", "calls": 50,
         "tflop_per_call": denoiser_flops("sdxl", 1024, 2) / 1e12},
        {"method": "flux_kontext", "what": "FLUX.1 1024 px output + 512 px reference tokens", "calls": 30,
         "tflop_per_call": flux_flops(tok(1024) + tok(512), 64) / 1e12},
        {"method": "diptych", "what": "FLUX.1 Fill, 2 panels of 784 px", "calls": 30,
         "tflop_per_call": flux_flops((784 // 16) * (2 * 784 // 16), 384) / 1e12},
        {"method": "dreambooth", "what": "SD3-Medium 1024 px, CFG 2", "calls": 30,
         "tflop_per_call": sd3_medium_flops(1024, 2) / 1e12},
    ]
    for r in rows:
        r["tflop_per_image"] = r["calls"] * r["tflop_per_call"]
    # training: forward + backward ~ 3x a forward, instance + class image per step, 768 px, 800 steps
    train = 800 * 3 * sd3_medium_flops(768, 2) / 1e12
    klass = 100 * 28 * sd3_medium_flops(1024, 2) / 1e12       # 100 class images per dataset, pipeline defaults
    return rows + [{"method": "dreambooth (training, per subject)", "what": "800 steps x 2 images, 768 px, fwd+bwd",
                    "calls": 800, "tflop_per_call": train / 800, "tflop_per_image": None, "tflop_total": train},
                   {"method": "dreambooth (class images, per dataset)", "what": "100 images x 28 steps, CFG 2",
                    "calls": 2800, "tflop_per_call": klass / 2800, "tflop_per_image": None, "tflop_total": klass}]


def project(rows: list[dict]) -> list[dict]:
    """GPU-hours of the paper's workload per method at the assumed utilisation."""
    out = []
    for r in rows:
        if r["tflop_per_image"] is not None:
            total = r["tflop_per_image"] * PROMPTS * SUBJECTS
        elif "per subject" in r["method"]:
            total = r["tflop_total"] * SUBJECTS
        else:
            total = r["tflop_total"] * 9
        out.append({**r, "tflop_workload": total,
                    **{f"gpu_hours_{g}": total / (peak * GPU_MFU) / 3600 for g, peak in GPU_PEAK.items()}})
    return out


def render(res: dict) -> str:
    """The Markdown report."""
    lines = ["# FPR generation cost: seven methods' pipelines, measured tiny, projected at paper size", "",
             f"Device: {res['device']}; {res['threads']} threads; load average {res['load_start']} at start, "
             f"{res['load_end']} at the end. Generated by `benchmarks/bench_fpr_generation.py`.", "",
             "## Measured here: the real pipelines with tiny random weights (32 px, 2 steps; median of "
             f"{res['reps']} interleaved rounds)", "",
             "This times the code path (pipeline overhead, the IP-Adapter / Kontext / diptych plumbing), "
             "not the models: at paper size the denoisers dominate (next table).", "",
             "| method | pipeline | s / image |", "|---|---|---|"]
    for k, s in res["measured"]["s_per_image"].items():
        lines.append(f"| {METHODS[k].name} | {METHODS[k].pipeline} | {s:.3f} |")
    lines += [f"| DreamBooth training | tiny SD3, prior on | {res['measured']['dreambooth_s_per_step']:.3f} s / step |",
              "", "## Projected: the paper's workload on one GPU", "",
              f"{PROMPTS} images x {SUBJECTS} subjects per method (FPR Sec. 4.1). Counted denoiser FLOPs "
              f"(meta tensors, exact for the configs; FLUX and SD3 from 1-2-block models, exact for identical "
              f"blocks) at an **assumed {int(GPU_MFU * 100)}% utilisation** of the bf16 peak "
              f"({', '.join(f'{g} {p:.0f} TFLOP/s' for g, p in GPU_PEAK.items())}): a projection, not a "
              "measurement (no GPU was lent). Emu2 and OminiControl are not in diffusers (user folder only).", "",
              "| method | what is counted | calls | TFLOP / call | TFLOP / image | GPU-hours A100 | GPU-hours H100 |",
              "|---|---|---|---|---|---|---|"]
    for r in res["projected"]:
        per_img = f"{r['tflop_per_image']:.0f}" if r["tflop_per_image"] is not None else "-"
        lines.append(f"| {r['method']} | {r['what']} | {r['calls']} | {r['tflop_per_call']:.1f} | {per_img} | "
                     f"{r['gpu_hours_A100-80GB']:.1f} | {r['gpu_hours_H100-SXM']:.1f} |")
    tot = {g: sum(r[f"gpu_hours_{g}"] for r in res["projected"]) for g in GPU_PEAK}
    lines += ["", f"Total: **{tot['A100-80GB']:.0f} A100-hours, {tot['H100-SXM']:.0f} H100-hours** "
              "(generation of all five methods, DreamBooth training and class images included)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    dev, threads = torch_setup("cpu", args.threads)     # the tiny pipelines time the code path: CPU
    load0 = loadavg()
    tmp = HERE / "results" / ".bench_fpr_tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    res = {"device": f"{dev} ({platform.processor() or platform.machine()})", "threads": threads,
           "reps": args.reps, "load_start": load0, "measured": measure(args.reps, tmp)}
    res["projected"] = project(paper_flops())
    res["load_end"] = loadavg()
    shutil.rmtree(tmp, ignore_errors=True)
    name = "bench_fpr_generation_cpu"
    write_json(res, HERE / "results" / f"{name}.json")
    atomic_write_text(HERE / "results" / f"{name}.md", render(res))
    print(render(res))
    return res


if __name__ == "__main__":
    main()
