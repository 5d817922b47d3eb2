"""Multi-process launches (``torchrun``, ``accelerate launch``): join one, and leave it cleanly.

Shared by the NearID trainer, the VLM judge, the generation runner and the paper profile's GPU
steps (curation, token-store prefill, judge). :func:`launched_state` is
accelerate's ``PartialState`` when this process is one rank of a launch, else ``None``.
:func:`end_launch` is called by every entry point once its work is done: all ranks meet at a barrier
and the process group is destroyed. Without it the interpreter tears down the gloo / NCCL threads at exit,
and a rank can abort (``terminate called without an active exception``, SIGABRT) after its work is
done, which torchrun reports as a failed run.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable, NoReturn

__all__ = ["launched_state", "end_launch", "exit_entry"]


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

    return PartialState(cpu=not torch.cuda.is_available())


def end_launch() -> bool:
    """Barrier, then destroy the default process group, if one is initialised. Returns whether one was.
    A no-op in a plain process, so entry points call it unconditionally on success (not on an error:
    the other ranks may never reach the barrier; torchrun stops them)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    try:
        dist.barrier()
    finally:
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
