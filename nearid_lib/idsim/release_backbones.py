"""The four released ID-Sim checkpoints and the ``transformers`` backbones they adapt.

The authors publish one checkpoint per backbone (``chaenayo/id-sim_<backbone>_cls_patch``), each the
same four files (:data:`~.release_model.RELEASE_FILES`) over Meta's native torch.hub model of that
backbone, whose LoRA keys are in Meta's key space (``extractor.model.blocks.N.attn.qkv`` ...):

==================================  ===============================  ==========================================
registry name                       release repository               transformers base (Meta's weights converted)
==================================  ===============================  ==========================================
``idsim-release``                   ``..._dinov3_vitl16_cls_patch``  ``facebook/dinov3-vitl16-pretrain-lvd1689m``
``idsim-release-dinov3-vitb16``     ``..._dinov3_vitb16_cls_patch``  ``facebook/dinov3-vitb16-pretrain-lvd1689m``
``idsim-release-dinov2-vitl14``     ``..._dinov2_vitl14_cls_patch``  ``facebook/dinov2-large`` (Meta's dinov2_vitl14)
``idsim-release-dinov2-vitb14``     ``..._dinov2_vitb14_cls_patch``  ``facebook/dinov2-base`` (Meta's dinov2_vitb14)
==================================  ===============================  ==========================================

``idsim-release`` (DINOv3 ViT-L/16) is the paper's model (its Figure 25 / Table 2 rows); the other
three are rows of their own, labelled by backbone (the paper's backbone ablation, Supp. Table 7,
scores them on the unpublished validation sets only).

:func:`load_base` reads a base through :mod:`nearid_lib.hub` and picks the class from its config
(``DINOv3ViTModel`` / ``Dinov2Model``). A DINOv2 base at 448 px (32 x 32 patches of 14) runs with
its 37 x 37 position embeddings interpolated as Meta's code does (:func:`meta_dinov2_positions`:
bicubic at scale ``(n + 0.1) / 37``, no antialiasing) where ``transformers`` resamples to the size
directly; DINOv3 has rotary positions (nothing to interpolate). The features, heads and
normalisation are the same for all four (:mod:`.release_model`); that the authors' extractor reads
the last block of the DINOv2 models too, and feeds them 448 px squares, is carried over from their
DINOv3 code (their DINOv2 path could not be read here).
"""
from __future__ import annotations

import math
import types
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..hub import model_source
from ..models.backbones import hub_from_pretrained

__all__ = ["ReleaseSpec", "RELEASES", "PRIMARY", "spec_for", "load_base", "meta_dinov2_positions"]


@dataclass(frozen=True)
class ReleaseSpec:
    """One released checkpoint: its registry ``name``, hub ``repo``, transformers ``base``, backbone
    ``family`` ("dinov3" | "dinov2") and the ``label`` its rows carry."""

    name: str
    repo: str
    base: str
    family: str
    label: str


RELEASES: dict[str, ReleaseSpec] = {s.name: s for s in (
    ReleaseSpec("idsim-release", "chaenayo/id-sim_dinov3_vitl16_cls_patch", "facebook/dinov3-vitl16-pretrain-lvd1689m",
                "dinov3", "ID-Sim (DINOv3 ViT-L/16, the paper's)"),
    ReleaseSpec("idsim-release-dinov3-vitb16", "chaenayo/id-sim_dinov3_vitb16_cls_patch",
                "facebook/dinov3-vitb16-pretrain-lvd1689m", "dinov3", "ID-Sim (DINOv3 ViT-B/16)"),
    ReleaseSpec("idsim-release-dinov2-vitl14", "chaenayo/id-sim_dinov2_vitl14_cls_patch", "facebook/dinov2-large",
                "dinov2", "ID-Sim (DINOv2 ViT-L/14)"),
    ReleaseSpec("idsim-release-dinov2-vitb14", "chaenayo/id-sim_dinov2_vitb14_cls_patch", "facebook/dinov2-base",
                "dinov2", "ID-Sim (DINOv2 ViT-B/14)"),
)}
PRIMARY = "idsim-release"


def spec_for(repo_or_name: str) -> ReleaseSpec | None:
    """The spec whose registry name or repository is ``repo_or_name`` (None: a user's own folder)."""
    s = str(repo_or_name)
    return RELEASES.get(s) or next((r for r in RELEASES.values() if r.repo == s), None)


def meta_dinov2_positions(self, embeddings: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Meta's DINOv2 position-embedding interpolation (``interpolate_offset=0.1``,
    ``interpolate_antialias=False``, its torch.hub models' settings) as a ``Dinov2Embeddings``
    method: bicubic with scale factors ``(rows + 0.1) / M`` and ``(cols + 0.1) / M`` (M x M trained
    positions) instead of resizing to the size; unchanged at the trained grid of a square image."""
    n_patch, n_pos = embeddings.shape[1] - 1, self.position_embeddings.shape[1] - 1
    if n_patch == n_pos and height == width:
        return self.position_embeddings
    pos = self.position_embeddings.float()
    cls, patch = pos[:, :1], pos[:, 1:]
    dim = embeddings.shape[-1]
    p = self.patch_embeddings.patch_size
    p = p[0] if isinstance(p, (tuple, list)) else int(p)
    rows, cols = height // p, width // p
    m = int(math.sqrt(n_pos))
    grid = patch.reshape(1, m, m, dim).permute(0, 3, 1, 2)                       # [1, D, M, M]
    grid = F.interpolate(grid, scale_factor=((rows + 0.1) / m, (cols + 0.1) / m), mode="bicubic", antialias=False)
    if tuple(grid.shape[-2:]) != (rows, cols):
        raise ValueError(f"DINOv2 position interpolation gave {tuple(grid.shape[-2:])}, expected {(rows, cols)}")
    out = torch.cat((cls, grid.permute(0, 2, 3, 1).reshape(1, -1, dim)), dim=1)
    return out.to(self.position_embeddings.dtype)


def load_base(base: str, name: str = "idsim-release") -> nn.Module:
    """The transformers backbone of a release (repo id or ``save_pretrained`` folder, through
    :mod:`nearid_lib.hub`), float32, eval: ``DINOv3ViTModel`` or ``Dinov2Model`` by its config's
    ``model_type``; a DINOv2 base interpolates positions as Meta's (:func:`meta_dinov2_positions`)."""
    from transformers import AutoConfig, Dinov2Model, DINOv3ViTModel

    path, kw = model_source(str(base))
    kind = AutoConfig.from_pretrained(path, **kw).model_type
    classes = {"dinov3_vit": DINOv3ViTModel, "dinov2": Dinov2Model}
    if kind not in classes:
        raise TypeError(f"{name}: base {base!r} is a {kind!r} model; a released ID-Sim adapts DINOv3 or DINOv2")
    model = hub_from_pretrained(classes[kind], name, str(base), None, str(base)).float().eval()
    if kind == "dinov2":
        model.embeddings.interpolate_pos_encoding = types.MethodType(meta_dinov2_positions, model.embeddings)
    return model
