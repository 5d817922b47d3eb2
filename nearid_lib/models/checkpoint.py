"""MAP-head checkpoints: our format and the authors' released layout.

Our format (a directory)::

    head.safetensors      MAPHead state dict (probe, attention.*, layernorm.*, mlp.fc1/fc2.*[, proj.*])
    head_config.json      {"format": "nearid-head", "version": 1, "head": MAPHead.config(),
                           "backbone": {"name", "tiny", "image_size"}, ...extra}

The authors' release ``Aleksandar/nearid-siglip2`` stores the whole SigLIP vision tower, with the
trained head under ``backbone.vision_model.head.*`` (names of transformers'
``SiglipMultiheadAttentionPoolingHead``: probe, attention.in_proj_weight, attention.in_proj_bias,
attention.out_proj.weight/bias, layernorm.weight/bias, mlp.fc1.weight/bias, mlp.fc2.weight/bias).
:func:`load_release_head` reads just those tensors; :func:`export_release_head` writes ours in that
layout. The head's number of attention heads is not recoverable from the weights: pass it (SigLIP2
so400m: 16) or keep a ``config.json`` with ``vision_config.num_attention_heads`` beside the file.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ..io_utils import atomic_write, write_json
from .map_head import MAPHead

__all__ = ["load_release_tower", "RELEASE_PREFIX", "HEAD_FILE", "HEAD_CONFIG", "save_head", "load_head", "load_release_head",
           "export_release_head", "release_state_dict", "is_head_checkpoint"]

RELEASE_PREFIX = "backbone.vision_model.head."
HEAD_FILE = "head.safetensors"
HEAD_CONFIG = "head_config.json"
_FORMAT = "nearid-head"
_REQUIRED = ("probe", "attention.in_proj_weight", "attention.in_proj_bias", "attention.out_proj.weight",
             "attention.out_proj.bias", "layernorm.weight", "layernorm.bias", "mlp.fc1.weight",
             "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias")


def _save_safetensors(tensors: Mapping[str, torch.Tensor], path: Path, metadata: dict | None = None) -> None:
    clean = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    atomic_write(path, lambda p: save_file(clean, str(p), metadata=metadata or {"format": "pt"}))


def is_head_checkpoint(path: str | os.PathLike) -> bool:
    """True if ``path`` is a directory in our head format."""
    p = Path(path)
    return p.is_dir() and (p / HEAD_FILE).exists() and (p / HEAD_CONFIG).exists()


def save_head(head: MAPHead, directory: str | os.PathLike, backbone: Mapping[str, Any] | None = None,
              **extra: Any) -> Path:
    """Write ``head`` to ``directory`` (weights first, the JSON config last, both atomically).

    ``backbone`` should name the frozen encoder the head was trained on, e.g.
    ``{"name": "efficientnet-lite0", "tiny": False, "image_size": 224}``; ``extra`` (JSON-able) is
    stored beside it (resolved config, step, metrics, ...)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    _save_safetensors(head.state_dict(), d / HEAD_FILE)
    write_json({"format": _FORMAT, "version": 1, "head": head.config(), "backbone": dict(backbone or {}),
                **extra}, d / HEAD_CONFIG)
    return d


def load_head(directory: str | os.PathLike, device: str | torch.device = "cpu") -> tuple[MAPHead, dict]:
    """``(head, meta)`` from a directory written by :func:`save_head` (meta = the JSON config)."""
    d = Path(directory)
    cfg_path, w_path = d / HEAD_CONFIG, d / HEAD_FILE
    for p in (cfg_path, w_path):
        if not p.exists():
            raise FileNotFoundError(f"head checkpoint {d}: missing {p.name}")
    meta = json.loads(cfg_path.read_text())
    if meta.get("format") != _FORMAT or "head" not in meta:
        raise ValueError(f"{cfg_path}: not a NearID head config (format={meta.get('format')!r})")
    head = MAPHead.from_config(meta["head"])
    state = load_file(str(w_path))
    missing, unexpected = head.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{w_path}: tensors missing {missing}, unexpected {unexpected}")
    return head.to(device), meta


def release_state_dict(head: MAPHead, prefix: str = RELEASE_PREFIX) -> dict[str, torch.Tensor]:
    """The head's tensors under the release names (``backbone.vision_model.head.*``)."""
    if head.proj is not None:
        raise ValueError("the release layout has no output projection: export a head with out_dim == dim")
    return {prefix + k: v for k, v in head.state_dict().items()}


def export_release_head(head: MAPHead, path: str | os.PathLike, prefix: str = RELEASE_PREFIX) -> Path:
    """Write ``head`` as a safetensors file in the authors' release layout (head tensors only)."""
    path = Path(path)
    meta = {"format": "pt", "num_attention_heads": str(head.num_heads), "layer_norm_eps": str(head.eps),
            "hidden_act": head.act}
    _save_safetensors(release_state_dict(head, prefix), path, meta)
    return path


def _read_release(src) -> tuple[dict[str, torch.Tensor], dict[str, str], Path | None]:
    if isinstance(src, Mapping):
        return dict(src), {}, None
    p = Path(src)
    if p.is_dir():
        files = sorted(p.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"{p}: no .safetensors file")
        tensors, meta = {}, {}
        for f in files:
            t, m, _ = _read_release(f)
            tensors.update(t)
            meta.update(m)
        return tensors, meta, p
    if not p.exists():
        raise FileNotFoundError(f"release checkpoint {p} does not exist")
    with safe_open(str(p), framework="pt") as fh:
        meta = fh.metadata() or {}
        # only the head's tensors: the full SigLIP tower is ~1.6 GB and not needed here
        keys = [k for k in fh.keys() if ".head." in k or k.startswith("head.")]
        tensors = {k: fh.get_tensor(k) for k in keys}
    return tensors, meta, p.parent


def load_release_head(src: str | os.PathLike | Mapping[str, torch.Tensor], num_heads: int | None = None,
                      prefix: str = RELEASE_PREFIX, eps: float | None = None,
                      act: str | None = None) -> MAPHead:
    """A :class:`MAPHead` from the released layout (a safetensors file, a folder of them, or a
    state dict). ``num_heads`` falls back to the file's metadata, then to a ``config.json``
    beside it (``vision_config.num_attention_heads``), then raises."""
    tensors, meta, folder = _read_release(src)
    state = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    where = str(src) if not isinstance(src, Mapping) else "state dict"
    missing = [k for k in _REQUIRED if k not in state]
    if missing:
        found = sorted({k.rsplit(".head.", 1)[0] + ".head." for k in tensors if ".head." in k})
        raise KeyError(f"{where}: no head tensors {', '.join(prefix + m for m in missing)}"
                       + (f" (head prefixes found: {found})" if found else ""))
    cfg_json: dict[str, Any] = {}
    if folder is not None and (folder / "config.json").exists():
        cfg_json = json.loads((folder / "config.json").read_text())
        cfg_json = cfg_json.get("vision_config", cfg_json)
    if num_heads is None:
        num_heads = int(meta["num_attention_heads"]) if "num_attention_heads" in meta else \
            cfg_json.get("num_attention_heads")
    if num_heads is None:
        raise ValueError(f"{where}: the number of attention heads is not stored; pass num_heads=")
    eps = eps if eps is not None else float(meta.get("layer_norm_eps", cfg_json.get("layer_norm_eps", 1e-6)))
    act = act or meta.get("hidden_act") or cfg_json.get("hidden_act", "gelu_pytorch_tanh")
    dim = state["probe"].shape[-1]
    if state["attention.in_proj_weight"].shape != (3 * dim, dim):
        raise ValueError(f"{where}: {prefix}attention.in_proj_weight has shape "
                         f"{tuple(state['attention.in_proj_weight'].shape)}, expected {(3 * dim, dim)}")
    head = MAPHead(dim, int(num_heads), hidden=state["mlp.fc1.weight"].shape[0], eps=eps, act=act)
    head = head.to(state["probe"].dtype)
    head.load_state_dict({k: state[k] for k in _REQUIRED})
    return head


def load_release_tower(src: str | os.PathLike, model: torch.nn.Module,
                       prefix: str = "backbone.vision_model.") -> bool:
    """Copy the release's full vision tower (``backbone.vision_model.*``) into a transformers
    ``SiglipVisionModel`` if the file(s) hold all of its tensors; returns whether it did.

    The released tower is the frozen SigLIP2 backbone, so this only matters for checking a
    download and for tiny test towers; a head-only file leaves ``model`` untouched."""
    p = Path(src)
    files = sorted(p.glob("*.safetensors")) if p.is_dir() else [p]
    want = model.state_dict()
    found: dict[str, torch.Tensor] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as fh:
            for k in fh.keys():
                if k.startswith(prefix) and k[len(prefix):] in want:
                    found[k[len(prefix):]] = fh.get_tensor(k)
    if set(found) != set(want):
        return False
    for k, v in found.items():
        if v.shape != want[k].shape:
            raise ValueError(f"{src}: {prefix}{k} has shape {tuple(v.shape)}, the backbone expects "
                             f"{tuple(want[k].shape)}")
    model.load_state_dict(found)
    return True
