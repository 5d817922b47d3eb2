"""Paper scale on one node: the frozen SigLIP2-so400m backbone, the MAP head, the token store, a
training step, one checkpoint's evaluation, and the projected full run, measured on this device.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_paper_scale.py     # CPU: ~4 min on 2 shared cores
    .venv/bin/python benchmarks/bench_paper_scale.py --skip-generation

Writes ``benchmarks/results/paper_scale_<cpu|cuda>.json`` and ``.md`` (and the generation
benchmark's own ``bench_generation_<cpu|cuda>.*``, which this command runs too).

On CUDA every model is full size (random-init so400m built from ``SiglipVisionConfig``: the released
weights' FLOPs and memory, no download), bf16. On a CPU the backbone is measured at reduced width
and depth of the same geometry (patch 14, 384 px, 729 tokens) and its cost at full size is
so400m's counted FLOPs at the FLOP rate of the largest reduced tower; the head (at a reduced batch),
the store and the evaluation are measured at full paper width. Every output says which.

Sections: (1) backbone images/s, batch sweep; (2) head step, fast vs reference, [B, 729, 1152];
(3) token store: disk per grid, write/read GB/s, decode, and what each dtype does to embeddings;
(4) training step over paper-shaped batches, backbone streamed vs tokens from the store (the
cached vs uncached ratio), at paper geometry and with the mini backbone; (5) evaluation of one
checkpoint; (6) projections of the paper run; (7) generation (``bench_generation.py``).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from nearid_lib.io_utils import atomic_write_text, write_json  # noqa: E402
from nearid_lib.models.backbones import SiglipEncoder  # noqa: E402  (also makes torchvision importable)

import paper_scale_model as model  # noqa: E402
import paper_scale_parts as parts  # noqa: E402
from paper_scale_parts import loadavg, torch_setup  # noqa: E402
import paper_scale_steps as steps  # noqa: E402
from paper_scale_report import render  # noqa: E402

# sizes per mode; "cpu" sizes fit ~4 minutes on 2 shared cores (one thread each section)
PLAN = {
    "cpu": dict(bb_sizes=[(288, 6), (576, 6)], bb_batches=[2], bb_reps=2, head_b=[16], head_reps=(2, 1),
                store_n=128, store_b=32, codec_n=12, eval_n=64, eval_b=32, step_width=(144, 6), step_rows=2,
                step_reps=1, mini_rows=4, mini_reps=2),
    "cuda": dict(bb_sizes=[(1152, 27)], bb_batches=[32, 64, 128, 256, 512], bb_reps=5, head_b=[128, 656],
                 head_reps=(20, 5), store_n=2048, store_b=256, codec_n=32, eval_n=4096, eval_b=256,
                 step_width=(1152, 27), step_rows=128, step_reps=3, mini_rows=12, mini_reps=5),
}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="auto", help="auto (CUDA when available) | cpu | cuda")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: keep OMP_NUM_THREADS' value)")
    ap.add_argument("--skip-generation", action="store_true")
    ap.add_argument("--workdir", default=None, help="folder for temporary stores and images (default: $TMPDIR)")
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args(argv)
    dev, args.threads = torch_setup(args.device, args.threads)
    mode = dev.type
    plan = PLAN[mode]
    res: dict = {"mode": mode, "device": torch.cuda.get_device_name() if dev.type == "cuda" else
                 f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
                 "threads": args.threads, "torch": torch.__version__, "plan": plan,
                 "started": time.strftime("%Y-%m-%d %H:%M:%S"), "load": {"start": loadavg()}, "seconds": {}}

    def section(name, fn):
        t0 = time.perf_counter()
        print(f"[{name}] load {loadavg()} ...", flush=True)
        res[name] = fn()
        res["seconds"][name] = round(time.perf_counter() - t0, 1)
        res["load"][name] = loadavg()
        print(f"[{name}] {res['seconds'][name]} s", flush=True)

    p = plan
    section("backbone", lambda: parts.bench_backbone(dev, p["bb_sizes"], p["bb_batches"], p["bb_reps"]))
    section("head", lambda: parts.bench_head(dev, p["head_b"], *p["head_reps"]))
    section("store", lambda: parts.bench_store(dev, p["store_n"], p["store_b"], workdir=args.workdir))
    section("precision", lambda: steps.codec_error(*steps.real_tokens(p["codec_n"], args.workdir)))
    section("step_paper_geometry", lambda: _paper_step(dev, p, args.workdir))
    section("step_mini", lambda: _mini_step(dev, p, args.workdir))
    section("eval", lambda: steps.bench_eval(dev, p["eval_n"], p["eval_b"], args.workdir))
    res["workload"] = model.workload()
    res["projection"] = _projections(res, dev)
    if not args.skip_generation:
        import bench_generation

        gen_args = ["--device", dev.type, "--out", args.out, "--threads", str(args.threads)]
        section("generation", lambda: bench_generation.main(gen_args))
    res["load"]["end"] = loadavg()
    res["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    out = Path(args.out)
    name = f"paper_scale_{mode}"
    write_json(res, out / f"{name}.json")
    md = render(res, name)
    atomic_write_text(out / f"{name}.md", md)
    print(md)
    return res


def _paper_step(dev, p, workdir) -> dict:
    """A training step at so400m geometry: the backbone at ``step_width`` (full size on CUDA) with a
    head of the same width, tokens streamed vs read from int8 / float16 stores."""
    from nearid_lib.models import MAPHead

    width, layers = p["step_width"]
    torch.manual_seed(0)
    bb = SiglipEncoder("siglip2-so400m-patch14-384", "none", tiny=True, config=parts.siglip_config(width, layers))
    if dev.type == "cuda":
        bb = bb.to(dev, torch.bfloat16)
    head = MAPHead(width, num_heads=max(1, width // 72), hidden=round(parts.P["mlp"] * width / parts.P["dim"])).to(dev)
    n_img = max(8, p["step_rows"] * 6)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        data = steps.FakeData(Path(tmp) / "img", n_img, 512)
        r = steps.step_pair(bb, head, data, p["step_rows"], p["step_reps"], dev, ("int8", "float16"), tmp)
    r.update(width=width, layers=layers, backbone_gflop_per_img=parts.backbone_flops(parts.siglip_config(width, layers)) / 1e9)
    return r


def _mini_step(dev, p, workdir) -> dict:
    """The same step with the mini profile's backbone (EfficientNet-Lite0, ImageNet weights, tap
    blocks.4, 224 px) and head (8 heads, MLP x2, token dropout 0.2): the cached vs uncached ratio."""
    from nearid_lib.config import get_profile
    from nearid_lib.models import MAPHead, load_backbone

    cfg = get_profile("mini")
    bb = load_backbone(cfg, device=dev)[0]
    hc = cfg.head
    torch.manual_seed(0)
    head = MAPHead(bb.token_dim, num_heads=hc.num_heads, mlp_ratio=hc.mlp_ratio, token_dropout=hc.token_dropout).to(dev)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        data = steps.FakeData(Path(tmp) / "img", p["mini_rows"] * 6, 224)
        r = steps.step_pair(bb, head, data, p["mini_rows"], p["mini_reps"], dev, ("int8", "float16"), tmp)
    r.update(backbone=f"{bb.name} tap {cfg.backbone.token_layer}", tokens=[bb.n_tokens, bb.token_dim])
    return r


def _projections(res: dict, dev) -> dict:
    """The paper run from this device's measured rates, and (without a GPU) from counted FLOPs at the
    assumed GPU utilisation. Token reads: this machine's measured cold disk reads in both; decoding
    as measured here in the CPU column, and taken as free in the GPU columns (int8 -> float on the
    GPU moves ~4 MB per grid at > 1 TB/s: microseconds)."""
    w = model.workload()
    S = w["slots_per_step"]
    hs = max(res["head"]["steps"], key=lambda h: h["shape"][0])         # the largest measured batch
    b = hs["shape"][0]
    st, ev = res["store"], res["eval"]
    reads = {dt: st[dt]["read_cold_decode_s_per_grid"] for dt in ("int8", "float16")}
    here = {"backbone_img_s": res["backbone"]["full_img_per_s"],
            "head_fast_step_s": hs["fast_s"] * S / b, "head_ref_step_s": hs["ref_s"] * S / b,   # linear in B
            "read_s_per_grid": reads, "head_eval_s_per_grid": ev["head_s_per_grid"],
            "metrics_s": ev["metrics_s_9x500x2"]}
    gb = st["grid_bytes"]
    out = {"rates": {"this device (measured)": here}, "grid_bytes": gb}
    if dev.type != "cuda":
        flops_img = res["backbone"]["full_gflop_per_img"] * 1e9
        g = model.gpu_rates(flops_img, hs["gflop_fast"] * 1e9 * S / b, hs["gflop_ref"] * 1e9 * S / b)
        for name, r in g.items():
            if "head_fast_step_s" not in r:
                continue
            # evaluation head FLOPs ~ a third of a training step's (forward only) per grid
            out["rates"][f"{name} (assumed)"] = {
                **here, "backbone_img_s": r["backbone_img_s"], "head_fast_step_s": r["head_fast_step_s"],
                "read_s_per_grid": {dt: st[dt]["read_cold_s_per_grid"] for dt in ("int8", "float16")},
                "head_ref_step_s": r["head_ref_step_s"],
                "head_eval_s_per_grid": hs["gflop_fast"] * 1e9 / b / 3 / (r["bf16_peak_tflops"] * 1e12 * r["head_mfu"])}
        out["gpu_assumptions"] = {**model.GPU_ASSUMED, "timm_4090_check": {
            **model.TIMM_4090, "implied_mfu": g["timm-4090 (published)"]["implied_mfu"]}}
    out["training_min"] = {k: model.project(w, r, gb, budget_gb=100) for k, r in out["rates"].items()}
    out["eval"] = {k: model.eval_minutes(w, r) for k, r in out["rates"].items()}
    out["budget_curve"] = model.budget_curve(w, gb["int8"])
    out["disk"] = {k: model.disk_sensitivity(w, r, gb) for k, r in out["rates"].items()
                   if "(assumed)" in k or dev.type == "cuda"}
    return out


if __name__ == "__main__":
    main()
