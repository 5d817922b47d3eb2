"""The embedding encoders a profile scores, each as an :class:`~.embedder.Embedder` named as the tables
name it: :func:`profile_embedders` (NearID-bench adds its VLM judges,
:func:`nearid_lib.nearid.scorers.load_bench_encoders`; ``score_encoder`` and the cross-paper table
score these as they are).

``cfg.eval.encoders`` lists them:

* a registered name: the frozen encoder, loaded the way the profile loads encoders
  (:func:`~nearid_lib.models.load_backbone`), its pooled output only; the NearID head's own
  backbone is the head's backbone object (one cache serves both rows);
* ``<name>@random``: the same class at a fixed random init, the chance reference;
* ``nearid``: the trained head of every training seed, all over one backbone object
  (:func:`~nearid_lib.models.load_seed_heads`);
* ``nearid-release``: the authors' released model (``Aleksandar/nearid-siglip2``) at the precision its
  expected values were measured in: tower and head in float32 on every test image, rows kept under
  ``cache_dir(profile) / "release_float"``; where the profile trains from a quantised token store,
  the released head on that store of the profile's backbone too (``nearid-release-int8``, scored the
  way our heads are; :func:`nearid_lib.nearid.release.decision_diff` counts where the two disagree).

An encoder the profile asks for that cannot be scored now (the released weights absent) is listed in
the result's ``gated`` with the reason, and the tables show its row empty with that reason.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import torch

from .. import hub
from ..chance import RANDOM_INIT
from ..models import load_backbone, load_encoder, load_seed_heads, resolve_device, resolve_name, same_tower, \
    split_weights
from ..models.registry import RELEASE_REPO
from ..paths import cache_dir, checkpoint_dir
from .embedder import Embedder

if TYPE_CHECKING:
    from ..config import Profile
    from ..data import NearIDData

__all__ = ["Embedders", "profile_embedders", "release_embedders", "release_why", "RELEASE_FLOAT", "RELEASE_INT8",
           "IDSIM_RELEASE", "idsim_release_row", "idsim_frozen_row"]

RELEASE_FLOAT, RELEASE_INT8 = "nearid-release", "nearid-release-int8"
# the registered name of the paper's released ID-Sim (the group "idsim-release" holds it and the
# authors' other released backbones; registered by nearid_lib.idsim through the plug-in entry point)
IDSIM_RELEASE = "idsim-release"


class Embedders(list):
    """The embedders of a profile (a list), with ``gated``: ``{encoder name: reason}`` for the ones
    the profile asks for that cannot be scored now."""

    def __init__(self, items=(), gated: Mapping[str, str] | None = None):
        super().__init__(items)
        self.gated: dict[str, str] = dict(gated or {})


def release_why() -> str | None:
    """Why the released-weights rows cannot be scored now (None: they can)."""
    if hub.is_available(RELEASE_REPO):
        return None
    return (f"{RELEASE_REPO} is not in the local hub mirror; fetch it with "
            + hub.download_command(RELEASE_REPO, "model", hub.hub_dir()))


def _frozen_label(name: str, tiny: bool, random_init: bool = False) -> str:
    if random_init:       # no "frozen" in it: the figures give the chance reference its own grey
        base = {"efficientnet-lite0": "EfficientNet-Lite0 GAP"}.get(name, name)
        return f"{base} at random init (chance reference)"
    base = {"efficientnet-lite0": "EfficientNet-Lite0 GAP (frozen)"}.get(name, f"{name} (frozen)")
    return ("tiny random-init " + base) if tiny else base


def release_embedders(cfg: Profile, data: NearIDData, backbone=None) -> tuple[list[Embedder], str | None]:
    """The authors' released model as embedders (module docstring): ``nearid-release`` (float32
    forward, rows layout) and, when ``cfg.train.token_store`` is a quantised store and ``backbone``
    (the profile's frozen backbone, whose store our heads are scored from) is given,
    ``nearid-release-int8`` (the released head on that backbone object; ``.same_tower`` says whether
    it is the released tower). Returns ``(embedders, why)``, ``why`` saying why there are none."""
    why = release_why()
    if why:
        return [], why
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    enc, _ = load_encoder("nearid", checkpoint=RELEASE_REPO, device=dev, dtype="float32")
    enc.eval()
    tower = enc.backbone.weights or enc.backbone.name
    out = [Embedder(enc, data, layout="rows", folder=cache_dir(cfg.name) / "release_float",
                    batch_size=cfg.backbone.batch_size, progress=False, name=RELEASE_FLOAT,
                    label=f"NearID released weights ({RELEASE_REPO}: tower {tower} + head), "
                          f"float32 forward on the images (the guide's precision)")]
    if backbone is not None and cfg.train.token_store != "cache" and getattr(backbone, "n_tokens", 0):
        twin = load_encoder("nearid", head=enc.head, backbone=backbone)[0].eval()
        same = same_tower(enc.backbone.model, backbone.model) if hasattr(backbone, "model") else False
        label = (f"NearID released head on the {cfg.train.token_store} token store of the profile's {backbone.name} "
                 f"({'the same tower weights' if same else 'NOT the released tower'}), as our heads are scored")
        emb = Embedder(twin, data, profile=cfg, progress=False, name=RELEASE_INT8, label=label)
        emb.same_tower = same
        out.append(emb)
    return out, None


def _heads(cfg: Profile, checkpoint, checkpoints) -> dict:
    """``{seed: NearID encoder}`` of the trained heads (one backbone object for all seeds)."""
    ckpts = list(checkpoints) if checkpoints else [(cfg.seed, checkpoint or (checkpoint_dir(cfg.name) / "nearid"))]
    for _, ckpt in ckpts:
        if not ckpt or not Path(ckpt).exists():
            raise FileNotFoundError(f"NearID checkpoint {ckpt} not found: run notebook 03_train_nearid "
                                    f"(profile {cfg.name!r}) first")
    return {seed: enc.eval() for seed, enc in load_seed_heads(ckpts).items()}


def profile_embedders(cfg: Profile, data: NearIDData, checkpoint=None,
                      checkpoints: Sequence[tuple[int, str | Path]] | None = None,
                      progress: bool = False) -> Embedders:
    """The embedders of ``cfg.eval.encoders`` in that order (module docstring), with ``gated``.

    ``nearid`` loads the trained head of every ``(seed, folder)`` in ``checkpoints`` (one embedder
    per seed, ``.seed`` set; default: the single ``checkpoint``, else ``checkpoint_dir(profile) /
    "nearid"``); the heads share one backbone object, and a frozen encoder with the same backbone
    reuses it too, so all read the same feature caches."""
    out = Embedders()
    heads = _heads(cfg, checkpoint, checkpoints) if "nearid" in cfg.eval.encoders else {}
    nearid_enc = next(iter(heads.values()), None)
    for name in cfg.eval.encoders:
        if name == RELEASE_FLOAT:
            rel, why = release_embedders(cfg, data, nearid_enc.backbone if nearid_enc is not None else None)
            out.extend(rel)
            if why:
                print(f"{RELEASE_FLOAT}: row skipped, {why}")
                out.gated[RELEASE_FLOAT] = why
            continue
        if name == "nearid":
            bb = nearid_enc.backbone
            label = (f"NearID MAP head (loss {cfg.train.loss}) on frozen "
                     f"{'tiny random-init ' if bb.tiny else ''}{bb.name} tokens"
                     + (f" ({getattr(bb, 'token_layer', None)})" if getattr(bb, "token_layer", None) else ""))
            out.extend(Embedder(enc, data, profile=cfg, progress=progress, name="nearid", label=label, seed=seed)
                       for seed, enc in heads.items())
            continue
        base, weights = split_weights(name)
        canon = resolve_name(base)
        shared = nearid_enc is not None and resolve_name(nearid_enc.backbone.name) == canon and weights is None
        if shared:
            enc = nearid_enc.backbone          # same backbone object -> same caches
        elif weights == "random":              # the chance reference: the class at a fixed random init
            enc, _ = load_backbone(cfg, name=canon, weights="random")
            out.append(Embedder(enc, data, profile=cfg, progress=progress, store_tokens=False, name=canon + RANDOM_INIT,
                                label=_frozen_label(canon, False, random_init=True)))
            continue
        else:
            enc, _ = load_backbone(cfg, name=canon)
        # the head's backbone keeps its tokens (one cache serves both rows); other frozen encoders
        # only need their pooled output (CLIP-L tokens of the paper test set would be ~8 GB)
        out.append(Embedder(enc, data, profile=cfg, progress=progress, store_tokens=None if shared else False,
                            name=canon, label=_frozen_label(canon, getattr(enc, "tiny", False))))
    return out


def idsim_release_row(cfg: Profile, name: str | None = None, device=None):
    """A released ID-Sim as a profile scores it, through the registry: at ``idsim.image_size`` (448
    in ``paper``), on ``device`` (default: the profile's); ``name`` one of
    ``list_encoders(group="idsim-release")`` (default: :data:`IDSIM_RELEASE` read from the profile's
    ``idsim.released_model``, the paper's row of notebooks 09 and 12)."""
    kw = {"image_size": cfg.idsim.image_size} if cfg.idsim.image_size else {}
    dev = resolve_device(cfg.device) if device is None else device
    if name is None or name == IDSIM_RELEASE:
        return load_encoder(IDSIM_RELEASE, device=dev, checkpoint=cfg.idsim.released_model, **kw)[0]
    return load_encoder(name, device=dev, **kw)[0]


def idsim_frozen_row(cfg: Profile, name: str, device=None):
    """A frozen encoder as ID-Sim's tables score it (``cfg.idsim.frozen_rows``, its backbone): through
    the registry, DINO encoders at ``idsim.image_size``, the others at their native size."""
    kw = {"image_size": cfg.idsim.image_size} if cfg.idsim.image_size and name.startswith("dino") else {}
    return load_encoder(name, device=resolve_device(cfg.device) if device is None else device, **kw)[0]
