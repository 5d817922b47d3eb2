"""The GPUs a plan is made for: a catalogue of the kinds a run meets (memory as ``torch`` reports
it, HBM bandwidth and dense bf16 throughput from the vendors' data sheets), the ``--gpus`` form
``COUNTxMODEL`` / ``COUNTxMEMORY`` (``8xA100-40GB``, ``8xH100``, ``1x24GB``), and the GPUs this
process sees.

A per-item cost measured on one kind is carried to another by the resource that bounds it: a
decoding VLM reads its weights once per generated token (memory-bound: HBM bandwidth), a backbone
or a diffusion denoiser is compute-bound (bf16 TFLOP/s). A kind named only by its memory
(``1x24GB``) has no rates of its own: it is costed as an A100-40GB and the plan says so.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["GpuKind", "KINDS", "parse_gpus", "visible_gpus", "kind_of_name", "GB"]

GB = 1e9


@dataclass(frozen=True)
class GpuKind:
    """One GPU model: ``memory_bytes`` (``torch.cuda.get_device_properties().total_memory``),
    ``hbm_TBps`` and ``bf16_tflops`` (dense); ``rates_of``: the kind whose rates stand in when this
    one was named by its memory alone (``""``: its own)."""

    name: str
    memory_bytes: int
    hbm_TBps: float
    bf16_tflops: float
    rates_of: str = ""

    def scale(self, other: "GpuKind", bound: str) -> float:
        """How many times longer an item takes here than on ``other`` when ``bound`` limits it
        (``"memory"``: bandwidth; ``"compute"``: bf16 throughput; anything else: 1)."""
        if bound == "memory":
            return other.hbm_TBps / self.hbm_TBps
        if bound == "compute":
            return other.bf16_tflops / self.bf16_tflops
        return 1.0


# total_memory as torch reports it on each card (a little under the marketing figure)
KINDS: dict[str, GpuKind] = {k.name: k for k in (
    GpuKind("A100-40GB", int(42.4 * GB), 1.555, 312.0),
    GpuKind("A100-80GB", int(85.0 * GB), 2.039, 312.0),
    GpuKind("H100", int(85.0 * GB), 3.35, 989.0),
    GpuKind("H200", int(150.0 * GB), 4.8, 989.0),
    GpuKind("L40S", int(47.7 * GB), 0.864, 362.0),
)}
ALIASES = {"A100": "A100-80GB", "A100-80G": "A100-80GB", "A100-40G": "A100-40GB", "H100-80GB": "H100",
           "H100-SXM": "H100", "H200-141GB": "H200"}


def kind_of_name(name: str, memory_bytes: int | None = None) -> GpuKind:
    """The catalogue kind of a device name (``"NVIDIA A100-SXM4-40GB"``, ``"H100"``), matched on the
    model and, for the A100, the memory; an unknown name gets the A100-40GB's rates and its own memory."""
    n = name.upper()
    for key in ("H200", "H100", "L40S"):
        if key in n:
            k = KINDS[key]
            return k if memory_bytes is None else GpuKind(k.name, int(memory_bytes), k.hbm_TBps, k.bf16_tflops)
    if "A100" in n:
        big = (memory_bytes or 0) > 60 * GB or "80G" in n
        k = KINDS["A100-80GB" if big else "A100-40GB"]
        return k if memory_bytes is None else GpuKind(k.name, int(memory_bytes), k.hbm_TBps, k.bf16_tflops)
    ref = KINDS["A100-40GB"]
    return GpuKind(name, int(memory_bytes or ref.memory_bytes), ref.hbm_TBps, ref.bf16_tflops, rates_of=ref.name)


def parse_gpus(spec: str) -> list[GpuKind]:
    """``"8xA100-40GB"`` -> eight A100-40GB; ``"2x80GB"`` -> two 80 GB GPUs of unknown model (A100-40GB
    rates); several groups with ``+`` (``"4xH100+4xA100-80GB"``). Raises ValueError naming the part
    it cannot read."""
    out: list[GpuKind] = []
    for part in str(spec).replace(" ", "").split("+"):
        m = re.fullmatch(r"(\d+)[xX](.+)", part)
        if not m or int(m.group(1)) < 1:
            raise ValueError(f"--gpus {spec!r}: {part!r} is not COUNTxMODEL or COUNTxMEMORY (e.g. 8xA100-40GB, 1x24GB)")
        n, what = int(m.group(1)), m.group(2)
        key = ALIASES.get(what.upper(), what.upper())
        kind = next((k for name, k in KINDS.items() if name.upper() == key), None)
        if kind is None:
            mem = re.fullmatch(r"(\d+(?:\.\d+)?)GB?", what.upper())
            if not mem:
                raise ValueError(f"--gpus {spec!r}: unknown GPU {what!r}; known: {', '.join(KINDS)}, or a memory "
                                 f"such as 24GB")
            ref = KINDS["A100-40GB"]
            # a card sold as N GB reports a little less than N x 1e9 bytes; 0.99 keeps "80GB" at 80 GB cards' size
            kind = GpuKind(f"{mem.group(1)}GB", int(float(mem.group(1)) * GB * 0.99), ref.hbm_TBps, ref.bf16_tflops,
                           rates_of=ref.name)
        out += [kind] * n
    return out


def visible_gpus() -> list[GpuKind]:
    """The CUDA devices this process sees, as catalogue kinds with their own memory (empty without one)."""
    try:
        import torch
    except ImportError:                          # pragma: no cover - torch is a dependency
        return []
    if not torch.cuda.is_available():
        return []
    return [kind_of_name(torch.cuda.get_device_properties(i).name, torch.cuda.get_device_properties(i).total_memory)
            for i in range(torch.cuda.device_count())]
