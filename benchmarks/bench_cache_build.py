"""Token-cache building in `mini` (issue 12): the two levers of this stage, measured side by side in
one run on the same images.

1. BatchNorm folding: the frozen EfficientNet-Lite0's forward through its own model (grad enabled,
   the unfolded path) vs its no-grad forward (BatchNorms folded into the convolutions,
   ``nearid_lib.models.backbones.fold_batchnorm``), milliseconds per image on one thread, and the
   largest difference of the outputs relative to their scale.
2. Worker processes: ``Embedder.build`` of the same caches with ``workers=1`` and ``workers=2``
   (fresh cache folders each), wall seconds.

Writes ``benchmarks/results/bench_cache_build.{json,md}``.

    NEARID_ROOT=/path/to/a/clone/with/data/mini .venv/bin/python benchmarks/bench_cache_build.py
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path

import torch

from nearid_lib.config import get_profile
from nearid_lib.data import load_profile_data
from nearid_lib.models import load_backbone
from nearid_lib.data.groups import image_groups
from nearid_lib.features import Embedder
from nearid_lib.runtime import set_torch_threads


def _per_image_ms(fn, x, repeats: int) -> float:
    fn(x)                                   # warm-up at the timed shape
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn(x)
    return (time.perf_counter() - t0) / repeats / len(x) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="mini")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--splits", default="val", help="image groups of these splits are cached (comma list)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_cache_build"))
    args = ap.parse_args()
    set_torch_threads(1)
    cfg = get_profile(args.profile)
    data = load_profile_data(cfg, build=False)
    bb = load_backbone(cfg)[0]

    x = torch.randn(args.batch, 3, bb.image_size, bb.image_size, generator=torch.Generator().manual_seed(0))

    def unfolded(t):
        with torch.enable_grad():
            return bb(t)

    def folded(t):
        with torch.no_grad():
            return bb(t)

    ms_unfolded = _per_image_ms(unfolded, x, args.repeats)
    ms_folded = _per_image_ms(folded, x, args.repeats)
    a, b = unfolded(x), folded(x)
    rel = max(float((b.tokens - a.tokens.detach()).abs().max() / a.tokens.detach().abs().max()),
              float((b.pooled - a.pooled.detach()).abs().max() / a.pooled.detach().abs().max()))

    groups = image_groups(data, tuple(args.splits.split(",")))
    walls = {}
    n_images = None
    for w in (1, 2):
        root = Path(tempfile.mkdtemp(prefix=f"cache_w{w}_"))
        emb = Embedder(bb, data, cache_root=root, batch_size=cfg.backbone.batch_size, progress=False)
        t0 = time.perf_counter()
        emb.build(groups, variants=("full", "fg"), workers=w)
        walls[w] = time.perf_counter() - t0
        n_images = sum(len(c) for c in emb.caches.values())
        shutil.rmtree(root, ignore_errors=True)

    res = {"profile": args.profile, "backbone": bb.name, "token_layer": getattr(bb, "token_layer", None),
           "batch": args.batch, "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine(),
           "ms_per_image_unfolded": ms_unfolded, "ms_per_image_folded": ms_folded,
           "fold_speedup": ms_unfolded / ms_folded, "fold_max_rel_diff": rel,
           "cache_images": n_images, "cache_groups": len(groups) * 2,
           "cache_wall_s_workers1": walls[1], "cache_wall_s_workers2": walls[2],
           "workers_speedup": walls[1] / walls[2]}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=2))
    md = [f"# Token-cache building ({args.profile}, {bb.name}, one thread per process)", "",
          "| measure | value |", "|---|---|",
          f"| forward, unfolded model (ms / image, batch {args.batch}) | {ms_unfolded:.1f} |",
          f"| forward, BatchNorm folded (ms / image) | {ms_folded:.1f} |",
          f"| folding speed-up | {ms_unfolded / ms_folded:.2f}x |",
          f"| largest output difference / output scale | {rel:.1e} |",
          f"| cache build, {n_images} images in {len(groups) * 2} caches, 1 process (s) | {walls[1]:.1f} |",
          f"| same, 2 worker processes (s) | {walls[2]:.1f} |",
          f"| worker speed-up | {walls[1] / walls[2]:.2f}x |", ""]
    out.with_suffix(".md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
