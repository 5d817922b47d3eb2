"""What the VLM judge needs before it runs, decided without loading it: whether it can run at all (a
declared gate: :func:`judge_gate`), how its replicas are laid over the GPUs (:func:`judge_plan`, a pure
function of the model's size and the GPUs' memories, which the preflight prints and a test checks),
and what it costs per 1,000 pairs (:data:`COST_PER_1000_PAIRS`, projected until measured).

The authors load Qwen3-VL with ``device_map="auto"`` (their ``evaluation/sim_test.py``): one copy
of the model spread over every visible GPU. Under a launch of one process per GPU we place one
*replica* per group of GPUs that holds the model: a bf16 Qwen3-VL-30B-A3B (~62 GB of weights) fits
one 80 GB H100 (8 replicas on an 8-GPU node) but needs two 40 GB A100s (4 replicas, the first rank
of each pair judging with ``device_map="auto"`` over the pair's ``max_memory``, the other idle).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..paths import downloads_dir

__all__ = ["JUDGE_MODELS", "SCALE_LABELS", "JudgePlan", "judge_plan", "model_bytes", "judge_gate",
           "replica_of", "device_kwargs", "COST_PER_1000_PAIRS", "scale_label", "prompt_path", "DOWNLOADS_TOKEN"]

# NearID App. E.7 / Table 7: the Qwen3-VL judge at three scales; parameters from the model cards
# (bf16 weights: 2 bytes per parameter); the mirror's safetensors sizes win when present
JUDGE_MODELS: dict[str, float] = {
    "Qwen/Qwen3-VL-4B-Instruct": 4.44e9,
    "Qwen/Qwen3-VL-8B-Instruct": 8.77e9,
    "Qwen/Qwen3-VL-30B-A3B-Instruct": 31.07e9,
}
SCALE_LABELS = {"Qwen/Qwen3-VL-4B-Instruct": "4B", "Qwen/Qwen3-VL-8B-Instruct": "8B",
                "Qwen/Qwen3-VL-30B-A3B-Instruct": "30B"}

# Projected GPU-seconds per 1,000 judged pairs on one H100 (bf16, batch of 4 pairs), to be replaced
# by `make judge`'s printed seconds_per_1000_pairs once measured. Basis: a pair is ~560 prompt tokens
# (two 512 px images at Qwen3-VL's 32 px per visual token, 2 x 256, and ~50 template tokens) and ~250
# generated ones (the authors' JSON answer); decoding is memory-bound, each step of a batch reading
# the weights it uses once at ~2.5 TB/s effective (4B: 8.9 GB, 8B: 17.5 GB, 30B-A3B: ~3 GB of
# attention and router plus the ~32 of 128 experts per layer that 4 rows x 8 active experts touch,
# ~17.5 GB), and the prefill costs 2 x active parameters x tokens at ~400 TFLOP/s. A lower bound:
# transformers' eager MoE loops over experts, and 1,024 px sources have ~3x the visual tokens.
# NearID-bench asks one judge ~31,000 pairs (500 test identities x (3 positive + 27 distractor
# pairs) x full and FG-only, + 1,000 MTG pairs).
COST_PER_1000_PAIRS: dict[str, dict[str, float | str]] = {
    "Qwen/Qwen3-VL-4B-Instruct": {"gpu_seconds": 250.0, "basis": "projected: 250 steps x 8.9 GB / 2.5 TB/s "
                                  "per batch of 4 (222 s) + prefill (25 s)"},
    "Qwen/Qwen3-VL-8B-Instruct": {"gpu_seconds": 490.0, "basis": "projected: 250 steps x 17.5 GB / 2.5 TB/s "
                                  "per batch of 4 (440 s) + prefill (50 s)"},
    "Qwen/Qwen3-VL-30B-A3B-Instruct": {"gpu_seconds": 450.0, "basis": "projected: 250 steps x ~17.5 GB of "
                                       "attention + touched experts / 2.5 TB/s per batch of 4 (440 s) + prefill (10 s)"},
}


def scale_label(model: str) -> str:
    """``"4B"`` / ``"8B"`` / ``"30B"`` for the paper's judges, else the model's folder name."""
    return SCALE_LABELS.get(model, str(model).rstrip("/").split("/")[-1])


def model_bytes(model: str, mirror: str | os.PathLike | None = None, bytes_per_param: int = 2) -> int | None:
    """Bytes of the judge's weights: the safetensors files of its folder (a local path, or
    ``mirror/<model>``) when present, else :data:`JUDGE_MODELS` x ``bytes_per_param``; None when
    neither is known."""
    for folder in (Path(model).expanduser(), Path(mirror) / model if mirror else None):
        if folder is not None and folder.is_dir():
            n = sum(p.stat().st_size for p in folder.rglob("*.safetensors"))
            if n:
                return int(n)
    params = JUDGE_MODELS.get(model)
    return int(params * bytes_per_param) if params else None


@dataclass(frozen=True)
class JudgePlan:
    """Where the judge's replicas run: ``replicas`` = one tuple of GPU indices per replica (its
    first GPU's rank judges), ``idle`` = GPUs in no replica, ``fits`` False when no group of GPUs
    holds the model (``replicas`` empty), ``need_bytes`` the memory one replica needs."""

    model_bytes: int
    gpu_bytes: tuple[int, ...]
    need_bytes: int
    replicas: tuple[tuple[int, ...], ...]
    idle: tuple[int, ...]

    @property
    def fits(self) -> bool:
        return bool(self.replicas) or not self.gpu_bytes

    @property
    def gpus_per_replica(self) -> int:
        return max((len(r) for r in self.replicas), default=0)

    def describe(self) -> str:
        """One line for a person (the preflight, the judge step)."""
        gb = 1e9
        if not self.gpu_bytes:
            return f"judge: no GPU visible; one process on the CPU ({self.model_bytes / gb:.3g} GB of weights)"
        if not self.replicas:
            return (f"judge: {self.model_bytes / gb:.3g} GB of weights need {self.need_bytes / gb:.3g} GB per replica; "
                    f"all {len(self.gpu_bytes)} GPUs together hold {sum(self.gpu_bytes) / gb:.3g} GB: it does not fit")
        return (f"judge: {len(self.replicas)} replica(s) of {self.gpus_per_replica} GPU(s) "
                f"({self.model_bytes / gb:.3g} GB of weights, {self.need_bytes / gb:.3g} GB needed per replica): "
                + "; ".join("GPUs " + ",".join(map(str, r)) for r in self.replicas)
                + (f"; idle GPUs {','.join(map(str, self.idle))}" if self.idle else ""))


def judge_plan(model_bytes: int, gpu_bytes: Sequence[int], headroom: float = 0.15,
               reserve_bytes: int = 4 * 2**30) -> JudgePlan:
    """Lay replicas of a ``model_bytes`` judge over GPUs of ``gpu_bytes`` each (index order).

    A replica needs ``model_bytes * (1 + headroom) + reserve_bytes`` (weights, the vision tower's
    and the KV cache's activations for a batch of a few pairs, CUDA context): consecutive GPUs are
    gathered until their memory holds that, then the next replica starts; GPUs left over at the
    end (too few to hold one) are idle. A pure function: the same inputs give the same plan."""
    if model_bytes <= 0:
        raise ValueError(f"judge_plan: model_bytes must be positive, got {model_bytes}")
    gpus = tuple(int(b) for b in gpu_bytes)
    if any(b <= 0 for b in gpus):
        raise ValueError(f"judge_plan: every GPU's memory must be positive, got {gpus}")
    need = int(model_bytes * (1.0 + headroom)) + int(reserve_bytes)
    replicas: list[tuple[int, ...]] = []
    cur: list[int] = []
    have = 0
    for i, b in enumerate(gpus):
        cur.append(i)
        have += b
        if have >= need:
            replicas.append(tuple(cur))
            cur, have = [], 0
    return JudgePlan(int(model_bytes), gpus, need, tuple(replicas), tuple(cur))


def replica_of(plan: JudgePlan, rank: int) -> tuple[int, ...] | None:
    """The GPUs of the replica whose judging process is ``rank`` (its first GPU), else None
    (a rank inside another replica, or idle)."""
    return next((r for r in plan.replicas if r[0] == rank), None)


def device_kwargs(plan: JudgePlan, rank: int) -> dict | None:
    """``from_pretrained`` placement of rank ``rank``'s replica: ``device_map="auto"`` over its GPUs
    (``max_memory``: each GPU's memory less the plan's per-GPU share of the reserve, every other GPU
    0), or None when the rank judges nothing."""
    rep = replica_of(plan, rank)
    if rep is None:
        return None
    share = (plan.need_bytes - plan.model_bytes) // len(rep)
    mm: dict = {i: (max(1, plan.gpu_bytes[i] - share) if i in rep else 0) for i in range(len(plan.gpu_bytes))}
    mm["cpu"] = 0
    return {"device_map": "auto", "max_memory": mm}


# ``{downloads}`` in ``judge.prompt_file`` stands for the hand-downloads folder ($NEARID_DOWNLOADS), so
# the paper profile can name the authors' template of their GitHub release without a machine's path
DOWNLOADS_TOKEN = "{downloads}"


def prompt_path(value: str | os.PathLike | None) -> Path | None:
    """The file ``judge.prompt_file`` names (``{downloads}`` replaced by :func:`~nearid_lib.paths.downloads_dir`,
    ``~`` expanded), None when no template is configured."""
    if value is None or not str(value).strip():
        return None
    return Path(str(value).replace(DOWNLOADS_TOKEN, str(downloads_dir()))).expanduser()


def judge_gate(model: str | None, prompt_file: str | None, available) -> str | None:
    """Why the judge ``model`` cannot run now (None: it can): no judge configured
    (``eval.vlm_judge`` none), its weights not readable (``available(model) -> bool``, e.g.
    :func:`nearid_lib.hub.is_available`), or its configured template file missing or empty. The
    caller skips the judge's rows and says this reason in the tables and the report."""
    if not model or str(model).strip().lower() in ("none", "null"):
        return "no VLM judge configured (eval.vlm_judge=none)"
    if model != "tiny" and not available(model):
        return (f"the judge's weights {model} are not in the local hub mirror (python -m nearid_lib.hub download "
                f"$NEARID_HUB_DIR --only {model})")
    if prompt_file:
        p = prompt_path(prompt_file)
        if not p.is_file() or not p.read_text(encoding="utf-8", errors="replace").strip():
            return (f"the judge template judge.prompt_file={p} is missing or empty (the authors' "
                    f"evaluation/vl_template_v2.txt of their GitHub release, $NEARID_DOWNLOADS/NearID)")
    return None
