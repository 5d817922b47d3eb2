"""The released ID-Sim's LoRA adapter (``adapter_config.json`` + ``adapter_model.safetensors``) in
Meta's native DINOv3 / DINOv2 key space, merged into a ``transformers`` ``DINOv3ViTModel`` or
``Dinov2Model``: per block, the fused ``[3D, D]`` qkv is rebuilt from the three projections
(``q_proj`` / ``k_proj`` / ``v_proj``; a 4.x ``Dinov2Model``'s ``attention.attention.query`` / ``key``
/ ``value``), ``scale * B @ A`` is added (``lora_alpha / r``, or ``/ sqrt(r)`` with rsLoRA) and the
result split back; ``attn.proj`` / ``mlp.fc1`` / ``mlp.fc2`` deltas go to ``o_proj`` and to
``up_proj`` / ``down_proj`` (DINOv3) or ``fc1`` / ``fc2`` (DINOv2). Every
adapter tensor must be consumed; a setting the merge cannot honour is refused by name. The model
around it is :mod:`nearid_lib.idsim.release_model`."""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

__all__ = ["ReleaseFormatError", "AdapterConfig", "read_adapter", "merge_adapter", "encoder_layers", "Delta"]

# Meta module (inside a block) -> the transformers Linear(s) it became: the first candidate the
# layer has (DINOv3 and transformers 5.x DINOv2: q/k/v/o_proj; DINOv3 up/down_proj, DINOv2 fc1/fc2;
# transformers 4.x DINOv2: attention.attention.query ..., attention.output.dense). qkv is fused in Meta's code.
_META_TO_HF = {"attn.qkv": (("attention.q_proj", "attention.k_proj", "attention.v_proj"),
                            ("attention.attention.query", "attention.attention.key", "attention.attention.value")),
               "attn.proj": (("attention.o_proj",), ("attention.output.dense",)),
               "mlp.fc1": (("mlp.up_proj",), ("mlp.fc1",)), "mlp.fc2": (("mlp.down_proj",), ("mlp.fc2",))}


def _has(layer: nn.Module, name: str) -> bool:
    try:
        return isinstance(layer.get_submodule(name), nn.Linear)
    except AttributeError:
        return False


def _module_map(layer: nn.Module) -> dict[str, tuple[str, ...]]:
    """The transformers names of one block's Meta modules (the first candidate it has; an empty
    tuple when none: the merge then refuses the key by name)."""
    return {m: next((c for c in cands if all(_has(layer, n) for n in c)), ()) for m, cands in _META_TO_HF.items()}


# base_model.model (PEFT's wrapper) . extractor.model (id_sim's ViTExtractor -> Meta's ViT) . blocks.N.<module>
# .lora_{A,B} [.<adapter name>] .weight; PEFT drops the adapter name when saving, older files may keep it
_KEY = re.compile(r"^(?:base_model\.model\.)?extractor\.model\.blocks\.(?P<block>\d+)\."
                  r"(?P<module>attn\.qkv|attn\.proj|mlp\.fc1|mlp\.fc2)\.lora_(?P<ab>[AB])"
                  r"(?:\.[A-Za-z0-9_\-]+)?\.weight$")
# adapter_config.json settings that change what the saved tensors mean: refused when set
_REFUSED = {"use_dora": "DoRA (a magnitude vector besides B @ A)",
            "fan_in_fan_out": "transposed LoRA weights (Conv1D layers)",
            "lora_bias": "a bias on lora_B",
            "modules_to_save": "fully trained copies of base modules",
            "rank_pattern": "per-module ranks",
            "alpha_pattern": "per-module alphas",
            "layer_replication": "replicated layers",
            "target_parameters": "LoRA on raw parameters",
            "trainable_token_indices": "trained token embeddings",
            "use_qalora": "quantisation-aware LoRA (pooled inputs)",
            "alora_invocation_tokens": "activated LoRA (applied after invocation tokens only)",
            "use_bdlora": "block-diagonal LoRA",
            "loftq_config": "LoftQ (a quantised, modified base)",
            "megatron_config": "Megatron parallel layers",
            "arrow_config": "Arrow routing over several adapters",
            "kasa_config": "KaSA (a modified base)",
            "velora_config": "VeLoRA",
            "monteclora_config": "MonteCLoRA"}
# initialisations after which B @ A is the whole change of the base (others, e.g. PiSSA / OLoRA /
# CorDA / LoRA-GA, also rewrite the base weights, which the file does not hold)
_PLAIN_INITS = (True, False, "gaussian", "eva")


class ReleaseFormatError(ValueError):
    """A release file that does not have the layout this loader maps; the message names the file
    and the key (or setting)."""


# ----------------------------------------------------------------------------- adapter
@dataclass(frozen=True)
class AdapterConfig:
    """The settings of ``adapter_config.json`` that the merge uses (:meth:`from_file` validates the
    rest). ``target_modules``: a list of module names (PEFT matches a name or a ``.``-suffix) or
    one regex string (PEFT's full match)."""

    r: int
    lora_alpha: float
    use_rslora: bool = False
    target_modules: tuple[str, ...] | str = ("qkv",)
    bias: str = "none"
    file: str = "adapter_config.json"

    @property
    def scale(self) -> float:
        """PEFT's ``scaling``: ``lora_alpha / r``, or ``lora_alpha / sqrt(r)`` with rsLoRA."""
        return self.lora_alpha / (math.sqrt(self.r) if self.use_rslora else self.r)

    def targets(self, module: str) -> bool:
        """Whether PEFT would have wrapped the module of full name ``module``."""
        if isinstance(self.target_modules, str):
            return re.fullmatch(self.target_modules, module) is not None
        return any(module == t or module.endswith("." + t) for t in self.target_modules)

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any], file: str = "adapter_config.json") -> AdapterConfig:
        """Validated settings of one ``adapter_config.json`` (see the module docstring)."""
        if not isinstance(cfg, Mapping):
            raise ReleaseFormatError(f"{file}: expected a JSON object, got {type(cfg).__name__}")
        ptype = cfg.get("peft_type", "LORA")
        if str(ptype).upper() != "LORA":
            raise ReleaseFormatError(f"{file}: peft_type {ptype!r} is not a LoRA adapter")
        for key in ("r", "lora_alpha", "target_modules"):
            if cfg.get(key) is None:
                raise ReleaseFormatError(f"{file}: key {key!r} missing")
        r, alpha = cfg["r"], cfg["lora_alpha"]
        if not isinstance(r, int) or isinstance(r, bool) or r < 1:
            raise ReleaseFormatError(f"{file}: key 'r' must be a positive integer, got {r!r}")
        if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
            raise ReleaseFormatError(f"{file}: key 'lora_alpha' must be a number, got {alpha!r}")
        bias = cfg.get("bias", "none")
        if bias != "none":
            raise ReleaseFormatError(f"{file}: key 'bias' is {bias!r}; only 'none' can be merged (the file's "
                                     f"trained biases would change the base's)")
        for key, what in _REFUSED.items():
            if cfg.get(key):
                raise ReleaseFormatError(f"{file}: key {key!r} = {cfg[key]!r} ({what}) cannot be merged by this "
                                         f"loader")
        init = cfg.get("init_lora_weights", True)
        if init not in _PLAIN_INITS:
            raise ReleaseFormatError(f"{file}: key 'init_lora_weights' = {init!r} rewrites the base weights at "
                                     f"initialisation; the adapter alone cannot be merged into the released base")
        tm = cfg["target_modules"]
        if isinstance(tm, str):
            targets: tuple[str, ...] | str = tm
        elif isinstance(tm, (list, tuple)) and tm and all(isinstance(t, str) for t in tm):
            targets = tuple(tm)
        else:
            raise ReleaseFormatError(f"{file}: key 'target_modules' must be a module name list or a regex, "
                                     f"got {tm!r}")
        return cls(r=r, lora_alpha=float(alpha), use_rslora=bool(cfg.get("use_rslora", False)),
                   target_modules=targets, bias=bias, file=file)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> AdapterConfig:
        try:
            cfg = json.loads(Path(path).read_text())
        except json.JSONDecodeError as err:
            raise ReleaseFormatError(f"{path}: not valid JSON ({err})") from err
        return cls.from_dict(cfg, str(path))


def read_adapter(folder: str | os.PathLike) -> tuple[AdapterConfig, dict[str, torch.Tensor]]:
    """``(config, tensors)`` of ``folder/adapter_config.json`` and ``folder/adapter_model.safetensors``
    (read with safetensors, on the CPU)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    cfg = AdapterConfig.from_file(folder / "adapter_config.json")
    f = folder / "adapter_model.safetensors"
    try:
        tensors = load_file(str(f))
    except Exception as err:  # safetensors raises its own error types
        raise ReleaseFormatError(f"{f}: not a readable safetensors file ({type(err).__name__}: {err})") from err
    return cfg, tensors


def encoder_layers(model: nn.Module) -> nn.ModuleList:
    """The transformer blocks of a ``DINOv3ViTModel`` (``model.layer`` in transformers 5.x,
    ``layer`` in 4.5x) or a ``Dinov2Model`` (``encoder.layer``)."""
    layers = None
    for owner in ("model", "encoder"):
        inner = getattr(model, owner, None)
        layers = getattr(inner, "layer", None) if inner is not None else None
        if layers is not None:
            break
    if layers is None:
        layers = getattr(model, "layer", None)
    if not isinstance(layers, nn.ModuleList):
        raise TypeError(f"{type(model).__name__}: no list of transformer layers (model.layer / layer)")
    return layers


@dataclass(frozen=True)
class Delta:
    """One merged LoRA delta: ``scale * B @ A`` added to ``linear.weight`` (B: the rows of that Linear)."""

    linear: nn.Linear
    A: torch.Tensor
    B: torch.Tensor
    scale: float

    def weight(self, like: torch.Tensor) -> torch.Tensor:
        d = (self.B.to(device=like.device, dtype=torch.float32) @ self.A.to(device=like.device, dtype=torch.float32))
        return d * self.scale


@torch.no_grad()
def merge_adapter(model: nn.Module, cfg: AdapterConfig, tensors: Mapping[str, torch.Tensor],
                  file: str = "adapter_model.safetensors") -> list[Delta]:
    """Merge every LoRA tensor of ``tensors`` (Meta key space) into the ``DINOv3ViTModel`` / ``Dinov2Model`` ``model``
    in place; returns the merged deltas (what :meth:`IDSimRelease.adapters_disabled` takes back out).

    Fused qkv: ``W = cat(q, k, v)`` [3D, D]; ``W += scale * B @ A``; split into ``q, k, v`` again.
    Everything is checked before a weight changes, so a failed merge leaves ``model`` untouched."""
    layers = encoder_layers(model)
    pairs: dict[tuple[int, str], dict[str, tuple[str, torch.Tensor]]] = {}
    for key in sorted(tensors):
        m = _KEY.match(key)
        if m is None:
            raise ReleaseFormatError(
                f"{file}: key {key!r} is not consumed: this loader maps LoRA tensors of Meta's DINOv3 blocks "
                f"only (base_model.model.extractor.model.blocks.N.{{attn.qkv,attn.proj,mlp.fc1,mlp.fc2}}"
                f".lora_{{A,B}}.weight)")
        block, module, ab = int(m["block"]), m["module"], m["ab"]
        if block >= len(layers):
            raise ReleaseFormatError(f"{file}: key {key!r}: block {block} is out of range (the base has "
                                     f"{len(layers)} blocks, 0..{len(layers) - 1})")
        if not cfg.targets(f"extractor.model.blocks.{block}.{module}"):
            raise ReleaseFormatError(f"{file}: key {key!r}: module {module} is not among target_modules "
                                     f"{cfg.target_modules!r} of {cfg.file}")
        slot = pairs.setdefault((block, module), {})
        if ab in slot:
            raise ReleaseFormatError(f"{file}: key {key!r}: a second lora_{ab} for block {block} {module} "
                                     f"(first: {slot[ab][0]!r})")
        slot[ab] = (key, tensors[key])
    plan: list[tuple[list[nn.Linear], torch.Tensor, torch.Tensor]] = []
    for (block, module), slot in sorted(pairs.items()):
        for ab, other in (("A", "B"), ("B", "A")):
            if ab not in slot:
                raise ReleaseFormatError(f"{file}: key {slot[other][0]!r} has no lora_{ab} partner for "
                                         f"block {block} {module}")
        layer = layers[block]
        if module == "mlp.fc1" and (hasattr(layer.mlp, "gate_proj") or hasattr(layer.mlp, "weights_in")):
            raise ReleaseFormatError(f"{file}: key {slot['A'][0]!r}: the base has a gated MLP; Meta's mlp.fc1 "
                                     f"has no single counterpart")
        names = _module_map(layer)[module]
        if not names:
            raise ReleaseFormatError(f"{file}: key {slot['A'][0]!r}: block {block} of the base has no counterpart "
                                     f"of Meta's {module} ({type(layer).__name__})")
        linears = [layer.get_submodule(name) for name in names]
        out_dim = sum(lin.out_features for lin in linears)
        in_dim = linears[0].in_features
        (ka, A), (kb, B) = slot["A"], slot["B"]
        if tuple(A.shape) != (cfg.r, in_dim):
            raise ReleaseFormatError(f"{file}: key {ka!r} has shape {tuple(A.shape)}; block {block} {module} "
                                     f"needs [r={cfg.r}, {in_dim}]")
        if tuple(B.shape) != (out_dim, cfg.r):
            raise ReleaseFormatError(f"{file}: key {kb!r} has shape {tuple(B.shape)}; block {block} {module} "
                                     f"needs [{out_dim}, r={cfg.r}]")
        plan.append((linears, A.float(), B.float()))
    deltas: list[Delta] = []
    for linears, A, B in plan:
        # the fused qkv rows of Meta's block are [q; k; v]: B's rows split the same way, A is shared
        rows = [lin.out_features for lin in linears]
        fused = torch.cat([lin.weight.float() for lin in linears], 0)                 # [3D, D] (or [D', D])
        fused += cfg.scale * (B.to(fused.device) @ A.to(fused.device))
        for lin, w, b in zip(linears, fused.split(rows, 0), B.split(rows, 0)):
            lin.weight.copy_(w.to(lin.weight.dtype))
            deltas.append(Delta(lin, A, b.contiguous(), cfg.scale))
    return deltas


# ----------------------------------------------------------------------------- heads
