"""``python -m nearid_lib.judge``: judge a CSV of image pairs (columns ``img_a``, ``img_b``) with the
VLM judge, sharded over the processes of ``torchrun`` / ``accelerate launch``; rank 0 writes the
table (the pairs + similarity, status, answer, hit_limit)::

    torchrun --nproc_per_node 8 -m nearid_lib.judge --pairs pairs.csv --root DATA \\
        --answers work/judge --out judged.csv --judge Qwen/Qwen3-VL-30B-A3B-Instruct
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Iterable

import torch

from ..io_utils import write_csv
from ..runtime.launch import end_launch, launched_state
from .model import VLMJudge, read_prompt_file
from .prompts import IDSIM_JUDGE_PROMPT
from .shards import score_pairs_sharded

__all__ = ["main"]


def _parse(argv: Iterable[str] | None):
    p = argparse.ArgumentParser(
        prog="python -m nearid_lib.judge",
        description="Judge a CSV of image pairs (columns img_a, img_b) with the VLM judge, sharded over "
                    "the processes of `torchrun` / `accelerate launch`; rank 0 writes the table.")
    p.add_argument("--pairs", required=True, help="CSV with columns img_a, img_b (paths, relative to --root)")
    p.add_argument("--root", default=".", help="folder the image paths are relative to")
    p.add_argument("--out", required=True, help="output CSV: the pairs + similarity, status, answer, hit_limit")
    p.add_argument("--answers", default=None, help="answers folder (resumable; default: <out>.answers)")
    p.add_argument("--judge", default="tiny", help="'tiny' (random-init, offline) or a hub id / folder")
    p.add_argument("--prompt", choices=("nearid", "idsim"), default="nearid",
                   help="NearID's 0-10 score rubric or ID-Sim's 0-1 similarity")
    p.add_argument("--prompt-file", default=None, help="the judge's instruction from a text file, sent after the "
                   "two images (the NearID authors' evaluation/vl_template_v2.txt); overrides --prompt")
    p.add_argument("--parsing", choices=("authors", "strict"), default=None,
                   help="how answers are read: the NearID authors' (score, else similarity, clipped to the rubric; "
                        "default for the NearID rubric) or strict (off-rubric answers not covered; default for idsim)")
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--progress", action="store_true")
    return p.parse_args(list(argv) if argv is not None else None)


def main(argv: Iterable[str] | None = None):
    """CLI entry point; returns the judged table (on every rank; rank 0 writes it)."""
    import pandas as pd
    from PIL import Image

    args = _parse(argv)
    state = launched_state()
    kw: dict[str, Any] = {}
    if args.max_new_tokens is not None:
        kw["max_new_tokens"] = args.max_new_tokens
    if args.batch_size is not None:
        kw["batch_size"] = args.batch_size
    if args.prompt == "idsim":
        kw.update(prompt=IDSIM_JUDGE_PROMPT, answer_key="similarity", answer_max=1.0)
    if args.prompt_file:
        kw.update(prompt=read_prompt_file(args.prompt_file), prompt_after_images=True, answer_key="score",
                  answer_max=10.0)
    kw["parsing"] = args.parsing or ("strict" if args.prompt == "idsim" and not args.prompt_file else "authors")
    if args.judge == "tiny":
        judge = VLMJudge.tiny(**kw)
    else:
        device = str(state.device) if state is not None else ("cuda" if torch.cuda.is_available() else "cpu")
        judge = VLMJudge.from_pretrained(args.judge, device=device, dtype=args.dtype, **kw)
    pairs = pd.read_csv(args.pairs, dtype=str, keep_default_na=False)
    for col in ("img_a", "img_b"):
        if col not in pairs.columns:
            raise SystemExit(f"{args.pairs}: missing column {col!r}")
    root = Path(args.root)

    def load(idx):
        def im(rel):
            with Image.open(root / rel) as f:
                return f.convert("RGB")
        return [im(pairs.img_a[i]) for i in idx], [im(pairs.img_b[i]) for i in idx]

    keys = [f"{a}|{b}" for a, b in zip(pairs.img_a, pairs.img_b)]
    answers = Path(args.answers) if args.answers else Path(str(args.out) + ".answers")
    res = score_pairs_sharded(judge, keys, load, answers_dir=answers, progress=args.progress, state=state)
    table = pairs.assign(similarity=res.scores, status=res.status, answer=res.raw, hit_limit=res.hit_limit)
    if state is None or state.is_main_process:
        write_csv(table, args.out)
        print(json.dumps({"out": str(args.out), "n": int(len(table)), **{
            k: v for k, v in res.summary().items() if k in ("n_covered", "coverage", "n_hit_limit")}}))
    end_launch()                    # every rank leaves the group (rank 0 wrote the table outside it)
    return table

