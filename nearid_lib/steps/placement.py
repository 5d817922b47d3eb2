"""Where a large model goes, decided before a byte of its weights is read: its size (the
``*.safetensors`` files of its mirror folder by ``stat``, else :data:`MODEL_PARAMS` x bytes per
parameter), the working set a step declares beside it (activations, KV cache, optimiser state,
CUDA context), and a replica plan over the GPUs: one replica per GPU when one holds it, else one
replica over as many consecutive GPUs as it needs (``device_map="auto"`` with a ``max_memory`` per
replica, as the NearID authors load their judge), else refused with the numbers that say why.

Every large model of a step loads through this rule (the judge at each scale, ID-Sim's MLLM, the
diffusion pipelines, DreamBooth), one model after another, never two at once: :func:`plan_replicas`
is a pure function of sizes, so ``nearid plan``, the preflight and the step itself print the same
placement.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .gpus import visible_gpus

__all__ = ["MODEL_PARAMS", "ModelSize", "ReplicaPlan", "model_size", "model_bytes", "plan_replicas",
           "placement_plan", "replica_of", "device_kwargs", "CUDA_CONTEXT_BYTES"]

GB = 1e9
# memory every process holds on a GPU before any tensor (CUDA context, cuBLAS workspace, allocator slack)
CUDA_CONTEXT_BYTES = 2 * 2**30

# Parameters of the large models the paper path loads (model cards; the weights' bytes in the mirror
# win when present), and the bytes per parameter they load at. The judge scales: NearID Table 7.
MODEL_PARAMS: dict[str, tuple[float, int, str]] = {
    "Qwen/Qwen3-VL-4B-Instruct": (4.44e9, 2, "model card, bf16"),
    "Qwen/Qwen3-VL-8B-Instruct": (8.77e9, 2, "model card, bf16"),
    "Qwen/Qwen3-VL-30B-A3B-Instruct": (31.07e9, 2, "model card, bf16 (all 128 experts resident)"),
    "google/siglip2-so400m-patch14-384": (0.43e9, 2, "vision tower only, fp16"),
    "CIDAS/clipseg-rd64-refined": (0.15e9, 4, "model card, fp32"),
    "facebook/dinov3-vitl16-pretrain-lvd1689m": (0.30e9, 4, "ViT-L/16, fp32"),
    "facebook/dinov2-base": (0.086e9, 4, "ViT-B/14, fp32"),
    "openai/clip-vit-base-patch32": (0.15e9, 4, "fp32"),
    "imageomics/bioclip-2": (0.43e9, 4, "ViT-L/14 CLIP, fp32"),
    "conservationxlabs/miewid-msv2": (0.051e9, 4, "EfficientNetV2-M, fp32"),
    "Carve/tracer_b7": (0.067e9, 4, "TRACER-B7, fp32 (carvekit)"),
    "Carve/fba": (0.035e9, 4, "FBA matting, fp32 (carvekit)"),
    # pipelines: every component a step keeps on the GPU (transformer/unet, text encoders, VAE)
    "black-forest-labs/FLUX.1-Kontext-dev": (16.9e9, 2, "12B transformer + T5-XXL 4.8B + CLIP-L + VAE, bf16"),
    "black-forest-labs/FLUX.1-Fill-dev": (16.9e9, 2, "12B transformer + T5-XXL 4.8B + CLIP-L + VAE, bf16"),
    "stabilityai/stable-diffusion-xl-base-1.0": (3.5e9, 2, "UNet 2.6B + two text encoders + VAE, fp16"),
    "h94/IP-Adapter": (1.9e9, 2, "ViT-bigG image encoder + adapter, fp16"),
    "stabilityai/stable-diffusion-3-medium-diffusers": (7.7e9, 2, "MMDiT 2B + T5-XXL 4.8B + two CLIP + VAE, bf16"),
}


@dataclass(frozen=True)
class ModelSize:
    """``bytes`` of a model's weights as loaded and where that figure comes from (``basis``)."""

    repo: str
    bytes: int
    basis: str


def model_size(repo: str, mirror: str | os.PathLike | None = None) -> ModelSize | None:
    """The size of ``repo``'s weights: its ``*.safetensors`` files in ``mirror/<repo>`` (or ``repo`` as a
    local folder), read by ``stat``, scaled to the bytes per parameter it loads at; else
    :data:`MODEL_PARAMS`; None when neither knows it."""
    declared = MODEL_PARAMS.get(repo)
    for folder in (Path(repo).expanduser(), Path(mirror) / repo if mirror else None):
        if folder is not None and folder.is_dir():
            n = sum(p.stat().st_size for p in folder.rglob("*.safetensors"))
            if n:
                return ModelSize(repo, int(n), f"its safetensors in {folder} ({n / GB:.3g} GB on disk)")
    if declared is None:
        return None
    params, per, basis = declared
    return ModelSize(repo, int(params * per), f"{params / 1e9:.3g}B parameters x {per} bytes ({basis})")


def model_bytes(repo: str, mirror: str | os.PathLike | None = None) -> int | None:
    """Bytes of ``repo``'s weights (:func:`model_size`), None when unknown."""
    s = model_size(repo, mirror)
    return None if s is None else s.bytes


@dataclass(frozen=True)
class ReplicaPlan:
    """Where a model's replicas run: ``replicas`` = one tuple of GPU indices per replica (its first
    GPU's process drives it), ``idle`` = GPUs in no replica; ``need_bytes`` = what one replica needs
    (weights + working set + CUDA context). ``fits`` is False when no group of GPUs holds it."""

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

    def per_gpu_bytes(self) -> int:
        """What each GPU of a replica holds (the need shared evenly over the replica's GPUs)."""
        k = self.gpus_per_replica
        return self.need_bytes // k if k else self.need_bytes

    def placement(self) -> str:
        """``"8 x 1 GPU"``, ``"4 x 2 GPUs (device_map)"``, ``"CPU"`` or ``"does not fit"``."""
        if not self.gpu_bytes:
            return "CPU"
        if not self.replicas:
            return "does not fit"
        k = self.gpus_per_replica
        return f"{len(self.replicas)} x {k} GPU" + ("s (device_map)" if k > 1 else "")

    def describe(self) -> str:
        """One line for a person (the plan, the preflight, a step's log)."""
        if not self.gpu_bytes:
            return f"no GPU visible: one process on the CPU ({self.model_bytes / GB:.3g} GB of weights)"
        if not self.replicas:
            return (f"{self.model_bytes / GB:.3g} GB of weights need {self.need_bytes / GB:.3g} GB per replica; "
                    f"all {len(self.gpu_bytes)} GPUs together hold {sum(self.gpu_bytes) / GB:.3g} GB: it does not fit")
        return (f"{len(self.replicas)} replica(s) of {self.gpus_per_replica} GPU(s) "
                f"({self.model_bytes / GB:.3g} GB of weights, {self.need_bytes / GB:.3g} GB needed per replica): "
                + "; ".join("GPUs " + ",".join(map(str, r)) for r in self.replicas)
                + (f"; idle GPUs {','.join(map(str, self.idle))}" if self.idle else ""))


def plan_replicas(model_bytes: int, gpu_bytes: Sequence[int], working_bytes: int | None = None,
                  splittable: bool = True) -> ReplicaPlan:
    """Lay replicas of a ``model_bytes`` model over GPUs of ``gpu_bytes`` each (index order).

    A replica needs ``model_bytes + working_bytes +`` :data:`CUDA_CONTEXT_BYTES` (``working_bytes``
    defaults to 15% of the weights plus 2 GiB: a VLM's vision tower and KV cache for a batch of a few
    pairs). Consecutive GPUs are gathered until their memory holds that (only when ``splittable``:
    a model ``device_map`` can spread; a training step cannot), then the next replica starts; GPUs
    left at the end are idle. A pure function: the same inputs give the same plan."""
    if model_bytes <= 0:
        raise ValueError(f"plan_replicas: model_bytes must be positive, got {model_bytes}")
    gpus = tuple(int(b) for b in gpu_bytes)
    if any(b <= 0 for b in gpus):
        raise ValueError(f"plan_replicas: every GPU's memory must be positive, got {gpus}")
    work = int(0.15 * model_bytes) + 2 * 2**30 if working_bytes is None else int(working_bytes)
    need = int(model_bytes) + work + CUDA_CONTEXT_BYTES
    replicas: list[tuple[int, ...]] = []
    cur: list[int] = []
    have = 0
    for i, b in enumerate(gpus):
        cur.append(i)
        # every GPU of a spread replica carries its own context too
        have += b - (CUDA_CONTEXT_BYTES if len(cur) > 1 else 0)
        if have >= need:
            replicas.append(tuple(cur))
            cur, have = [], 0
        elif not splittable:
            cur, have = [], 0
    idle = tuple(i for i in range(len(gpus)) if not any(i in r for r in replicas))
    return ReplicaPlan(int(model_bytes), gpus, need, tuple(replicas), idle)


def placement_plan(repo: str, mirror: str | os.PathLike | None, gpu_bytes: Sequence[int] | None = None
                   ) -> ReplicaPlan | None:
    """The replica plan of ``repo`` (sized by :func:`model_bytes` from ``mirror``) over ``gpu_bytes``
    (default: the memory of every visible GPU) with the default working set; None when its size is
    unknown (a user's folder without safetensors: it is then loaded on one device)."""
    mb = model_bytes(repo, mirror)
    if mb is None:
        return None
    gpus = [g.memory_bytes for g in visible_gpus()] if gpu_bytes is None else list(gpu_bytes)
    return plan_replicas(mb, gpus)


def replica_of(plan: ReplicaPlan, rank: int) -> tuple[int, ...] | None:
    """The GPUs of the replica whose driving process is ``rank`` (its first GPU), else None
    (a rank inside another replica, or idle)."""
    return next((r for r in plan.replicas if r[0] == rank), None)


def device_kwargs(plan: ReplicaPlan, rank: int) -> dict | None:
    """``from_pretrained`` placement of rank ``rank``'s replica: ``device_map="auto"`` over its GPUs
    (``max_memory``: each GPU's memory less its share of the working set and context, every other
    GPU 0), or None when the rank drives nothing."""
    rep = replica_of(plan, rank)
    if rep is None:
        return None
    share = (plan.need_bytes - plan.model_bytes) // len(rep)
    mm: dict = {i: (max(1, plan.gpu_bytes[i] - share) if i in rep else 0) for i in range(len(plan.gpu_bytes))}
    mm["cpu"] = 0
    return {"device_map": "auto", "max_memory": mm}
