"""How this process runs torch: CPU threads, the allocator, and the deterministic switch.

* :func:`thread_count` / :func:`set_torch_threads`: torch's CPU threads (a profile's
  ``runtime.threads``; ``NEARID_THREADS`` sets it) and glibc's malloc thresholds
  (:func:`nearid_lib.allocator.tune_allocator`). One fixed count keeps float summation order,
  hence the last bits of a trained head, the same on every machine.
* :func:`deterministic`: torch's deterministic kernels (``torch.use_deterministic_algorithms``)
  and cuBLAS's fixed workspace (``CUBLAS_WORKSPACE_CONFIG``), cuDNN's benchmark off and TF32 off:
  under it a resumed training is bit-exact on CUDA as it is on CPU, at some speed
  (``NEARID_DETERMINISTIC=1`` turns it on for every run; :func:`~nearid_lib.run.start_run` reads
  it). Used as a function (``deterministic()``) or a context manager (``with deterministic(): ...``),
  which restores the previous settings on exit.
* :func:`fold_batchnorm_enabled`: whether frozen CNN forwards run through a copy with the
  BatchNorms folded into the convolutions (:func:`nearid_lib.models.backbones.folded_copy`; the
  default). ``NEARID_FOLD_BATCHNORM=0`` runs the BatchNorms as they are: the same features up to
  float rounding, slower. It exists to regenerate a run that differs from another only in float
  rounding (docs/mini.md, "Verdicts under float rounding"); the features' cache keys say which.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from .allocator import tune_allocator

__all__ = ["thread_count", "set_torch_threads", "deterministic", "deterministic_requested", "fold_batchnorm_enabled"]

# cuBLAS needs a fixed workspace for deterministic GEMMs on CUDA >= 10.2 (":4096:8" or ":16:8").
CUBLAS_WORKSPACE = ":4096:8"


def thread_count(threads: int | None = None) -> int:
    """CPU threads for torch: ``threads`` (a profile's ``runtime.threads``), else every core this
    process may run on."""
    if threads is not None:
        return int(threads)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def set_torch_threads(n: int | None = None, tune_malloc: bool = True) -> int:
    """``torch.set_num_threads`` to :func:`thread_count` of ``n`` (a profile's ``runtime.threads``;
    None: every core) and, with ``tune_malloc`` (a profile's ``runtime.tune_malloc``), glibc's malloc
    thresholds for large tensors (:func:`nearid_lib.allocator.tune_allocator`); returns the count."""
    tune_allocator(tune_malloc)
    n = thread_count(n)
    torch.set_num_threads(n)
    return n


def deterministic_requested() -> bool:
    """Whether ``NEARID_DETERMINISTIC`` asks every run for :func:`deterministic` (``1``/``true``)."""
    return os.environ.get("NEARID_DETERMINISTIC", "").strip().lower() in ("1", "true", "yes", "on")


def fold_batchnorm_enabled() -> bool:
    """Whether frozen CNN forwards fold their BatchNorms (``NEARID_FOLD_BATCHNORM``: on unless
    ``0``/``false``/``no``/``off``). Read from the environment at each call, so spawned workers and
    notebook kernels started under it follow it too."""
    return os.environ.get("NEARID_FOLD_BATCHNORM", "1").strip().lower() not in ("0", "false", "no", "off")


@dataclass
class deterministic:  # noqa: N801 - a switch used as a call and as a context manager
    """Turn torch's deterministic mode on (``enabled=True``) or off; the previous state comes back
    when it is used as a context manager.

    On: ``torch.use_deterministic_algorithms(True)`` (an op without a deterministic kernel raises,
    naming itself, instead of silently varying), ``CUBLAS_WORKSPACE_CONFIG`` set when unset (it must
    be set before the first cuBLAS call; a process that already ran one keeps its workspace),
    ``cudnn.deterministic`` on, ``cudnn.benchmark`` off, TF32 matmuls and convolutions off."""

    enabled: bool = True

    def __post_init__(self):
        self._saved = (torch.are_deterministic_algorithms_enabled(), os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
                       torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
                       torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        self._apply(self.enabled)

    @staticmethod
    def _apply(on: bool) -> None:
        if on:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
        torch.use_deterministic_algorithms(on)
        torch.backends.cudnn.deterministic = on
        torch.backends.cudnn.benchmark = False if on else torch.backends.cudnn.benchmark
        if on:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False

    def __enter__(self) -> "deterministic":
        return self

    def __exit__(self, *exc) -> None:
        algos, cublas, cudnn_det, bench, tf32_mm, tf32_conv = self._saved
        torch.use_deterministic_algorithms(algos)
        if cublas is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = cublas
        torch.backends.cudnn.deterministic = cudnn_det
        torch.backends.cudnn.benchmark = bench
        torch.backends.cuda.matmul.allow_tf32 = tf32_mm
        torch.backends.cudnn.allow_tf32 = tf32_conv
