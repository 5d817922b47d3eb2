"""ID-Sim (paper 001): a frozen backbone with rank-16 LoRA adapters (peft) and two MLP projection
heads, one for the global (CLS) token and one for the patch tokens.

Two backbone families share one code path:

* **ViTs** (``dinov3-vitl16`` in the paper profile, ``dinov2-*``, and their tiny random-init
  configs in smoke/tests): LoRA on every attention projection and MLP linear of the transformers
  model (``q_proj``/``k_proj``/``v_proj``/``o_proj`` + ``fc1``/``fc2`` for Dinov2 in transformers 5,
  ``up_proj``/``down_proj`` for DINOv3; the older ``query``/``key``/``value``/``dense`` names are
  matched too). CLS = the encoder's pooled output (CLS after the final LayerNorm), patch tokens =
  its patch tokens (registers dropped).
* **EfficientNet-Lite0** (the ``mini`` profile's offline pretrained CNN) - our adaptation, not in
  the paper: a CNN has no attention/MLP layers, so LoRA goes on the 1x1 *pointwise* convolutions
  (``conv_pw`` / ``conv_pwl``: the per-token linear maps, the CNN analogue of a transformer's MLP)
  of the last ``adapt_stages`` block stages plus ``conv_head``. Everything before those stages is
  frozen and *unchanged by training*, so its output (the "prefix" feature map, [192, 7, 7] at
  224 px for the default ``adapt_stages=1``, [112, 14, 14] for ``adapt_stages=2``) is computed once and cached; training runs only the adapted
  suffix. BatchNorm layers stay in eval mode (running statistics of ImageNet). "CLS" = global
  average of the final 1280 x 7 x 7 map (the frozen-GAP baseline's embedding), patch tokens = its
  49 positions.

For ViTs the "prefix" is the identity (pixel values), so training over cached prefixes and
training end-to-end are the same code. LoRA's B matrices start at zero, so an untrained model's
raw features equal the frozen backbone's (used for hard-negative mining) and
:meth:`IDSimModel.adapters_disabled` gives the frozen backbone back at any time.

Checkpoints (:func:`save_idsim` / :func:`load_idsim`): ``idsim.safetensors`` with the LoRA tensors
and both heads (plus the backbone itself for tiny random-init backbones, which cannot be rebuilt
from a hub id) and ``idsim.json`` with the :class:`IDSimSpec`.
"""
from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from ..config.sections import IDSimConfig
from ..io_utils import atomic_write, write_json
from ..models import load_encoder, resolve_name
from ..models.backbones import Encoder, EncoderOutput, TimmEfficientNetEncoder, folded_copy
from ..paths import seed_checkpoint_dir

__all__ = ["IDSimSpec", "IDSimModel", "ProjectionMLP", "build_idsim", "save_idsim", "load_idsim",
           "is_idsim_checkpoint", "idsim_encoder", "VIT_LORA_TARGETS", "WEIGHTS_FILE", "CONFIG_FILE",
           "seed_checkpoint_dir", "checkpoint_seed_list", "load_idsim_seeds"]

WEIGHTS_FILE = "idsim.safetensors"
CONFIG_FILE = "idsim.json"
# Attention projections and MLP linears of the transformers ViTs we support (names differ by
# class and transformers version; only the ones present are used).
VIT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "query", "key", "value", "dense",
                    "fc1", "fc2", "up_proj", "down_proj")


_CONFIG = IDSimConfig()      # the one source of the model fields' defaults (and their meaning)


@dataclass(frozen=True)
class IDSimSpec:
    """Everything needed to rebuild an ID-Sim model (stored in ``idsim.json``): the model fields of
    the profile's ``idsim`` section (:class:`~nearid_lib.config.IDSimConfig`, whose defaults and
    comments they take; :meth:`from_config`) and ``weights``."""

    backbone: str = _CONFIG.backbone
    tiny: bool = _CONFIG.tiny
    image_size: int | None = _CONFIG.image_size
    lora_rank: int = _CONFIG.lora_rank
    lora_alpha: int = _CONFIG.lora_alpha
    lora_dropout: float = _CONFIG.lora_dropout
    head_hidden: int = _CONFIG.head_hidden
    head_out: int = _CONFIG.head_out
    adapt_stages: int = _CONFIG.adapt_stages
    weights: str | None = None          # local backbone weights instead of the default
    patch_grid: int | None = _CONFIG.patch_grid

    @classmethod
    def from_config(cls, idsim: IDSimConfig, **kw: Any) -> IDSimSpec:
        """The spec of a profile's ``idsim`` section (``kw``: further fields, e.g. ``weights``)."""
        return cls(**{f.name: getattr(idsim, f.name) for f in fields(cls) if hasattr(idsim, f.name)}, **kw)


class ProjectionMLP(nn.Module):
    """The 2-layer projection head (ID-Sim App. C.1: hidden 512): Linear -> GELU -> Linear."""

    def __init__(self, dim: int, hidden: int, out: int):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


def _lora_layers(module: nn.Module):
    from peft.tuners.lora import LoraLayer

    return [m for m in module.modules() if isinstance(m, LoraLayer)]


class IDSimModel(Encoder):
    """Frozen backbone + LoRA + CLS/patch projection heads.

    ``model(pixel_values)`` -> ``EncoderOutput(tokens=[B, N, E] projected patch tokens,
    pooled=[B, E] projected CLS)``; ``model.embed(pils)`` -> L2-normalised projected CLS (the ID-Sim
    metric: D(x, y) = 1 - cos). For cached training: ``feats = model.prefix(pixels)`` (no grad,
    frozen), then ``model.from_prefix(feats)``; ``model.raw_from_prefix(feats)`` gives the
    backbone's (cls, tokens) before the heads."""

    def __init__(self, backbone: Encoder, spec: IDSimSpec):
        from peft import LoraConfig, inject_adapter_in_model

        self.spec = spec
        self.is_cnn = isinstance(backbone, TimmEfficientNetEncoder)
        backbone.requires_grad_(False)
        inner = backbone.model
        if self.is_cnn:
            n_stages = len(inner.blocks)
            if not 0 <= spec.adapt_stages <= n_stages:
                raise ValueError(f"idsim: adapt_stages must be in 0..{n_stages}, got {spec.adapt_stages}")
            self.split = n_stages - spec.adapt_stages
            stages = "|".join(str(i) for i in range(self.split, n_stages))
            # full-name regex: 1x1 pointwise convs of the adapted stages, and the 1x1 conv_head
            targets: Any = (rf"^(blocks\.({stages})\.\d+\.(conv_pw|conv_pwl)|conv_head)$" if stages
                            else r"^conv_head$")
        else:
            self.split = 0
            leafs = {n.rsplit(".", 1)[-1] for n, m in inner.named_modules() if isinstance(m, nn.Linear)}
            targets = sorted(leafs & set(VIT_LORA_TARGETS))
            if not targets:
                raise ValueError(f"idsim: backbone {backbone.name!r} has none of the LoRA target "
                                 f"layers {VIT_LORA_TARGETS}; linear layers found: {sorted(leafs)}")
        cfg = LoraConfig(r=spec.lora_rank, lora_alpha=spec.lora_alpha, lora_dropout=spec.lora_dropout,
                         target_modules=targets, bias="none")
        inject_adapter_in_model(cfg, inner)
        self.lora_targets = targets
        super().__init__("idsim", backbone.preprocess, tiny=backbone.tiny, frozen=False,
                         weights=f"{backbone.weights}+idsim")
        self.backbone = backbone
        dim = backbone.token_dim
        self.cls_head = ProjectionMLP(dim, spec.head_hidden, spec.head_out)
        self.patch_head = ProjectionMLP(dim, spec.head_hidden, spec.head_out)
        self.to(device=backbone.device)
        for n, p in self.named_parameters():      # only LoRA and the heads learn
            p.requires_grad_(("lora_" in n) or n.startswith(("cls_head.", "patch_head.")))
        if not _lora_layers(inner):
            raise RuntimeError("idsim: peft attached no LoRA layer (target names did not match)")
        self._finish()

    # ------------------------------------------------------------------ modes
    def train(self, mode: bool = True):
        """Heads and LoRA dropout follow ``mode``; the backbone (BatchNorm, its own dropout) stays in
        eval mode: it is frozen and its statistics must not move."""
        self.training = mode
        self.backbone.train(False)
        self.cls_head.train(mode)
        self.patch_head.train(mode)
        for layer in _lora_layers(self.backbone.model):
            layer.lora_dropout.train(mode)
        return self

    @contextlib.contextmanager
    def adapters_disabled(self) -> Iterator[None]:
        """Within the block the backbone computes exactly the frozen pretrained features."""
        layers = _lora_layers(self.backbone.model)
        for layer in layers:
            layer.enable_adapters(False)
        try:
            yield
        finally:
            for layer in layers:
                layer.enable_adapters(True)

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The parameters training updates (LoRA and both heads; the backbone is frozen)."""
        return [p for p in self.parameters() if p.requires_grad]

    # ------------------------------------------------------------------ forward
    @torch.no_grad()
    def prefix(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """The frozen part (never touched by training): CNN stage features [B, C, h, w] before the
        adapted stages; for ViTs the pixel values themselves."""
        x = pixel_values.to(device=self.device, dtype=self.backbone.dtype)
        if not self.is_cnn:
            return x
        return self._folded_prefix()(x)

    def _folded_prefix(self) -> nn.Module:
        """``conv_stem, bn1, blocks[:split]`` with the BatchNorms folded (:func:`fold_batchnorm`,
        ~1.5x faster on CPU, equal up to float rounding); rebuilt when one of its tensors changes."""
        m = self.backbone.model
        return folded_copy(self, "_prefix_fold", nn.Sequential(m.conv_stem, m.bn1, *m.blocks[:self.split]))

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_prefix_fold", None)         # rebuilt on first use
        return state

    def raw_from_prefix(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Backbone outputs (cls [B, D], tokens [B, N, D]) from :meth:`prefix` features."""
        feats = feats.to(device=self.device, dtype=self.backbone.dtype)
        if self.is_cnn:
            m = self.backbone.model
            fmap = m.bn2(m.conv_head(m.blocks[self.split:](feats)))   # [B, C, h, w]
            cls = fmap.mean(dim=(2, 3))                                 # GAP of the full map
            if self.spec.patch_grid:
                fmap = F.adaptive_avg_pool2d(fmap, self.spec.patch_grid)   # [B, C, k, k]
            return cls, fmap.flatten(2).transpose(1, 2)                 # [B, C], [B, h*w, C]
        out = self.backbone(feats)
        tokens = out.tokens
        if self.spec.patch_grid:
            B, N, D = tokens.shape
            side = int(round(N ** 0.5))
            if side * side != N:
                raise ValueError(f"idsim: patch_grid needs a square token grid, got {N} tokens")
            grid = tokens.transpose(1, 2).reshape(B, D, side, side)
            tokens = F.adaptive_avg_pool2d(grid, self.spec.patch_grid).flatten(2).transpose(1, 2)
        return out.pooled, tokens

    def project(self, cls: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Heads: (cls [B, E], patch [B, N, E]), not normalised (losses normalise)."""
        p = self.cls_head.fc1.weight
        return self.cls_head(cls.to(p.dtype)), self.patch_head(tokens.to(p.dtype))

    def from_prefix(self, feats: torch.Tensor) -> EncoderOutput:
        """The model's output from :meth:`prefix` features: tokens = the patch head's, pooled = the CLS head's."""
        cls, tokens = self.raw_from_prefix(feats)
        c, z = self.project(cls, tokens)
        return EncoderOutput(z, c)

    def _forward(self, pixel_values):
        return self.from_prefix(self.prefix(pixel_values))

    @property
    def dtype(self) -> torch.dtype:
        return self.backbone.dtype

    def cache_key(self) -> str:
        """Key of the *prefix* features (what a training cache stores). The model's own embeddings
        are keyed by it plus :meth:`fingerprint_tensors` (:func:`~nearid_lib.features.encoder_fingerprint`):
        two trainings share a prefix, never an embedding."""
        return f"idsim-prefix|split={self.split}|{self.backbone.cache_key()}"

    def fingerprint_tensors(self) -> list[tuple[str, torch.Tensor]]:
        """What training changed, by name: the LoRA matrices and both projection heads."""
        lora = [(f"backbone.{n}", p) for n, p in self.backbone.model.named_parameters() if "lora_" in n]
        heads = [(f"{name}.{k}", v) for name in ("cls_head", "patch_head")
                 for k, v in getattr(self, name).state_dict().items()]
        return lora + heads


# ---------------------------------------------------------------------- build / save / load
def build_idsim(spec: IDSimSpec | None = None, device: str | torch.device = "cpu", **kw: Any) -> IDSimModel:
    """A fresh ID-Sim model (LoRA B = 0, random heads) on the registered backbone ``spec.backbone``.
    ``kw`` overrides spec fields (e.g. ``tiny=True``)."""
    spec = IDSimSpec(**{**asdict(spec or IDSimSpec()), **kw})
    bkw: dict[str, Any] = {}
    canon = resolve_name(spec.backbone)
    if spec.image_size is not None and (canon.startswith("efficientnet-lite") or canon.startswith("dino")):
        bkw["image_size"] = spec.image_size
    if spec.weights:
        bkw["weights"] = spec.weights
    backbone, _ = load_encoder(spec.backbone, tiny=spec.tiny, device=device, **bkw)
    return IDSimModel(backbone, spec)


def _save_safetensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]) -> None:
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    atomic_write(path, lambda p: save_file(tensors, str(p), metadata=metadata))


def save_idsim(model: IDSimModel, directory: str | os.PathLike, extra: dict[str, Any] | None = None) -> Path:
    """Write ``idsim.safetensors`` (LoRA + heads; + backbone for tiny random-init backbones) and
    ``idsim.json`` (spec + ``extra``, e.g. training metadata) into ``directory``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    sd = model.state_dict()
    keep = {k: v for k, v in sd.items()
            if "lora_" in k or k.startswith(("cls_head.", "patch_head."))
            or (model.spec.tiny and k.startswith("backbone."))}
    _save_safetensors(keep, d / WEIGHTS_FILE, {"format": "nearid-idsim", "version": "1"})
    write_json({"spec": asdict(model.spec), "lora_targets": model.lora_targets
                if isinstance(model.lora_targets, str) else list(model.lora_targets),
                "n_tensors": len(keep), **(extra or {})}, d / CONFIG_FILE)
    return d


def is_idsim_checkpoint(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder written by :func:`save_idsim` (both of its files present)."""
    p = Path(path)
    return (p / WEIGHTS_FILE).exists() and (p / CONFIG_FILE).exists()


def load_idsim(directory: str | os.PathLike, device: str | torch.device = "cpu") -> tuple[IDSimModel, dict]:
    """Rebuild the model of ``directory`` and load its tensors; returns ``(model, meta)``.

    Raises FileNotFoundError naming the missing file, or ValueError naming tensors that are
    missing from / unexpected in the checkpoint."""
    d = Path(directory)
    for f in (WEIGHTS_FILE, CONFIG_FILE):
        if not (d / f).exists():
            raise FileNotFoundError(f"idsim checkpoint {d}: {f} missing (train it with notebook 09)")
    meta = json.loads((d / CONFIG_FILE).read_text())
    spec = IDSimSpec(**meta["spec"])
    model = build_idsim(spec, device=device)
    tensors = load_file(str(d / WEIGHTS_FILE))
    sd = model.state_dict()
    unexpected = sorted(set(tensors) - set(sd))
    needed = {k for k in sd if "lora_" in k or k.startswith(("cls_head.", "patch_head."))}
    missing = sorted(needed - set(tensors))
    if unexpected or missing:
        raise ValueError(f"idsim checkpoint {d / WEIGHTS_FILE}: missing {missing[:5]} "
                         f"unexpected {unexpected[:5]}")
    for k, v in tensors.items():
        if v.shape != sd[k].shape:
            raise ValueError(f"idsim checkpoint {d / WEIGHTS_FILE}: {k} has shape {tuple(v.shape)}, "
                             f"model expects {tuple(sd[k].shape)}")
    model.load_state_dict(tensors, strict=False)
    model.eval()
    return model, meta


def checkpoint_seed_list(directory: str | os.PathLike) -> tuple[int, list[int]]:
    """A trained ID-Sim checkpoint's own seed and every training seed its ``idsim.json`` lists, in
    seed order (a checkpoint without the list is its own seed alone); loads no weights."""
    meta = json.loads((Path(directory) / CONFIG_FILE).read_text())
    own = int(meta.get("seed", 0))
    return own, sorted({own, *(int(x) for x in meta.get("seeds", [own]))})


def load_idsim_seeds(directory: str | os.PathLike, device: str | torch.device = "cpu") -> dict[int, IDSimModel]:
    """Every training seed of the checkpoint ``directory``: its own model (under its ``seed``) and the
    models of the other seeds its ``idsim.json`` lists (``seeds``; :func:`seed_checkpoint_dir`),
    in seed order. A checkpoint without that list is one seed. Raises FileNotFoundError naming a
    listed seed whose folder is missing."""
    own, seeds = checkpoint_seed_list(directory)
    out = {own: load_idsim(directory, device=device)[0]}
    for s in seeds:
        if s != own:
            d = seed_checkpoint_dir(directory, s)
            if not is_idsim_checkpoint(d):
                raise FileNotFoundError(f"idsim checkpoint {directory}: seed {s} is listed in {CONFIG_FILE} "
                                        f"but {d} holds no checkpoint (rerun notebook 09)")
            out[int(s)] = load_idsim(d, device=device)[0]
    return dict(sorted(out.items()))


def idsim_encoder(tiny: bool = False, checkpoint: str | os.PathLike | None = None, **kw: Any) -> IDSimModel:
    """What ``load_encoder("idsim", ...)`` builds (:mod:`nearid_lib.models.registry`): the trained
    model of ``checkpoint`` (a folder of :func:`save_idsim`) or a fresh one (``tiny`` and the
    :class:`IDSimSpec` fields in ``kw``; other keywords are ignored)."""
    if checkpoint is not None:
        return load_idsim(checkpoint, device=kw.get("device", "cpu"))[0]
    return build_idsim(IDSimSpec(tiny=tiny, **{k: v for k, v in kw.items() if k in IDSimSpec.__dataclass_fields__}))

