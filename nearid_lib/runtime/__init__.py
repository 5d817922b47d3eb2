"""How this process runs its numerics: portable kernel paths, CPU threads, the allocator, and the
deterministic switch.

* **Portable numerics** (``NEARID_PORTABLE``; :func:`apply_portable`, :func:`portable_active`): the
  CPU libraries pick their code path by processor (AVX-512 or AVX2, AMX, Intel or AMD branches) and
  split reductions by thread count, so the same run gives different last bits on different machines.
  Portable numerics fix both: one code path that every x86-64 CPU with AVX2 and FMA has
  (:data:`PINNED_PATHS`) and :data:`PORTABLE_THREADS` thread per process, so any such machine
  regenerates the committed tables bit for bit. Each library reads its variable once, at its first
  use or when it loads, so they are put in the environment before numpy and torch start:
  ``nearid_lib/__init__.py`` calls :func:`apply_portable` before anything else, and
  ``scripts/run_notebook.sh`` / ``make lab`` export :func:`portable_environment` before a kernel
  starts (a notebook imports numpy before ``nearid_lib``). ``NEARID_PORTABLE=1`` on, ``0`` off
  (each library's fastest path and ``NEARID_THREADS`` threads); unset: on unless a GPU is visible
  (where the profiles compute on CUDA, whose kernels no CPU setting makes portable). Every run
  records the setting and any library that escaped it (:func:`numerics_record`, in ``run.json``).
  This module imports torch inside the functions that use it, so that importing it first sets
  nothing in motion.
* :func:`thread_count` / :func:`set_torch_threads`: torch's CPU threads (a profile's
  ``runtime.threads``; one under portable numerics) and glibc's malloc thresholds
  (:func:`nearid_lib.runtime.allocator.tune_allocator`).
* :func:`deterministic`: torch's deterministic kernels (``torch.use_deterministic_algorithms``)
  and cuBLAS's fixed workspace (``CUBLAS_WORKSPACE_CONFIG``), cuDNN's benchmark off and TF32 off:
  under it a resumed training is bit-exact on CUDA as it is on CPU, at some speed
  (``NEARID_DETERMINISTIC=1`` turns it on for every run; :func:`~nearid_lib.run.start_run` reads
  it). Used as a function (``deterministic()``) or a context manager (``with deterministic(): ...``),
  which restores the previous settings on exit.
* :func:`fold_batchnorm_enabled`: whether frozen CNN forwards run through a copy with the
  BatchNorms folded into the convolutions (:func:`nearid_lib.models.backbones.folded_copy`; the
  default where portable numerics are off). ``NEARID_FOLD_BATCHNORM=0`` runs the BatchNorms as they
  are: the same features up to float rounding, slower, and the same bits on Intel and AMD processors
  (the default under portable numerics); ``1`` folds them whatever the setting. The features' cache
  keys say which.
"""
from __future__ import annotations

import os
import platform
import sys
import warnings
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping, MutableMapping

from .allocator import tune_allocator

__all__ = ["thread_count", "set_torch_threads", "deterministic", "deterministic_requested", "fold_batchnorm_enabled",
           "PORTABLE_VAR", "PORTABLE_THREADS", "PINNED_PATHS", "THREAD_VARS", "portable_requested",
           "portable_active", "portable_environment", "apply_portable", "check_portable", "numerics_record",
           "cpu_facts", "kernel_environment", "shell_exports"]

# cuBLAS needs a fixed workspace for deterministic GEMMs on CUDA >= 10.2 (":4096:8" or ":16:8").
CUBLAS_WORKSPACE = ":4096:8"

PORTABLE_VAR = "NEARID_PORTABLE"
# one thread per process: a reduction split over threads adds in another order (the Makefile runs
# NEARID_WORKERS processes side by side instead)
PORTABLE_THREADS = 1
# The code path of each CPU library, and when it reads its variable (torch 2.13, numpy 2.4, scipy
# 1.17 here; docs/mini.md "Portable numerics"). AVX2 + FMA is the level every x86-64 CPU since 2013
# (Intel Haswell, AMD Excavator / Zen) has; the pins are set only where the CPU has it, because
# torch and OpenBLAS trust their variable (an AVX-512 path on an AVX2 CPU dies of SIGILL).
PINNED_PATHS: tuple[tuple[str, str], ...] = (
    # ATen's vectorised kernels (softmax, GELU, reductions, ...): read at the first dispatched op
    ("ATEN_CPU_CAPABILITY", "avx2"),
    # oneDNN (convolutions): a ceiling on its JIT ISA, read when its first primitive is made
    ("ONEDNN_MAX_CPU_ISA", "AVX2"),
    # MKL (torch's matrix products and im2col convolutions): conditional numerical reproducibility,
    # read at the first MKL call. COMPATIBLE (SSE2 without the approximate rcpps / rsqrtps, whose
    # results differ between Intel and AMD) is the one branch MKL documents as the same on Intel and
    # compatible CPUs; its AVX2 branch is Intel-only (measured here, on AMD: MKL_VERBOSE "CNR:AUTO").
    # STRICT: the same bits whatever the operands' memory alignment (without it MKL may take another
    # kernel for an unaligned operand, e.g. a view in a backward pass; MKL's CNR documentation)
    ("MKL_CBWR", "COMPATIBLE,STRICT"),
    # numpy's and scipy's OpenBLAS (matrix products, LAPACK): read when the library loads
    ("OPENBLAS_CORETYPE", "Haswell"),
    # numpy's own loops dispatched by CPU (exp, log, tanh, sorts, ...): read at numpy's import;
    # names it does not know are ignored, a baseline feature is an error (set by _numpy_features)
    ("NPY_DISABLE_CPU_FEATURES", ""),
)
# thread pools read when their library loads (torch's OpenMP, MKL, OpenBLAS); set_torch_threads sets
# torch's count again, and every pool's through threadpoolctl where one loaded before them
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _numpy_features() -> str:
    """numpy's dispatched CPU features above AVX2, by the names of the installed numpy (read from
    its metadata: numpy itself must not load before the variable is set). numpy >= 2.4 groups them
    as x86-64 levels (``X86_V4``); older ones name each AVX-512 set (not tried here)."""
    try:
        major, minor = (int(p) for p in metadata.version("numpy").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        major, minor = 2, 4
    if (major, minor) >= (2, 4):
        return "X86_V4 AVX512_ICL AVX512_SPR"
    return "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR"


@lru_cache(maxsize=1)
def cpu_facts() -> dict[str, Any]:
    """This machine's CPU as the pinned paths see it: architecture, model name, and the flags that
    decide the code paths (from ``/proc/cpuinfo``; empty where it cannot be read)."""
    model, flags = "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    shown = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")
    return {"machine": platform.machine(), "model": model, "flags": [f for f in shown if f in flags],
            "pinnable": platform.machine().lower() in ("x86_64", "amd64") and {"avx2", "fma"} <= flags}


def _gpu_visible(env: Mapping[str, str]) -> bool:
    """Whether a GPU is visible to this process, found without torch: an NVIDIA driver's GPU list or
    the ROCm device, unless ``CUDA_VISIBLE_DEVICES`` hides every device."""
    if env.get("CUDA_VISIBLE_DEVICES") is not None and env["CUDA_VISIBLE_DEVICES"].strip() in ("", "-1"):
        return False
    try:
        gpus = Path("/proc/driver/nvidia/gpus")
        return (gpus.is_dir() and any(gpus.iterdir())) or Path("/dev/kfd").exists()
    except OSError:
        return False


def portable_requested(env: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """``(on, why)`` from ``NEARID_PORTABLE`` (``1``/``0``; unset: on unless a GPU is visible). Read
    at each call, so a spawned worker or a notebook kernel follows the environment it started with."""
    env = os.environ if env is None else env
    value = str(env.get(PORTABLE_VAR, "")).strip()
    if value in ("0", "1"):     # exactly these: the Makefile decides its thread lines on them too
        return value == "1", f"{PORTABLE_VAR}={value}"
    if value:
        raise ValueError(f"{PORTABLE_VAR}={value!r}: expected 1 (portable numerics) or 0 (each library's "
                         f"fastest code path and NEARID_THREADS threads)")
    if _gpu_visible(env):
        return False, f"{PORTABLE_VAR} unset and a GPU is visible (the profiles compute on it)"
    return True, f"{PORTABLE_VAR} unset, no GPU visible (the default)"


def portable_active(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs portable numerics (:func:`portable_requested`)."""
    return portable_requested(env)[0]


def _wanted(env: Mapping[str, str]) -> dict[str, str]:
    """:func:`portable_environment` without its check of variables already set."""
    if not portable_active(env):
        return {}
    out = {var: str(PORTABLE_THREADS) for var in THREAD_VARS}
    if cpu_facts()["pinnable"]:
        out.update({var: value or _numpy_features() for var, value in PINNED_PATHS})
    return out


def portable_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables portable numerics set: the pinned code paths where the CPU has AVX2 and FMA
    (:func:`cpu_facts`), and one thread for every pool; ``{}`` when it is off. A code-path variable
    already set to another value is an error naming it (portable numerics would silently override a
    choice); a thread pool's is not (a cluster's default is no choice of this run)."""
    env = os.environ if env is None else env
    out = _wanted(env)
    for var, value in out.items():
        have = env.get(var)
        if have is not None and have.strip() != value and var not in THREAD_VARS:
            raise ValueError(f"{var}={have!r} is set, but portable numerics ({PORTABLE_VAR}) set it to {value!r}: "
                             f"unset {var}, or set {PORTABLE_VAR}=0 to keep it")
    return out


def apply_portable(env: MutableMapping[str, str] | None = None) -> dict[str, Any]:
    """Put :func:`portable_environment` into ``env`` (default ``os.environ``, inherited by every
    process this one starts) and write the decision back as ``NEARID_PORTABLE=1``/``0``, so that
    its workers never decide otherwise. A library loaded before this ran read its variable too
    early: :func:`check_portable` tells whether that mattered. Returns ``{"on", "why", "set"}``;
    idempotent."""
    target = os.environ if env is None else env
    on, why = portable_requested(target)
    wanted = portable_environment(target)
    target.update(wanted)
    target[PORTABLE_VAR] = "1" if on else "0"
    return {"on": on, "why": why, "set": wanted}


def kernel_environment() -> dict[str, str]:
    """The variables a notebook kernel must start with: :func:`portable_environment` and the decision
    (``NEARID_PORTABLE``). A notebook imports numpy before ``nearid_lib``, so whatever starts the
    kernel sets them first (``scripts/execute_notebook.py``; ``make lab`` through :func:`shell_exports`)."""
    return {**portable_environment(), PORTABLE_VAR: "1" if portable_active() else "0"}


def shell_exports() -> str:
    """``export VAR='value'`` lines of :func:`kernel_environment`, for a shell that starts a kernel."""
    return "\n".join(f"export {var}='{value}'" for var, value in kernel_environment().items())


def _openblas_pools() -> list[dict[str, Any]]:
    """The OpenBLAS libraries loaded in this process (threadpoolctl), with their core type and threads."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:         # pragma: no cover - scikit-learn brings it
        return []
    return [{"lib": Path(i["filepath"]).name, "architecture": i.get("architecture"), "threads": i["num_threads"]}
            for i in threadpool_info() if i.get("internal_api") == "openblas"]


def check_portable() -> list[str]:
    """Where this process escaped portable numerics, one line each (``[]`` when it is off, or
    every loaded library runs its pinned path): torch's dispatched capability, numpy's dispatched
    AVX-512 loops, OpenBLAS's core type, the variables the libraries not loaded yet will read."""
    if not portable_active():
        return []
    want = _wanted(os.environ)
    out = [f"{var} is not {value!r} (got {os.environ.get(var)!r}): the libraries that read it use their own path"
           for var, value in want.items() if os.environ.get(var) != value]
    if "torch" in sys.modules and sys.modules["torch"].get_num_threads() != PORTABLE_THREADS:
        out.append(f"torch runs {sys.modules['torch'].get_num_threads()} threads (asked for by name; "
                   f"set {PORTABLE_VAR}=0 for that)")
    if "ATEN_CPU_CAPABILITY" not in want:
        return out
    hint = "start the process with them set (`make lab`), or import nearid_lib before numpy and torch"
    if "torch" in sys.modules:
        cap = sys.modules["torch"].backends.cpu.get_cpu_capability()
        if cap.lower() != want["ATEN_CPU_CAPABILITY"]:
            out.append(f"torch dispatches {cap} kernels (an op ran before ATEN_CPU_CAPABILITY was set: {hint})")
    if "numpy" in sys.modules:
        from numpy._core._multiarray_umath import __cpu_features__ as feats

        extra = [f for f in want["NPY_DISABLE_CPU_FEATURES"].split() if feats.get(f)]
        if extra:
            out.append(f"numpy dispatches {', '.join(extra)} loops (numpy was imported before "
                       f"NPY_DISABLE_CPU_FEATURES was set: {hint})")
    for pool in _openblas_pools():
        if pool["architecture"] and pool["architecture"] != want["OPENBLAS_CORETYPE"]:
            out.append(f"{pool['lib']} runs {pool['architecture']} kernels (it loaded before OPENBLAS_CORETYPE "
                       f"was set: {hint})")
    return out


def numerics_record() -> dict[str, Any]:
    """What ``run.json`` says about this process's numerics: the setting and why, the variables of
    :data:`PINNED_PATHS` / :data:`THREAD_VARS` as they are, torch's threads and capability, the
    OpenBLAS pools, the CPU, and every escape :func:`check_portable` finds."""
    on, why = portable_requested()
    names = [v for v, _ in PINNED_PATHS] + list(THREAD_VARS)
    rec: dict[str, Any] = {"setting": "portable" if on else "native", "why": why,
                           "env": {v: os.environ.get(v) for v in names}, "cpu": cpu_facts()}
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        rec["torch"] = {"threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    rec["openblas"] = _openblas_pools()
    rec["escapes"] = check_portable()
    return rec


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
    thresholds for large tensors (:func:`nearid_lib.runtime.allocator.tune_allocator`); returns the count.

    Under portable numerics ``n`` None means :data:`PORTABLE_THREADS` (the profile's count is that
    already: :func:`nearid_lib.config.runtime_env`), every OpenBLAS and OpenMP pool loaded is limited
    to it too (one loaded before the variables were set included), and
    each escape :func:`check_portable` finds (another count asked for by name among them) is a
    warning; ``run.json`` records them."""
    import torch

    tune_allocator(tune_malloc)
    portable = portable_active()
    n = thread_count(PORTABLE_THREADS if portable and n is None else n)
    if portable:
        try:
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=PORTABLE_THREADS)     # OpenBLAS, and scikit-learn's OpenMP
        except ImportError:     # pragma: no cover - scikit-learn brings it
            pass
    torch.set_num_threads(n)    # after the pools: torch's own OpenMP runtime is one of them
    if portable:
        for escape in check_portable():
            warnings.warn(f"portable numerics: {escape}; results may differ from the committed ones in the "
                          f"last bits", RuntimeWarning, stacklevel=2)
    return n


def deterministic_requested() -> bool:
    """Whether ``NEARID_DETERMINISTIC`` asks every run for :func:`deterministic` (``1``/``true``)."""
    return os.environ.get("NEARID_DETERMINISTIC", "").strip().lower() in _ON


def fold_batchnorm_enabled() -> bool:
    """Whether frozen CNN forwards fold their BatchNorms (``NEARID_FOLD_BATCHNORM``: ``1`` on, ``0``
    off; unset: off under portable numerics, on otherwise). Read from the environment at each call,
    so spawned workers and notebook kernels started under it follow it too.

    Portable numerics leave the BatchNorms unfolded: the folded copy runs channels-last, whose
    oneDNN kernels gave other bits on an Intel Xeon than on an AMD EPYC under the same ISA pins,
    while the unfolded network's forward (NCHW, oneDNN) gave the same bits on both
    (``../shared/cpu-probe``, ``tests/test_cpu_probe.py``)."""
    v = os.environ.get("NEARID_FOLD_BATCHNORM", "").strip().lower()
    if not v:
        return not portable_active()
    return v not in _OFF


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
        import torch

        self._saved = (torch.are_deterministic_algorithms_enabled(), os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
                       torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
                       torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        self._apply(self.enabled)

    @staticmethod
    def _apply(on: bool) -> None:
        import torch

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
        import torch

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

