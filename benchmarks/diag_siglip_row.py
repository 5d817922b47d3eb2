"""Why is the SigLIP-BCE row of NearID Table 3 below chance in mini? (issue 53, item 5)

The mini row scores SSR 14.0 / PA 35.0 on test, below the frozen encoder (31.2 / 54.0); the paper
has 61.4 / 77.8. The loss matches a loop reference and a hand-computed case, its labels and signs
are right (``tests/test_nearid_loss_learning.py``), and it is wired like every other row (only
``train.loss`` changes). This script measures, on the **val** split, the row's recipe beside
variants that each change one thing, to locate the cause (none of them is adopted: the row keeps
the authors' definition, docs/mini.md "The SigLIP-BCE row"):

* ``step0``: the head at its initialisation (the start of every row: a random-init MAP head on the
  stride-16 tokens; the paper starts from SigLIP2's pretrained MAP head);
* ``siglip``: the row (t = 1/tau, b = -10 fixed, BCE averaged over pool pairs, alpha = 0.5);
* ``siglip_alpha0``: without the hard > batch rank term;
* ``siglip_learnable``: t and b learnt from SigLIP's initialisation (t = 10, b = -10);
* ``siglip_bias0``: b = 0, Table 4's notation read literally (``BCE(l_r, 0)`` with the logit
  l = cos / tau and no bias);
* ``siglip_sum``: SigLIP's own reduction, the BCE summed over the pool (and over the distractors)
  per anchor, averaged over anchors, so a positive pair weighs as much as one negative pair instead
  of 1/|G| of the anchor's term (a diagnostic reduction defined here, not in the library).

Besides SSR / PA it reports the mean cosines of the trained embedding on val: between two views of
an identity (positive), a view and its matched-context distractor, and views of two identities.
One seed (0), the mini recipe's 648 steps. Needs notebook 03's world and token caches.
Writes ``benchmarks/results/diag_siglip_row.{csv,md}``.

    NEARID_ROOT=/path/to/a/clone/with/data .venv/bin/python benchmarks/diag_siglip_row.py
"""
from __future__ import annotations

import argparse
import os
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from nearid_lib import get_profile
from nearid_lib.data import load_profile_data
from nearid_lib.models import load_backbone
from nearid_lib.nearid import losses as L
from nearid_lib.features import Embedder
from nearid_lib.nearid.evaluate import embed_split, mtg_bench, nearid_bench, summary_row
from nearid_lib.nearid.train import build_head, train_head
from nearid_lib.runtime import set_torch_threads

VARIANTS: dict[str, tuple[str, dict]] = {
    "step0": ("the head at initialisation (no training)", {}),
    "siglip": ("the Table 3 row: t = 1/tau, b = -10 fixed, BCE averaged over pairs, alpha 0.5", {}),
    "siglip_alpha0": ("the row without the hard > batch rank term (alpha 0)", {"train.alpha": 0.0}),
    "siglip_learnable": ("t and b learnt from SigLIP's init (t 10, b -10)",
                         {"train.siglip_learnable": True, "train.siglip_scale": 10.0}),
    "siglip_sum": ("SigLIP's reduction: BCE summed over the pool and the distractors per anchor", {}),
    "siglip_bias0": ("no bias (b = 0): Table 4's BCE(l_r, 0) read literally, logit l = cos / tau",
                     {"train.siglip_bias": 0.0}),
}


def _siglip_disc_sum(Lg, pool, temperature, scale, bias):
    """SigLIP's reduction (Zhai et al. 2023, -1/|B| sum_i sum_j): per anchor, the BCE summed over
    every pool member and every own distractor, then averaged over anchors (one process)."""
    t = 1.0 / temperature if scale is None else scale
    z_g = t * Lg.lg * temperature + bias
    z_r = t * Lg.lr * temperature + bias
    sign = torch.where(Lg.own, torch.ones_like(z_g), -torch.ones_like(z_g))
    rows = Lg.pos_mask.any(1) & ~Lg.rank_only
    per = (torch.where(Lg.g_valid, F.softplus(-sign * z_g), torch.zeros_like(z_g)).sum(1)
           + torch.where(Lg.dist_mask, F.softplus(z_r), torch.zeros_like(z_r)).sum(1))
    return torch.where(rows, per, torch.zeros_like(per)).sum() / rows.sum().clamp_min(1)


@contextmanager
def _reduction(name: str):
    if name != "siglip_sum":
        yield
        return
    orig = L._siglip_disc
    L._siglip_disc = _siglip_disc_sum
    try:
        yield
    finally:
        L._siglip_disc = orig


def _cosines(se, sources) -> dict:
    """Mean cosines on val: two views of an identity, a view and its distractor (matched context),
    views of two identities (first views)."""
    P, pm = F.normalize(se.positives.float(), dim=-1), se.pos_mask
    pos = []
    for i in range(P.shape[0]):
        v = P[i][pm[i]]
        c = v @ v.T
        pos.append(c[~torch.eye(len(v), dtype=torch.bool)].mean())
    dist = []
    for s in sources:
        D, dm = F.normalize(se.distractors[s].float(), dim=-1), se.dist_mask[s]
        ok = dm & pm
        dist.append((P * D).sum(-1)[ok])
    first = P[:, 0]
    other = first @ first.T
    return {"cos_pos": float(torch.stack(pos).mean()), "cos_dist": float(torch.cat(dist).mean()),
            "cos_other": float(other[~torch.eye(len(first), dtype=torch.bool)].mean())}


def score(emb, data) -> dict:
    se = embed_split(emb, data, "val", "full")
    row = summary_row(nearid_bench(se, data.train_sources), mtg_bench(se))
    return {"val_ssr": row["nearid_ssr"], "val_pa": row["nearid_pa"],
            **_cosines(se, [s for s in se.distractors if s in data.train_sources])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "diag_siglip_row"))
    args = ap.parse_args()
    set_torch_threads(int(os.environ.get("NEARID_THREADS", "2")))
    csv = Path(args.out).with_suffix(".csv")
    rows = pd.read_csv(csv).to_dict("records") if csv.exists() else []
    base = get_profile("mini", **{"train.loss": "siglip", "train.eval_every": 216})
    data = load_profile_data(base, build=False)
    backbone = load_backbone(base)[0]
    for name in args.variants.split(","):
        what, ov = VARIANTS[name]
        if any(r["variant"] == name for r in rows):
            print(f"[skip] {name}: in {csv}")
            continue
        cfg = get_profile("mini", **{"train.loss": "siglip", "train.eval_every": 216, **ov})
        t0 = time.time()
        if name == "step0":
            head = build_head(cfg, backbone.token_dim, backbone).eval()
            curve = ""
        else:
            with _reduction(name):
                res = train_head(cfg, data, backbone, out_dir=None, progress=False, eval_split="val")
            head = res.head
            curve = "; ".join(f"{e['step']}: {e['nearid_ssr']:.1f}/{e['nearid_pa']:.1f}" for e in res.evals)
        emb = Embedder(backbone, data, head=head, profile=cfg, batch_size=cfg.backbone.batch_size, progress=False)
        row = {"variant": name, "what": what, **score(emb, data), "val_ssr_pa_by_step": curve,
               "seconds": round(time.time() - t0, 1)}
        rows.append(row)
        pd.DataFrame(rows).to_csv(csv.with_suffix(".csv.tmp"), index=False)
        os.replace(csv.with_suffix(".csv.tmp"), csv)
        print(row, flush=True)
    df = pd.DataFrame(rows)
    cols = ["variant", "what", "val_ssr", "val_pa", "cos_pos", "cos_dist", "cos_other", "val_ssr_pa_by_step", "seconds"]
    fmt = lambda v: ("–" if isinstance(v, float) and np.isnan(v) else f"{v:.3f}" if isinstance(v, float) and abs(v) <= 1  # noqa: E731
                     else f"{v:.1f}" if isinstance(v, float) else str(v))
    md = ["# The SigLIP-BCE row in mini: the row's recipe beside one-change variants (val, seed 0)", "",
          "SSR / PA on the val split (pooled Table 1 sources, percent); mean cosines of the trained embedding: "
          "two views of an identity (`cos_pos`), a view and its matched-context distractor of the training "
          "sources (`cos_dist`), first views of two identities (`cos_other`). `val_ssr_pa_by_step`: SSR/PA at "
          "steps 216, 432, 648; `seconds`: on the 2-core development machine while other jobs ran (not timings). "
          "For reference (notebook 03, same split): the frozen encoder 26.5 / 54.4, L_NearID (seed 0) 82.9 / 93.7. "
          "Written by `benchmarks/diag_siglip_row.py`; none of the variants is adopted.", "",
          "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in df[cols].itertuples(index=False)]
    csv.with_suffix(".md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
