"""The speed cost of portable numerics (``nearid_lib.runtime``), and whether they change the bits on
this machine; writes ``benchmarks/results/bench_portable.{json,md}``.

The same workloads run in fresh child processes under three settings, in turn, ``--repeats`` times
each: ``portable`` (``NEARID_PORTABLE=1``: pinned code paths, one thread, the frozen CNN's
BatchNorms unfolded, the path that gives the same backbone bits on Intel and AMD processors),
``portable-folded`` (the same with ``NEARID_FOLD_BATCHNORM=1``: the portable path before the
BatchNorms were unfolded) and ``native`` (``NEARID_PORTABLE=0`` with ``NEARID_THREADS=1``: each
library's own path, one thread, BatchNorms folded):

1. a frozen EfficientNet-Lite0 forward (the mini backbone, real weights) over 32 photographs at
   224 px, in batches of 32 (oneDNN convolutions) and of 8 (torch runs the 1x1 convolutions as MKL
   products below 16), and a forward + backward of the unfolded network at batch 24 (weights with
   grad: what ID-Sim's LoRA training runs);
2. the mini backbone's token cache of a smoke world at 224 px (the stride-16 tokens the mini head
   reads), then the NearID head with the mini head's shape trained ``--steps`` steps on it by the
   real trainer;
3. one claim's bootstrap (NearID 4c on fixed float evidence, 10,000 replicates; the fastest of 5);

and digests of each result and of four single ops (float32 softmax, GELU, a 3x3 convolution, a
matrix product), which say whether the pinned paths give other bits than this machine's own.

Usage: ``python benchmarks/bench_portable.py [--repeats 3] [--steps 30]``. Each workload is timed in
CPU seconds of its one-thread process (its work: other jobs on a shared machine slow it much less
than its wall time) and in wall seconds; the load average is recorded, and the ratios are measured
side by side in one run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))     # the digest helpers of tests/test_portable_numerics.py

ARMS = {"portable": {"NEARID_PORTABLE": "1"},
        "portable-folded": {"NEARID_PORTABLE": "1", "NEARID_FOLD_BATCHNORM": "1"},
        "native": {"NEARID_PORTABLE": "0", "NEARID_THREADS": "1"}}
PINNED = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES",
          "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _timed(fn):
    """``(result, CPU seconds, wall seconds)`` of ``fn()``. The CPU time of a one-thread process is its
    work, which other jobs on a shared machine slow much less than its wall time."""
    c0, w0 = time.process_time(), time.perf_counter()
    res = fn()
    return res, time.process_time() - c0, time.perf_counter() - w0


def child(world: Path, steps: int) -> dict:
    """One arm's measurements, in this (fresh) process: CPU seconds (``*_cpu``) and wall seconds."""
    import _portable_digests as D  # noqa: E402  (imports nearid_lib first: the setting applies)
    import torch
    from PIL import ImageOps

    from nearid_lib.claims import CLAIM_REPLICATES, claim_rng, evaluate_claim
    from nearid_lib.config import get_profile
    from nearid_lib.data import load_nearid
    from nearid_lib.models import load_backbone
    from nearid_lib.nearid.train import train_head
    from nearid_lib.runtime import numerics_record, set_torch_threads
    from nearid_lib.runtime.seeding import make_rng

    set_torch_threads(get_profile("mini").runtime.threads)    # one thread in both arms
    out: dict = {"numerics": numerics_record()}
    # single ops: does the pinned path give this machine's default bits?
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(8, 32, 56, 56, generator=g), torch.randn(64, 32, 3, 3, generator=g)
    a, b = torch.randn(512, 512, generator=g), torch.randn(512, 512, generator=g)
    out["ops"] = {"softmax": D.sha(torch.softmax(torch.randn(64, 1000, generator=g), dim=1)),
                  "gelu": D.sha(torch.nn.functional.gelu(torch.randn(1 << 20, generator=g))),
                  "conv3x3": D.sha(torch.nn.functional.conv2d(x, w, padding=1)), "matmul": D.sha(a @ b)}

    def record(key: str, fn, per: int = 1):
        res, cpu, wall = _timed(fn)
        out[f"{key}_cpu"], out[f"{key}_wall"] = cpu / per, wall / per
        return res

    # 1. the frozen backbone, in batches of 32 (oneDNN) and of 8 (1x1 convolutions as MKL products)
    enc = load_backbone(get_profile("mini"))[0]
    photos = D.fixed_images(8, 256)
    images = photos + [ImageOps.mirror(p) for p in photos] + [p.rotate(90) for p in photos] + \
        [ImageOps.flip(p) for p in photos]
    enc.encode(images[:8], batch_size=8)
    tok = record("forward_b32", lambda: enc.encode(images, batch_size=32), per=len(images))
    out["forward_digest"] = D.sha(tok.tokens, tok.pooled)
    record("forward_b8", lambda: enc.encode(images, batch_size=8), per=len(images))
    # a training-like pass (ID-Sim adapts Lite0's last stages on micro-batches of 3 x 8 images):
    # forward and backward of the unfolded network, weights requiring grad, batch 24
    net = enc.model
    for prm in net.parameters():
        prm.requires_grad_(True)
    px = torch.stack([enc.preprocess(im) for im in images[:24]])
    net(px[:8]).float().sum().backward()
    net.zero_grad()
    record("fwd_bwd_b24", lambda: net(px).float().sum().backward())
    out["fwd_bwd_digest"] = D.sha(*(prm.grad for prm in net.parameters() if prm.grad is not None))
    # 2. the token cache of a smoke world at 224 px (with one training step), then the head with the
    #    mini head's shape trained `steps` steps on the cached tokens
    mini = get_profile("mini")
    over = {"backbone.tiny": False, "backbone.token_layer": "blocks.4", "backbone.image_size": 224,
            "head.num_heads": mini.head.num_heads, "head.mlp_ratio": mini.head.mlp_ratio,
            "head.token_dropout": mini.head.token_dropout, "train.token_crop": mini.train.token_crop,
            "train.checkpoint_every": steps, "train.eval_every": 0}
    enc = load_backbone(get_profile("smoke", over))[0]
    data = load_nearid(world, splits=("train",))
    with tempfile.TemporaryDirectory() as cache:
        def train(n):
            return train_head(get_profile("smoke", {**over, "train.max_steps": n}), data, enc, progress=False,
                              eval_split=None, cache_root=Path(cache))
        record("cache", lambda: train(1))
        res = record("train", lambda: train(steps), per=steps)
    out["train_digest"] = D.sha(*res.head.state_dict().values())
    # 3. one claim's bootstrap (the fastest of 5)
    spec, ev = D.claim_4c()
    runs = [_timed(lambda: evaluate_claim(spec, ev, claim_rng(make_rng(0), spec.key), n_boot=CLAIM_REPLICATES))
            for _ in range(5)]
    out["bootstrap_cpu"], out["bootstrap_wall"] = min(r[1] for r in runs), min(r[2] for r in runs)
    row = runs[0][0]
    out["bootstrap_digest"] = D.sha(float(row["ci_low"]).hex(), float(row["ci_high"]).hex())
    return out


def run_child(arm: str, world: Path, steps: int) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in PINNED and k not in ("NEARID_THREADS", "NEARID_PORTABLE", "NEARID_FOLD_BATCHNORM")}
    env.update(ARMS[arm], PYTHONPATH=str(ROOT), NEARID_ROOT=str(ROOT), HF_HUB_OFFLINE="1")
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, __file__, "--child", str(world), "--steps", str(steps)], env=env,
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{arm} child failed:\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["wall_s"] = time.perf_counter() - t0
    return out


def markdown(res: dict) -> str:
    m, s = res["machine"], res["summary"]
    others = [a for a in ARMS if a != "portable"]
    lines = ["# Portable numerics: speed cost and bits", "",
             f"Machine: {m['cpu']['model']} ({m['cpu']['machine']}, flags {', '.join(m['cpu']['flags'])}), "
             f"torch's default CPU capability here {m['default_capability']}; {m['platform']}; load average "
             f"{m['loadavg_before']} before, {m['loadavg_after']} after ({'shared machine: other jobs ran beside it' if m['loadavg_before'][0] > 1.5 else 'quiet'}).",
             f"Child processes take turns: `portable` (`NEARID_PORTABLE=1`, BatchNorms unfolded), "
             f"`portable-folded` (the same with `NEARID_FOLD_BATCHNORM=1`) and `native` (`NEARID_PORTABLE=0 "
             f"NEARID_THREADS=1`, folded), {res['repeats']} each, one thread each; medians over the repeats. "
             f"CPU seconds are the measure (a one-thread process's work, which other jobs slow much less than "
             f"its wall time); wall seconds beside them. Ratios: `portable` over each other setting.", "",
             "| workload | CPU: " + " / ".join(ARMS) + " | " + " | ".join(f"ratio to {a}" for a in others)
             + " | wall: " + " / ".join(ARMS) + " |", "|---|---|" + "---|" * len(others) + "---|"]
    for key, label, unit in (("forward_b32", "Lite0 forward, 224 px, batches of 32 (oneDNN)", "ms / image"),
                             ("forward_b8", "Lite0 forward, 224 px, batches of 8 (1x1 convolutions in MKL)",
                              "ms / image"),
                             ("fwd_bwd_b24", "Lite0 forward + backward, batch 24, weights with grad", "ms"),
                             ("cache", "token cache of the smoke world at 224 px, and one head step", "s"),
                             ("train", f"NearID head, mini shape, on cached tokens ({res['steps']} steps)", "ms / step"),
                             ("bootstrap", "claim 4c bootstrap, 10,000 replicates (fastest of 5)", "ms")):
        scale = 1000 if unit.startswith("ms") else 1
        cpu = {a: s[f"{key}_cpu"][a] * scale for a in ARMS}
        wall = {a: s[f"{key}_wall"][a] * scale for a in ARMS}
        lines.append(f"| {label} | " + " / ".join(f"{cpu[a]:.1f}" for a in ARMS) + f" {unit} | "
                     + " | ".join(f"{cpu['portable'] / cpu[a]:.2f}" for a in others) + " | "
                     + " / ".join(f"{wall[a]:.1f}" for a in ARMS) + f" {unit} |")
    lines += ["", "Bits: the same result as `portable` here?", "",
              "| result | " + " | ".join(others) + " |", "|---|" + "---|" * len(others)]
    lines += [f"| {k} | " + " | ".join("yes" if v[a] else "no" for a in others) + " |"
              for k, v in res["same_bits"].items()]
    lines += ["", "Each arm gave the same digests in every repeat: "
              + ("yes" if res["repeatable"] else "NO") + ".", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(Path(args.child), args.steps)))
        return 0
    import _portable_digests as D  # noqa: E402

    from nearid_lib.config import get_profile
    from nearid_lib.data import build_world
    from nearid_lib.io_utils import atomic_write_text, write_json
    from nearid_lib.runtime import cpu_facts

    before = [round(v, 2) for v in os.getloadavg()]
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                           env={k: v for k, v in os.environ.items() if k not in PINNED}, capture_output=True,
                           text=True, check=True).stdout.strip()
    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as d:
        world = build_world(get_profile("smoke"), root=Path(d) / "nearid", progress=False, graded=False,
                            splits=("train",))
        for r in range(args.repeats):
            order = list(ARMS)
            for arm in (order if r % 2 == 0 else order[::-1]):
                runs[arm].append(run_child(arm, world, args.steps))
                print(f"repeat {r + 1} {arm}: {runs[arm][-1]['wall_s']:.1f} s", flush=True)
    keys = [f"{k}_{kind}" for k in ("forward_b32", "forward_b8", "fwd_bwd_b24", "cache", "train", "bootstrap")
            for kind in ("cpu", "wall")] + ["wall_s"]
    summary = {k: {arm: statistics.median(x[k] for x in runs[arm]) for arm in runs} for k in keys}
    digests = ("forward_digest", "fwd_bwd_digest", "train_digest", "bootstrap_digest")
    first = {arm: runs[arm][0] for arm in runs}
    same = {k.replace("_digest", ""): {a: first["portable"][k] == first[a][k] for a in ARMS} for k in digests}
    same.update({f"op {k}": {a: first["portable"]["ops"][k] == first[a]["ops"][k] for a in ARMS}
                 for k in first["portable"]["ops"]})
    repeatable = all(x[k] == first[arm][k] for arm in runs for x in runs[arm] for k in (*digests, "ops"))
    res = {"machine": {"cpu": cpu_facts(), "platform": platform.platform(), "python": sys.version.split()[0],
                       "default_capability": probe, "loadavg_before": before,
                       "loadavg_after": [round(v, 2) for v in os.getloadavg()]},
           "repeats": args.repeats, "steps": args.steps, "summary": summary, "same_bits": same,
           "repeatable": repeatable, "runs": runs, "digest_helpers": D.__name__}
    out = ROOT / "benchmarks" / "results"
    write_json(res, out / "bench_portable.json")
    atomic_write_text(out / "bench_portable.md", markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
