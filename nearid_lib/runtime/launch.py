"""Multi-process launches (``torchrun``, ``accelerate launch``): join one, and leave it cleanly.

Shared by the NearID trainer, the VLM judge, the generation runner and the paper profile's GPU
steps (curation, token-store prefill, judge). :func:`launched_state` is
accelerate's ``PartialState`` when this process is one rank of a launch, else ``None``.
:func:`end_launch` is called by every entry point once its work is done: the process group is
destroyed. Without it the interpreter tears down the gloo / NCCL threads at exit, and a rank can
abort (``terminate called without an active exception``, SIGABRT) after its work is done, which
torchrun reports as a failed run.

**No phase can time out.** A collective (barrier, all-reduce, gather) waits at most the process
group's timeout (NCCL's default: 10 minutes) for the slowest rank; a rank still working when it
expires fails the launch hours in. Two rules: (1) :func:`end_launch` is no collective: each rank
leaves the group once its own work is done, so what rank 0 does after the last collective (writing
tables, MTG, the manifest, publishing a head) runs outside the group and can take as long as it
takes; (2) every group this project creates waits :func:`collective_timeout` seconds, sized to the
longest phase that other ranks wait through *inside* a collective (:data:`RANK0_PHASES_S`, projected
for the paper profile; ``NEARID_COLLECTIVE_TIMEOUT_S`` overrides it).
"""
from __future__ import annotations

import os
import sys
from datetime import timedelta
from typing import Any, Callable, NoReturn

__all__ = ["launched_state", "end_launch", "exit_entry", "collective_timeout", "RANK0_PHASES_S", "TIMEOUT_ENV"]

TIMEOUT_ENV = "NEARID_COLLECTIVE_TIMEOUT_S"
# The phases other ranks wait through inside a collective, projected upper bounds on the paper
# profile (seconds; the basis of each beside it). What rank 0 does after the last collective is not
# here: end_launch has no barrier, so it runs outside the group.
RANK0_PHASES_S: dict[str, float] = {
    # data.released: before its first barrier rank 0 deletes an earlier release's / split's output:
    # ~19,386 identities x (3 views + 3 masks + 27 distractors) = ~640k files at ~300 unlinks/s on a
    # network filesystem
    "curate: rank 0 clears a stale output folder": 640_000 / 300,
    # nearid.train: rank-0 validation every train.eval_every steps while the others wait in the next
    # step's all-reduce: the val split (100 identities x 9 sources x 3 views, MTG) from a cold store,
    # ~6,000 grids at ~100 images/s (so400m, decode-bound)
    "train: rank-0 validation between steps (cold val grids)": 6_000 / 100,
}


def collective_timeout() -> timedelta:
    """The timeout of every process group the project creates: ``$NEARID_COLLECTIVE_TIMEOUT_S``
    seconds when set, else twice the longest phase of :data:`RANK0_PHASES_S`, at least one hour."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if raw:
        try:
            sec = float(raw)
        except ValueError:
            raise ValueError(f"{TIMEOUT_ENV}={raw!r}: expected a number of seconds") from None
        if not sec > 0:
            raise ValueError(f"{TIMEOUT_ENV}={raw!r}: must be > 0 seconds")
        return timedelta(seconds=sec)
    return timedelta(seconds=max(3600.0, 2.0 * max(RANK0_PHASES_S.values())))


def launched_state():
    """accelerate's ``PartialState`` when this process belongs to a multi-process launch
    (``torchrun``, ``accelerate launch``), else ``None`` (a notebook, a plain script).

    ``cpu=True`` without CUDA: otherwise accelerate reports ``DistributedType.NO`` under torchrun on
    CPU ranks and every rank would believe it is alone."""
    import torch

    dist = torch.distributed.is_available() and torch.distributed.is_initialized()
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 and not dist:
        return None
    from accelerate import PartialState

    # the group's timeout is set where it is created (the first PartialState of the process)
    return PartialState(cpu=not torch.cuda.is_available(), timeout=collective_timeout())


def end_launch() -> bool:
    """Leave the process group, if one is initialised (destroy it in this process); no barrier, so
    a rank never waits here for another's remaining work (module docstring) -- every collective has
    completed by then. Returns whether a group was left. A no-op in a plain process, so entry points
    call it unconditionally on success (not on an error: torchrun stops the other ranks)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    dist.destroy_process_group()
    return True


def exit_entry(main: Callable[[], Any]) -> NoReturn:
    """Run an entry point's ``main()`` and exit with its return code (an int; anything else: 0).

    Inside a multi-process launch (``WORLD_SIZE`` > 1), once ``main`` has returned -- its work done
    and the process group left (:func:`end_launch`) -- the process ends with ``os._exit`` after
    flushing stdout and stderr, skipping the interpreter's teardown: destroying the C++ threads of a
    gloo / NCCL group there can still abort a rank (``terminate called without an active
    exception``, SIGABRT) now and then, which torchrun reports as a failed launch (seen once in a
    fresh-clone CI run of ``tests/test_multiprocess.py::test_judge_two_processes_equals_one``).
    Every output is written atomically before ``main`` returns, so nothing is lost. An exception
    from ``main`` propagates as usual."""
    code = main()
    code = code if isinstance(code, int) and not isinstance(code, bool) else 0
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)
