"""Backbone, head and token-store measurements of ``bench_paper_scale.py`` (each returns a dict).

Every function runs on CUDA at full paper size when ``dev`` is a GPU, and on the CPU at the sizes
it is given (reduced width / fewer images), returning what it measured and at which size.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from nearid_lib.features.shards import CODECS, ShardedTokenStore, record_bytes
from nearid_lib.models import MAPHead

P = dict(tokens=729, dim=1152, heads=16, mlp=4304, layers=27, image=384, patch=14)


def torch_setup(device: str, threads: int) -> tuple[torch.device, int]:
    """The benchmarks' common start: torch threads (0 keeps OMP_NUM_THREADS' value) and the device
    ("auto" = CUDA when available). Returns (device, threads in use)."""
    if threads:
        torch.set_num_threads(threads)
    dev = torch.device("cuda" if device in ("auto", "cuda") and torch.cuda.is_available() else "cpu")
    return dev, torch.get_num_threads()


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded (timings on a shared machine need them)."""
    return [round(x, 2) for x in os.getloadavg()]


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timeit(fn, dev, warmup=1, reps=3) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        sync(dev)
        t0 = time.perf_counter()
        fn()
        sync(dev)
        out.append(time.perf_counter() - t0)
    return out


def count_flops(fn) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    fc = FlopCounterMode(display=False)
    with fc:
        fn()
    return float(fc.get_total_flops())


# ----------------------------------------------------------------------------- backbone
def siglip_config(width: int = P["dim"], layers: int = P["layers"]):
    """so400m's geometry (patch 14, 384 px, 729 tokens, head dim 72, MLP 4304/1152 of the width) at
    ``width`` and ``layers``; width 1152 x 27 layers is SigLIP2-so400m-patch14-384 itself."""
    from transformers import SiglipVisionConfig

    return SiglipVisionConfig(hidden_size=width, intermediate_size=round(P["mlp"] * width / P["dim"]),
                              num_hidden_layers=layers, num_attention_heads=max(1, width // 72),
                              image_size=P["image"], patch_size=P["patch"])


def backbone_flops(cfg) -> float:
    """FLOPs of one 384 px image through the tower (meta tensors: no weights, instant)."""
    from transformers import SiglipVisionModel

    with torch.device("meta"):
        m = SiglipVisionModel(cfg)
        x = torch.empty(1, 3, P["image"], P["image"])
    with torch.no_grad():
        return count_flops(lambda: m(pixel_values=x))


def bench_backbone(dev, sizes, batches, reps) -> dict:
    """Images/s of random-init SigLIP towers of so400m geometry (bf16 on CUDA, float32 on CPU) at
    each (width, layers) and batch; ``fit``: seconds per image = a * FLOPs + b over the points."""
    from transformers import SiglipVisionModel

    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    rows = []
    for width, layers in sizes:
        cfg = siglip_config(width, layers)
        fl = backbone_flops(cfg)
        torch.manual_seed(0)
        m = SiglipVisionModel(cfg).to(dev, dtype).eval()
        for b in batches:
            x = torch.randn(b, 3, P["image"], P["image"], device=dev, dtype=dtype)
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            try:
                with torch.no_grad():
                    t = timeit(lambda: m(pixel_values=x), dev, 1, reps)
            except torch.OutOfMemoryError:
                rows.append({"width": width, "layers": layers, "batch": b, "oom": True})
                continue
            s = statistics.median(t) / b
            rows.append({"width": width, "layers": layers, "batch": b, "gflop_per_img": fl / 1e9,
                         "s_per_img": s, "img_per_s": 1 / s, "achieved_tflops": fl / s / 1e12,
                         "peak_mem_gb": torch.cuda.max_memory_allocated() / 1e9 if dev.type == "cuda" else None})
        del m
    full = backbone_flops(siglip_config())
    ok = [r for r in rows if not r.get("oom")]
    best = {}
    for r in ok:                                  # best batch per size
        k = (r["width"], r["layers"])
        if k not in best or r["s_per_img"] < best[k]["s_per_img"]:
            best[k] = r
    pts = list(best.values())
    f = np.array([r["gflop_per_img"] * 1e9 for r in pts])
    t = np.array([r["s_per_img"] for r in pts])
    if len(pts) >= 2:
        a, b0 = np.polyfit(f, t, 1)
    else:
        a, b0 = float(t[0] / f[0]), 0.0
    full_pt = best.get((P["dim"], P["layers"]))
    big = max(pts, key=lambda r: r["gflop_per_img"])      # the largest measured tower: its FLOP rate
    s_full = full_pt["s_per_img"] if full_pt else full / (big["achieved_tflops"] * 1e12)
    return {"dtype": str(dtype).replace("torch.", ""), "points": rows, "full_gflop_per_img": full / 1e9,
            "fit": {"s_per_gflop": float(a) * 1e9, "s_offset": float(b0)},
            "full_s_per_img": s_full, "full_img_per_s": 1 / s_full,
            "full_measured": full_pt is not None,
            "fit_full_s_per_img": float(a * full + b0),
            "method": ("measured at full size" if full_pt else
                       f"so400m's counted FLOPs at the FLOP rate measured for the largest reduced tower "
                       f"(width {big['width']}, {big['layers']} layers); the least-squares line over all "
                       "points is reported as a check (noisy on a shared CPU)")}


# ----------------------------------------------------------------------------- head
def _contrastive(z):
    z = F.normalize(z.float(), dim=-1)
    logits = z @ z.t() / 0.07 - 1e4 * torch.eye(len(z), device=z.device)
    return F.cross_entropy(logits, torch.arange(len(z), device=z.device) ^ 1)


def bench_head(dev, batches, reps_fast, reps_ref, with_ref=True) -> dict:
    """One optimiser step (forward, backward, AdamW) of the paper's MAP head (1152, 16 heads, MLP
    4304) over tokens [B, 729, 1152]: the exact fast path and the reference attention."""
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if dev.type == "cuda" else torch.autocast("cpu", enabled=False)
    torch.manual_seed(0)
    head = MAPHead(P["dim"], num_heads=P["heads"], hidden=P["mlp"]).to(dev)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-4, weight_decay=1e-4)
    out = []
    for b in batches:
        x = torch.randn(b, P["tokens"], P["dim"], device=dev)

        def step(fast):
            opt.zero_grad(set_to_none=True)
            with amp:
                loss = _contrastive(head(x, fast=fast))
            loss.backward()
            opt.step()

        with torch.device("meta"):
            mh = MAPHead(P["dim"], num_heads=P["heads"], hidden=P["mlp"])
            xm = torch.empty(b, P["tokens"], P["dim"])
        fl = {k: count_flops(lambda f=f: _contrastive(mh(xm, fast=f)).backward()) for k, f in (("fast", True), ("ref", False))}
        tf = statistics.median(timeit(lambda: step(True), dev, 1, reps_fast))
        tr = statistics.median(timeit(lambda: step(False), dev, 1, reps_ref)) if with_ref else float("nan")
        out.append({"shape": [b, P["tokens"], P["dim"]], "fast_s": tf, "ref_s": tr, "speedup": tr / tf,
                    "gflop_fast": fl["fast"] / 1e9, "gflop_ref": fl["ref"] / 1e9})
    return {"precision": "bf16 autocast" if dev.type == "cuda" else "float32", "steps": out}


# ----------------------------------------------------------------------------- store
def _drop_page_cache(paths):
    """Evict files from the page cache (clean pages; no root needed) for a cold-read measurement."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def bench_store(dev, n_grids, batch, dtypes=("int8", "float16"), workdir=None) -> dict:
    """Write ``n_grids`` paper-size grids [729, 1152] per dtype, then read random batches cold (page
    cache dropped) and warm, decoding on ``dev``. Seconds per grid and GB/s."""
    out = {}
    rng = np.random.default_rng(0)
    x = torch.randn(batch, P["tokens"], P["dim"])
    for dt in dtypes:
        with tempfile.TemporaryDirectory(dir=workdir) as tmp:
            st = ShardedTokenStore(tmp, P["tokens"], P["dim"], dt, shard_records=256)
            t0 = time.perf_counter()
            for b0 in range(0, n_grids, batch):
                st.put([(f"img/{i}.png", "full") for i in range(b0, min(n_grids, b0 + batch))], x[:min(batch, n_grids - b0)])
            write_s = time.perf_counter() - t0
            keys = st.keys()
            res = {"record_bytes": st.rb, "write_s_per_grid": write_s / n_grids,
                   "write_GBps": n_grids * st.rb / write_s / 1e9}
            for mode in ("cold", "warm"):
                ts = []
                for _ in range(3):
                    if mode == "cold":
                        _drop_page_cache(list(Path(tmp).glob("*.bin")))
                    sel = [keys[i] for i in rng.choice(len(keys), size=min(batch, len(keys)), replace=False)]
                    t0 = time.perf_counter()
                    st.get_raw(sel)
                    ts.append((time.perf_counter() - t0) / len(sel))
                res[f"read_{mode}_s_per_grid"] = statistics.median(ts)
                res[f"read_{mode}_GBps"] = st.rb / statistics.median(ts) / 1e9
            # decoding (uint8 records -> float32 on dev, incl. the host->device copy) = get - get_raw, warm
            sel = keys[:batch]
            t_read = statistics.median(timeit(lambda: st.get_raw(sel), dev, 1, 3))
            t_get = statistics.median(timeit(lambda: st.get(sel, device=dev), dev, 1, 3))
            res["decode_s_per_grid"] = max(0.0, t_get - t_read) / len(sel)
            res["read_cold_decode_s_per_grid"] = res["read_cold_s_per_grid"] + res["decode_s_per_grid"]
            out[dt] = res
    out["grid_bytes"] = {dt: record_bytes(P["tokens"], P["dim"], dt) for dt in CODECS}
    return out
