"""``score_encoder`` of a Lite0-sized callable on ``mini`` from an empty data / cache / build folder
(issue 25, item 2: "a Lite0-sized callable scored on mini from a fresh clone in <= 5 minutes on 2
cores, install excluded").

The callable is timm's EfficientNet-Lite0 (random weights: the cost of the real one, nothing to
download) at 224 px with global average pooling, ``list[PIL] -> [N, 1280]``. Everything it needs is
built inside the timed call: the test split of the mini world (``build_world(splits=("test",))``),
the frozen baselines' caches, the simulated FPR generators, the report card. Nothing is trained:
a fresh clone has no NearID head or ID-Sim checkpoint, so their rows are absent (as for a new user).

Writes ``benchmarks/results/score_encoder.{json,md}``.

    .venv/bin/python benchmarks/bench_score_encoder.py            # ~ minutes on 2 cores
    .venv/bin/python benchmarks/bench_score_encoder.py --profile smoke   # seconds (a check of the script)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path


def lite0_callable(image_size: int = 224, seed: int = 0):
    """A Lite0-sized ``list[PIL] -> [N, 1280]`` callable (random weights of ``seed``, same compute)."""
    import numpy as np
    import timm
    import torch

    torch.manual_seed(seed)
    model = timm.create_model("efficientnet_lite0", pretrained=False, num_classes=0).eval()
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)

    def lite0(images):
        x = np.stack([np.asarray(im.convert("RGB").resize((image_size, image_size))) for im in images])
        t = (torch.from_numpy(x).permute(0, 3, 1, 2).float() / 255 - mean) / std
        with torch.no_grad():
            return model(t).numpy()

    return lite0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="mini")
    ap.add_argument("--workdir", default=None, help="empty folder for data/cache/build (default: a temp dir)")
    ap.add_argument("--out", default=None, help="results stem (default results/score_encoder[_warm])")
    ap.add_argument("--warm", action="store_true",
                    help="reuse --workdir as a previous run left it (world and baseline caches built) and "
                         "score another encoder (--seed): the cost of each further encoder")
    ap.add_argument("--seed", type=int, default=0, help="random weights of the callable")
    args = ap.parse_args()
    if args.warm and not args.workdir:
        ap.error("--warm needs the --workdir of a previous run")
    args.out = args.out or str(Path(__file__).parent / "results" / ("score_encoder_warm" if args.warm else "score_encoder"))
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_score_"))
    for var, sub in (("NEARID_DATA", "data"), ("NEARID_CACHE", "cache"), ("NEARID_OUT", "build")):
        os.environ[var] = str(work / sub)
        assert args.warm or not (work / sub).exists() or not any((work / sub).iterdir()), f"{work / sub} is not empty"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    t_import = time.perf_counter()
    import torch

    import nearid_lib
    from nearid_lib.data import nearid_root

    import nearid_lib.score.scoring as sc

    phases: dict[str, float] = {}

    def timed(name, f):
        def run(*a, **kw):
            t = time.perf_counter()
            try:
                return f(*a, **kw)
            finally:
                phases[name] = round(time.perf_counter() - t, 1)
        return run

    for proto in ("nearid", "idsim", "fpr"):          # the protocol runners score_encoder calls
        setattr(sc, f"run_{proto}", timed(proto, getattr(sc, f"run_{proto}")))
    fn = lite0_callable(seed=args.seed)
    t0 = time.perf_counter()
    rep = nearid_lib.score_encoder(fn, profile=args.profile, name="lite0-sized", progress=False)
    total = time.perf_counter() - t0
    man = json.loads((nearid_root(args.profile) / "manifest.json").read_text())
    res = {
        "profile": args.profile,
        "start": "warm: world and baseline caches of a previous run" if args.warm else "empty data/cache/build",
        "seconds_total": round(total, 1),
        "seconds_world_build": man.get("build_seconds"),
        "seconds_imports_and_model": round(t0 - t_import, 1),
        "seconds_per_protocol": phases,
        "world_splits": man.get("splits", ["train", "val", "test"]),
        "world_counts": man.get("counts"),
        "participants": rep.table.loc[rep.table.source.astype(str).str.startswith("this run"), "row"].tolist(),
        "notes": rep.notes,
        "goal_seconds": 300,
        "goal_met": bool(total <= 300),
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "platform": platform.platform(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    md = [f"# score_encoder of a Lite0-sized callable, profile `{args.profile}`, {res['start']}", "",
          f"- total: **{res['seconds_total']:.0f} s** ({res['seconds_total'] / 60:.1f} min; goal 300 s: "
          f"{'met' if res['goal_met'] else 'NOT met'})",
          f"- world build (splits {', '.join(res['world_splits'])}): {res['seconds_world_build']} s"
          + (" (in the previous run, reused here)" if args.warm else ""),
          f"- per protocol (its participants' embeddings included): "
          + ", ".join(f"{k} {v:.0f} s" for k, v in phases.items()),
          f"- imports + model creation before the call: {res['seconds_imports_and_model']} s",
          f"- {res['cpu_count']} CPUs, torch threads {res['torch_threads']}, load average at the end "
          f"{', '.join(f'{x:.1f}' for x in res['load_average'])} ({res['when']})", ""]
    out.with_suffix(".md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
