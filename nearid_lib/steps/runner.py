"""The one entry of every GPU step: ``python -m nearid_lib.steps run TARGET --profile paper [...]``
(what ``make curate``, ``make prefill``, ``make judge``, ``make fpr-generate`` and ``make bgremove``
launch, under ``torchrun`` with one process per GPU, or as one process without a GPU).

Before any model is loaded the runner places the target's models on the GPUs this process sees by
the one placement rule (:func:`~nearid_lib.steps.plan.plan_run`, the same plan ``nearid plan`` and the
preflight print) and refuses, with that plan, a target whose models no GPU group holds: a machine
too small fails in seconds, not an hour into the step. Then it calls the target's entry (declared
in the ledger beside its steps), which shards its items over the ranks, resumes from what an earlier
launch wrote and records the items it processed (:func:`~nearid_lib.steps.ledger.record_items`).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Callable, Sequence

from ..config import get_profile
from .gpus import visible_gpus
from .ledger import Sizes, targets
from .plan import plan_run

__all__ = ["main", "preplace", "step_arguments"]


def step_arguments(argv: Sequence[str] | None, doc: str | None,
                   more: Callable[[argparse.ArgumentParser], None] | None = None) -> tuple[argparse.Namespace, object]:
    """``(args, cfg)`` of a step entry's command line: ``--profile`` (default paper) and ``--set
    KEY=VALUE`` (repeatable; ``NEARID_SET`` too) as every entry takes them, plus the entry's own
    options (``more(parser)``); the profile is resolved with its overrides."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    ap.add_argument("--profile", default="paper")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    if more is not None:
        more(ap)
    args = ap.parse_args(argv)
    return args, get_profile(args.profile, overrides=dict(kv.split("=", 1) for kv in args.set))


def preplace(target: str, cfg, gpus=None) -> list[str]:
    """Why ``target``'s models cannot be placed on ``gpus`` (default: the visible ones), one line per
    model that no GPU group holds; empty when every model fits (or no GPU is visible: a CPU run)."""
    entry_steps = targets().get(target)
    if entry_steps is None:
        raise KeyError(f"no step target {target!r}; the ledger's targets: {', '.join(sorted(targets()))}")
    gpus = visible_gpus() if gpus is None else gpus
    if not gpus:
        return []
    plans = plan_run(gpus, Sizes.stated(cfg), cfg, steps=entry_steps[1])
    return [p.problem for p in plans if p.problem]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nearid_lib.steps run TARGET --profile paper [--set KEY=VALUE ...] [the entry's own
    options]``; ``python -m nearid_lib.steps list`` lists the targets, their entries and steps."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["list"]:
        for t, (entry, steps) in targets().items():
            print(f"{t}: {entry} ({', '.join(s.name for s in steps)})")
        return 0
    ap = argparse.ArgumentParser(prog="python -m nearid_lib.steps run", description=__doc__.split("\n")[0])
    ap.add_argument("cmd", choices=["run"])
    ap.add_argument("target")
    ap.add_argument("--profile", default="paper")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    known, rest = ap.parse_known_args(args)
    cfg = get_profile(known.profile, overrides=dict(kv.split("=", 1) for kv in known.set))
    try:
        problems = preplace(known.target, cfg)
    except KeyError as err:
        print(f"steps run: error: {err.args[0]}", file=sys.stderr)
        return 2
    if problems:
        if os.environ.get("RANK", "0") == "0":
            for p in problems:
                print(f"steps run {known.target}: cannot place: {p} (nearid plan --gpus COUNTxMODEL shows where "
                      f"it fits)", file=sys.stderr)
        return 1
    entry = targets()[known.target][0]
    sub = ["--profile", known.profile, *sum((["--set", kv] for kv in known.set), []), *rest]
    return int(_load_entry(entry).main(sub) or 0)


def _load_entry(module: str):
    """The entry module of a target (imported only once its models are placed)."""
    return importlib.import_module(module)
