"""The NearID model: a frozen backbone followed by a trained :class:`~.map_head.MAPHead`
(:class:`NearIDEncoder`), registered as ``nearid`` (:func:`~.factory.load_encoder`)::

    enc, _ = load_encoder("nearid", checkpoint="build/mini/checkpoints/nearid")   # our head + its backbone
    enc, _ = load_encoder("nearid")                             # the authors' release (tower + head)
    seed1, _ = load_encoder("nearid", checkpoint=seed1_dir, backbone=enc.backbone) # another head, same tower

``backbone`` may be a loaded :class:`~.encoder_base.Encoder`: the head is then put on that object and
no second tower is built, so the heads of several training seeds, the released head scored on the
profile's tower and every run of a sweep share one backbone in memory and one set of feature caches.
:func:`same_tower` says whether two SigLIP towers hold the same weights (the release's against the
profile's).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from ..hub import resolve
from .backbones import Encoder, EncoderOutput, SiglipEncoder
from .checkpoint import is_head_checkpoint, load_head, load_release_head, load_release_tower
from .map_head import MAPHead
from .published import published_seeds
from .registry import RELEASE_REPO, StackedEncoder, build_registered, register_encoder, resolve_name

__all__ = ["NearIDEncoder", "same_tower"]


class NearIDEncoder(StackedEncoder):
    """A frozen backbone followed by a (trainable) :class:`MAPHead` over its patch tokens.

    ``pooled`` is the head's output; ``tokens`` are the backbone's. :meth:`pool` runs the head on
    cached tokens, so training and evaluation over a feature cache use the same module."""

    def __init__(self, backbone: Encoder, head: MAPHead, name: str = "nearid", source: str = "scratch"):
        if backbone.token_dim != head.dim:
            raise ValueError(f"nearid: head width {head.dim} does not match backbone "
                             f"{backbone.name!r} token width {backbone.token_dim}")
        super().__init__(name, backbone, frozen=False, source=source)
        self.head = head
        self.to(device=backbone.device)
        self.head.to(device=backbone.device)
        self._finish()

    def _forward(self, pixel_values):
        out = self.backbone(pixel_values)
        return EncoderOutput(out.tokens, self.pool(out.tokens))

    def pool(self, tokens: torch.Tensor, token_mask: torch.Tensor | None = None, **kw) -> torch.Tensor:
        """Head output [B, E] for backbone tokens [B, N, D] (e.g. read from a feature cache)."""
        p = next(self.head.parameters())
        return self.head(tokens.to(device=p.device, dtype=p.dtype), token_mask=token_mask, **kw)

    @property
    def dtype(self) -> torch.dtype:  # the backbone's input dtype; the head may differ
        return self.backbone.dtype

    def cache_key(self) -> str:
        return self.backbone.cache_key()


def _looks_like_repo_id(s: str) -> bool:
    return s.count("/") == 1 and not os.path.exists(s) and not s.startswith((".", "/", "~"))


def _missing_checkpoint(ckpt: str, err: Exception | None = None) -> str:
    """What to do when a NearID head checkpoint is absent (a fresh clone) or the hub is unreachable."""
    parts = Path(ckpt).parts
    prof = parts[parts.index("checkpoints") - 1] if "checkpoints" in parts[1:] else "mini"
    make = f"make build/{prof}/notebooks/03_train_nearid.ipynb"
    fix = (f"train one with notebook 03_train_nearid (`{make}`) or `nearid train --profile {prof}`, "
           f"which write build/{prof}/checkpoints/nearid; or use tiny=True for a random-init head")
    if err is None:
        return f"nearid: no trained head at {ckpt!r} (a fresh clone has none): {fix}"
    return (f"nearid: cannot load the head {ckpt!r} from the Hugging Face hub ({type(err).__name__}); "
            f"run once with hub access (HF_HUB_OFFLINE unset) to fill the cache, pass "
            f"checkpoint=<local folder>, or {fix}")


def _release_path(ckpt: str) -> str:
    """The local file or folder of a release checkpoint: a path as given, a hub repo id from the
    local mirror (``NEARID_HUB_DIR``) or downloaded from the hub."""
    if not _looks_like_repo_id(ckpt):
        if not os.path.exists(ckpt):
            raise FileNotFoundError(_missing_checkpoint(ckpt))
        return ckpt
    where = resolve(ckpt)
    if where.local:
        return where.source
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(ckpt, revision=where.revision, allow_patterns=["*.safetensors", "*.json"])
    except Exception as err:  # offline, unknown repo, no network: say what to do
        raise OSError(_missing_checkpoint(ckpt, err)) from err


def _nearid(name, hub_id, tiny=False, checkpoint=None, backbone=None, head=None, num_heads=None,
            token_dropout=0.0, **kw):
    """Build order: an explicit ``head``; our head folder (its JSON names the backbone); a release
    file/folder/repo (SigLIP2 backbone; the default ``Aleksandar/nearid-siglip2`` when not tiny);
    ``checkpoint="init"`` or tiny: a head initialised from the backbone's own SigLIP head.
    ``backbone``: a name, or a loaded :class:`Encoder` used as it is (no second tower is built)."""
    if isinstance(backbone, Encoder):
        return _nearid_on(backbone, name, hub_id, tiny, checkpoint, head, num_heads, token_dropout)
    if backbone is not None and not isinstance(backbone, str):
        raise TypeError(f"nearid: backbone must be a registered name or a loaded Encoder, not "
                        f"{type(backbone).__name__}")
    source = "scratch"
    release_path = None
    meta_backbone: dict[str, Any] = {}
    if head is None and checkpoint is None and not tiny:
        checkpoint = hub_id          # the authors' release: `load_encoder("nearid")` is their model
    if checkpoint == "init":        # the untrained starting point: the backbone's own SigLIP head
        checkpoint = None
    if head is None and checkpoint is not None:
        ckpt = str(checkpoint)
        if is_head_checkpoint(ckpt):
            head, meta = load_head(ckpt)
            meta_backbone = meta.get("backbone", {}) or {}
            source = f"ckpt:{Path(ckpt).name}"
        else:
            ckpt = _release_path(ckpt)
            head = load_release_head(ckpt, num_heads=num_heads)
            release_path = ckpt
            cfg_file = Path(ckpt) / "config.json" if Path(ckpt).is_dir() else Path(ckpt).parent / "config.json"
            if tiny and cfg_file.exists():
                # a tiny tower saved in the release layout: rebuild exactly its shape
                cfg = json.loads(cfg_file.read_text())
                kw.setdefault("config", {k: v for k, v in cfg.get("vision_config", cfg).items()
                                         if not k.startswith("_") and k not in ("model_type", "transformers_version")})
            meta_backbone = {"name": "siglip2-so400m-patch14-384"}
            source = f"release:{Path(ckpt).name}"
    bb_name = backbone or meta_backbone.get("name") or "siglip2-so400m-patch14-384"
    bb_tiny = bool(meta_backbone.get("tiny", tiny)) if meta_backbone else tiny
    bb_kw = dict(kw)
    if meta_backbone.get("image_size"):
        bb_kw.setdefault("image_size", meta_backbone["image_size"])
    if meta_backbone.get("token_layer"):
        bb_kw.setdefault("token_layer", meta_backbone["token_layer"])
    bb, _ = build_registered(bb_name, tiny=bb_tiny, **bb_kw)
    if release_path is not None and isinstance(bb, SiglipEncoder):
        # the release stores the (frozen) tower too: use it when it is complete
        if load_release_tower(release_path, bb.model):
            bb.weights = f"release:{Path(release_path).name}"
    if head is None:
        if not isinstance(bb, SiglipEncoder):
            raise ValueError(f"nearid: backbone {bb.name!r} has no MAP head to start from; pass "
                             f"checkpoint= (a trained head) or head=")
        head = MAPHead.from_siglip(bb.siglip_head, token_dropout=token_dropout).float()
        source = "siglip-head"
    return NearIDEncoder(bb, head, name=name, source=source)


def _nearid_on(bb: Encoder, name, hub_id, tiny, checkpoint, head, num_heads, token_dropout) -> NearIDEncoder:
    """``nearid`` over an already loaded backbone ``bb``: the head from ``head``, our head folder
    (whose recorded backbone must be ``bb``'s) or a release (its head only: ``bb`` is the tower)."""
    source = "scratch"
    if head is None and checkpoint is None and not tiny:
        checkpoint = hub_id
    if head is None and checkpoint not in (None, "init"):
        ckpt = str(checkpoint)
        if is_head_checkpoint(ckpt):
            head, meta = load_head(ckpt)
            want = (meta.get("backbone") or {}).get("name")
            if want and resolve_name(want) != resolve_name(bb.name):
                raise ValueError(f"nearid: the head at {ckpt} was trained on {want!r}, not on the backbone "
                                 f"given ({bb.name!r})")
            source = f"ckpt:{Path(ckpt).name}"
        else:
            head, source = load_release_head(_release_path(ckpt), num_heads=num_heads), f"release:{Path(ckpt).name}"
    if head is None:
        if not isinstance(bb, SiglipEncoder):
            raise ValueError(f"nearid: backbone {bb.name!r} has no MAP head to start from; pass "
                             f"checkpoint= (a trained head) or head=")
        head, source = MAPHead.from_siglip(bb.siglip_head, token_dropout=token_dropout).float(), "siglip-head"
    return NearIDEncoder(bb, head, name=name, source=source)


def _head_seeds(directory: Path) -> tuple[int, list[int]]:
    seeds = list(published_seeds(directory))
    return seeds[0], sorted(seeds)


register_encoder("nearid", _nearid, RELEASE_REPO, doc="frozen backbone + trained MAP head", label="NearID",
                 seeds=_head_seeds)


def same_tower(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    """Whether two SigLIP towers hold the same weights once ``a``'s are cast to ``b``'s dtype (the
    released tower against the profile's frozen backbone), their MAP heads aside (the trained part)."""
    def tower(m):
        return {k: v for k, v in m.state_dict().items() if not (k.startswith("head.") or ".head." in k)}

    sa, sb = tower(a), tower(b)
    if sa.keys() != sb.keys():
        return False
    return all(sa[k].shape == sb[k].shape and torch.equal(sa[k].to(device=sb[k].device, dtype=sb[k].dtype), sb[k])
               for k in sa)
