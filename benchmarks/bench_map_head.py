"""Benchmark: the MAP head's exact fast path, the feature cache, and a paper-scale cost estimate.

    .venv/bin/python benchmarks/bench_map_head.py            # full sizes (a few minutes on 2 cores)
    .venv/bin/python benchmarks/bench_map_head.py --quick    # small sizes, seconds (smoke check)

Writes ``benchmarks/results/bench_map_head.json`` and ``.md`` (``--out`` to change the folder).

1. One training step (forward + backward + AdamW) of the MAP head at [128, 729, 1152] tokens,
   16 heads, MLP 4304 (SigLIP2-so400m), CPU: reference ``nn.MultiheadAttention`` vs the fast path.
2. One training step for the ``mini`` backbone (EfficientNet-Lite0, 49 x 1280 tokens): uncached
   (decode PNGs, run the backbone, then the head) vs cached (read float16 tokens, then the head).
3. An estimate of the full paper training on one A100 from FLOPs counted by
   ``torch.utils.flop_counter`` on the real model classes (meta tensors: no weights needed) and the
   cache design, with every assumption written into the output.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nearid_lib.models import MAPHead, load_encoder  # noqa: E402  (also makes torchvision importable)
from nearid_lib.features import TokenCache  # noqa: E402
from nearid_lib.io_utils import atomic_write_text, write_json  # noqa: E402

# ---- stated assumptions for the A100 estimate (edit here, they are copied into the results)
A100_FP16_PEAK_TFLOPS = 312.0       # dense fp16/bf16 tensor-core peak (NVIDIA A100 datasheet)
BACKBONE_MFU = 0.45                 # achieved fraction for batched ViT inference (SDPA, fp16)
HEAD_MFU = 0.30                     # small GEMMs / einsums of the fast head: lower utilisation
NVME_GBPS = 5.0                     # sequential-ish read of the float16 token cache from local NVMe
HOST_RAM_GBPS = 20.0                # pinned host RAM -> GPU (PCIe 4 x16, realistic)
PAPER = dict(steps=3350, batch=128, images_per_sample=6, n_positive_images=45_000,
             n_distractor_images=316_505, hours=6.5, s_per_step=7.0, image_size=384, tokens=729,
             dim=1152, heads=16, mlp=4304)


def _timeit(fn, warmup: int, reps: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _contrastive(z: torch.Tensor) -> torch.Tensor:
    """A stand-in loss with the shape of NearID's: pairs (2i, 2i+1) are positives."""
    z = F.normalize(z, dim=-1)
    logits = z @ z.t() / 0.07
    logits = logits - 1e4 * torch.eye(len(z), dtype=z.dtype, device=z.device)
    target = torch.arange(len(z), device=z.device) ^ 1
    return F.cross_entropy(logits, target)


def _head_step(head, opt, tokens, fast):
    opt.zero_grad(set_to_none=True)
    loss = _contrastive(head(tokens, fast=fast))
    loss.backward()
    opt.step()
    return loss


def _flops(fn) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    fc = FlopCounterMode(display=False)
    with fc:
        fn()
    return float(fc.get_total_flops())


# ----------------------------------------------------------------------------- 1. fast vs reference
def bench_head(b, n, d, heads, mlp, reps_fast, reps_ref):
    torch.manual_seed(0)
    head = MAPHead(d, num_heads=heads, hidden=mlp)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-4, weight_decay=1e-4)
    x = torch.randn(b, n, d)
    with torch.no_grad():   # exactness at this size (float32)
        o_f, o_r = head(x[:8], fast=True), head(x[:8], fast=False)
    rel = float((o_f - o_r).norm() / o_r.norm())
    # FLOPs on meta tensors (instant): forward + backward of one step
    with torch.device("meta"):
        mh = MAPHead(d, num_heads=heads, hidden=mlp)
        xm = torch.empty(b, n, d)
    fl = {k: _flops(lambda f=f: _contrastive(mh(xm, fast=f)).backward()) for k, f in (("fast", True), ("ref", False))}
    t_fast = _timeit(lambda: _head_step(head, opt, x, True), 1, reps_fast)
    t_ref = _timeit(lambda: _head_step(head, opt, x, False), 1, reps_ref)
    med_f, med_r = statistics.median(t_fast), statistics.median(t_ref)
    return {"shape": [b, n, d], "heads": heads, "mlp_hidden": mlp, "params": sum(p.numel() for p in head.parameters()),
            "fast_s": t_fast, "ref_s": t_ref, "fast_median_s": med_f, "ref_median_s": med_r,
            "speedup": med_r / med_f, "gflop_fast": fl["fast"] / 1e9, "gflop_ref": fl["ref"] / 1e9,
            "flop_ratio": fl["ref"] / fl["fast"], "fwd_rel_diff_fp32": rel}


# ----------------------------------------------------------------------------- 2. cached vs uncached
def bench_cache(n_images, batch, reps, heads, tiny):
    from PIL import Image

    enc, pre = load_encoder("efficientnet-lite0", tiny=tiny)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        (root / "img").mkdir(parents=True)
        try:   # natural photographs (crops of skimage's bundled images) so PNG decoding is realistic
            import skimage.data as skd

            photos = [skd.astronaut(), skd.chelsea(), skd.coffee(), skd.rocket()]
        except Exception:  # pragma: no cover
            photos = [rng.integers(0, 256, (512, 512, 3), dtype=np.uint8)]
        rels = []
        size = enc.image_size
        for i in range(n_images):
            ph = photos[i % len(photos)]
            y, x = rng.integers(0, ph.shape[0] - 200), rng.integers(0, ph.shape[1] - 200)
            Image.fromarray(ph[y:y + 200, x:x + 200]).resize((size, size)).save(root / f"img/{i}.png")
            rels.append(f"img/{i}.png")
        t0 = time.perf_counter()
        cache = TokenCache.build_or_load(enc, rels, root=root, cache_root=Path(tmp) / "cache",
                                         batch_size=32, chunk_size=256, progress=False)
        build_s = time.perf_counter() - t0

        torch.manual_seed(0)
        head = MAPHead(enc.token_dim, num_heads=heads, mlp_ratio=4.0)
        opt = torch.optim.AdamW(head.parameters(), lr=1e-3)

        def rows():
            return rng.choice(len(rels), size=batch, replace=False)

        def cached():
            _head_step(head, opt, cache.tokens(rows()), True)

        def uncached():
            r = rows()
            imgs = []
            for i in r:
                with Image.open(root / rels[i]) as im:
                    imgs.append(im.convert("RGB"))
            with torch.no_grad():
                toks = enc(pre.batch(imgs)).tokens
            _head_step(head, opt, toks, True)

        t_c = _timeit(cached, 1, reps)
        t_u = _timeit(uncached, 1, reps)
        disk = sum(f.stat().st_size for f in cache.dir.iterdir())
    mc, mu = statistics.median(t_c), statistics.median(t_u)
    return {"backbone": enc.name, "tiny": tiny, "tokens": [enc.n_tokens, enc.token_dim], "batch_images": batch,
            "n_images_cached": n_images, "cache_build_s": build_s, "cache_img_per_s": n_images / build_s,
            "cache_bytes_per_image": disk / n_images, "cached_s": t_c, "uncached_s": t_u,
            "cached_median_s": mc, "uncached_median_s": mu, "speedup": mu / mc}


# ----------------------------------------------------------------------------- 3. A100 estimate
def estimate_paper(head_res: dict) -> dict:
    from transformers import SiglipVisionConfig, SiglipVisionModel

    p = PAPER
    cfg = SiglipVisionConfig(hidden_size=p["dim"], intermediate_size=p["mlp"], num_hidden_layers=27,
                             num_attention_heads=p["heads"], image_size=p["image_size"], patch_size=14)
    with torch.device("meta"):
        tower = SiglipVisionModel(cfg)
        px = torch.empty(1, 3, p["image_size"], p["image_size"])
    with torch.no_grad():
        f_img = _flops(lambda: tower(pixel_values=px))
    n_params = sum(t.numel() for t in tower.parameters())
    imgs_per_step = p["batch"] * p["images_per_sample"]
    # head FLOPs scale linearly in batch: measured (meta) at the bench shape, rescaled
    b0 = head_res["shape"][0]
    f_head_fast = head_res["gflop_fast"] * 1e9 * imgs_per_step / b0
    f_head_ref = head_res["gflop_ref"] * 1e9 * imgs_per_step / b0
    peak = A100_FP16_PEAK_TFLOPS * 1e12
    n_cache = p["n_positive_images"] + p["n_distractor_images"]
    bytes_img = p["tokens"] * p["dim"] * 2          # float16 tokens
    # authors: backbone on every image of every step, reference head
    authors_backbone_s = p["steps"] * imgs_per_step * f_img / (peak * BACKBONE_MFU)
    authors_head_s = p["steps"] * f_head_ref / (peak * HEAD_MFU)
    # ours: backbone once per image, then the fast head over cached tokens (read from disk or RAM)
    cache_s = n_cache * f_img / (peak * BACKBONE_MFU)
    head_compute_s = p["steps"] * f_head_fast / (peak * HEAD_MFU)
    io_nvme_s = p["steps"] * imgs_per_step * bytes_img / (NVME_GBPS * 1e9)
    io_ram_s = p["steps"] * imgs_per_step * bytes_img / (HOST_RAM_GBPS * 1e9)
    ours_nvme = cache_s + max(head_compute_s, io_nvme_s)   # loading overlaps compute (prefetch)
    ours_ram = cache_s + max(head_compute_s, io_ram_s)
    return {
        "assumptions": {"a100_fp16_peak_tflops": A100_FP16_PEAK_TFLOPS, "backbone_mfu": BACKBONE_MFU,
                        "head_mfu": HEAD_MFU, "nvme_GBps": NVME_GBPS, "host_ram_GBps": HOST_RAM_GBPS,
                        **{f"paper_{k}": v for k, v in p.items()}},
        "so400m_params_M": n_params / 1e6, "so400m_gflop_per_image": f_img / 1e9,
        "images_per_step": imgs_per_step, "head_gflop_per_step_fast": f_head_fast / 1e9,
        "head_gflop_per_step_ref": f_head_ref / 1e9, "n_cache_images": n_cache,
        "cache_GB_float16": n_cache * bytes_img / 1e9,
        "authors_backbone_h": authors_backbone_s / 3600, "authors_head_h": authors_head_s / 3600,
        "authors_compute_bound_h": (authors_backbone_s + authors_head_s) / 3600,
        "authors_reported_h": p["hours"],
        "ours_cache_build_min": cache_s / 60, "ours_head_compute_min": head_compute_s / 60,
        "ours_token_io_nvme_min": io_nvme_s / 60, "ours_token_io_ram_min": io_ram_s / 60,
        "ours_total_nvme_min": ours_nvme / 60, "ours_total_ram_min": ours_ram / 60,
        # role-aware foreground masking needs both variants (full, fg) of every image in the cache
        "ours_total_nvme_full_and_fg_min": (2 * cache_s + max(head_compute_s, io_nvme_s)) / 60,
    }


# ----------------------------------------------------------------------------- report
def _markdown(res: dict) -> str:
    h, c, e = res["head"], res["cache"], res["estimate"]
    a = e["assumptions"]
    lines = [
        "# MAP head and feature-cache benchmark",
        "",
        f"Machine: {res['machine']}; torch {res['torch']}; threads {res['threads']}; "
        f"load average at start {res['loadavg_start']} (shared machine: timings are noisy). "
        f"Generated by `benchmarks/bench_map_head.py{' --quick' if res['quick'] else ''}`.",
        "",
        "## 1. MAP head training step (forward + backward + AdamW), CPU",
        "",
        f"Tokens {h['shape']} (float32), {h['heads']} heads, MLP hidden {h['mlp_hidden']}, "
        f"{h['params'] / 1e6:.1f} M parameters.",
        "",
        "| path | median s/step | GFLOP/step (counted) |",
        "|---|---|---|",
        f"| reference (`nn.MultiheadAttention`) | {h['ref_median_s']:.3f} | {h['gflop_ref']:.1f} |",
        f"| fast (scores = x·(W_kᵀq), pool before W_v) | {h['fast_median_s']:.3f} | {h['gflop_fast']:.1f} |",
        f"| **speed-up** | **{h['speedup']:.1f}x** (target >= 10x) | {h['flop_ratio']:.1f}x fewer FLOPs |",
        "",
        f"Forward outputs of the two paths differ by {h['fwd_rel_diff_fp32']:.1e} (relative, float32); "
        "the tests check outputs and gradients against transformers' SigLIP head in float64.",
        "",
        "## 2. Cached vs uncached training step, mini backbone",
        "",
        f"{c['backbone']}{' (tiny)' if c['tiny'] else ''}, tokens {c['tokens'][0]}x{c['tokens'][1]}, "
        f"{c['batch_images']} images per step, MAP head over the tokens.",
        "",
        "| mode | median s/step |",
        "|---|---|",
        f"| uncached (decode PNG + backbone + head) | {c['uncached_median_s']:.3f} |",
        f"| cached (read float16 tokens + head) | {c['cached_median_s']:.3f} |",
        f"| **speed-up** | **{c['speedup']:.1f}x** |",
        "",
        f"Building the cache: {c['cache_img_per_s']:.1f} images/s ({c['n_images_cached']} images in "
        f"{c['cache_build_s']:.1f} s), {c['cache_bytes_per_image'] / 1e3:.0f} kB per image on disk.",
        "",
        "## 3. Estimate: full paper training on one A100",
        "",
        f"FLOPs counted with `torch.utils.flop_counter` on the real classes (meta tensors): "
        f"SigLIP2-so400m-patch14-384 ({e['so400m_params_M']:.0f} M parameters) = "
        f"**{e['so400m_gflop_per_image']:.0f} GFLOP per 384 px image**; "
        f"a paper step = {a['paper_batch']} samples x ~{a['paper_images_per_sample']} images = "
        f"{e['images_per_step']} images.",
        "",
        f"Assumptions: A100 fp16 dense peak {a['a100_fp16_peak_tflops']:.0f} TFLOP/s, backbone utilisation "
        f"{a['backbone_mfu']:.0%}, head utilisation {a['head_mfu']:.0%}, token reads {a['nvme_GBps']:.0f} GB/s "
        f"from NVMe or {a['host_ram_GBps']:.0f} GB/s from host RAM, overlapped with compute.",
        "",
        "| | backbone | head | token I/O | total |",
        "|---|---|---|---|---|",
        f"| authors (backbone on every image of every step; reported {e['authors_reported_h']} h at "
        f"~{a['paper_s_per_step']} s/step) | {e['authors_backbone_h']:.2f} h | {e['authors_head_h'] * 60:.1f} min | - | "
        f"{e['authors_compute_bound_h']:.2f} h (compute bound) |",
        f"| ours, cache on NVMe | {e['ours_cache_build_min']:.1f} min (once, {e['n_cache_images']:,} images) | "
        f"{e['ours_head_compute_min']:.1f} min | {e['ours_token_io_nvme_min']:.1f} min | "
        f"**{e['ours_total_nvme_min']:.0f} min** |",
        f"| ours, cache in host RAM | same | same | {e['ours_token_io_ram_min']:.1f} min | "
        f"**{e['ours_total_ram_min']:.0f} min** |",
        f"| ours, NVMe, both `full` and `fg` variants cached (role-aware masking) | "
        f"{2 * e['ours_cache_build_min']:.1f} min | same | {e['ours_token_io_nvme_min']:.1f} min | "
        f"**{e['ours_total_nvme_full_and_fg_min']:.0f} min** |",
        "",
        f"Against the issue's target (< 30 min including the cache): met only with the cache in host RAM "
        f"and one variant; the backbone pass over {e['n_cache_images']:,} images alone is "
        f"~{e['ours_cache_build_min']:.0f} min at the assumed utilisation. Backbone FLOPs drop "
        f"{e['authors_backbone_h'] * 60 / e['ours_cache_build_min']:.1f}x versus running it every step.",
        "",
        f"The float16 token cache is {e['cache_GB_float16']:.0f} GB ({a['paper_tokens']} x {a['paper_dim']} per "
        "image). Head compute is negligible with the fast path "
        f"({e['head_gflop_per_step_fast']:.0f} vs {e['head_gflop_per_step_ref']:.0f} GFLOP per step for the "
        "reference); what remains is one backbone pass per image and reading the tokens once per epoch.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (seconds), for a smoke check")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if args.quick:
        head = bench_head(16, 49, 128, 4, 256, 3, 3)
        cache = bench_cache(48, 16, 3, 2, tiny=True)
    else:
        head = bench_head(128, 729, 1152, 16, 4304, 5, 3)
        cache = bench_cache(256, 64, 5, 8, tiny=False)
    res = {"quick": args.quick, "threads": args.threads, "torch": torch.__version__,
           "machine": f"{platform.machine()} {os.cpu_count()} cores", "loadavg_start": load0,
           "loadavg_end": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
           "head": head, "cache": cache}
    res["estimate"] = estimate_paper(head if not args.quick else bench_head_meta_only())
    out = Path(args.out)
    name = "bench_map_head" + ("_quick" if args.quick else "")
    write_json(res, out / f"{name}.json")
    atomic_write_text(out / f"{name}.md", _markdown(res))
    print(_markdown(res))
    return res


def bench_head_meta_only() -> dict:
    """FLOPs of the paper-size head step (meta tensors), for the estimate in --quick mode."""
    with torch.device("meta"):
        mh = MAPHead(PAPER["dim"], num_heads=PAPER["heads"], hidden=PAPER["mlp"])
        xm = torch.empty(128, PAPER["tokens"], PAPER["dim"])
    fl = {k: _flops(lambda f=f: _contrastive(mh(xm, fast=f)).backward()) for k, f in (("fast", True), ("ref", False))}
    return {"shape": [128, PAPER["tokens"], PAPER["dim"]], "gflop_fast": fl["fast"] / 1e9, "gflop_ref": fl["ref"] / 1e9}


if __name__ == "__main__":
    main()
