"""Embeddings of ID-Sim models (and of their frozen backbone) over a shared prefix cache.

Kinds (all L2-normalised):

* ``"cls"``: the projected CLS embedding, the ID-Sim metric of the paper's main results (Fig. 4/25);
* ``"patch"``: the aggregated patch embedding, mean of the L2-normalised projected patch tokens
  (Table 2b's "similarity computed using patch embeddings", aggregated form);
* ``"joint"``: ``[cls, patch] / sqrt(2)``, the "joint CLS+patch embedding" every ablation of Supp.
  B.3 is evaluated with (cosine of joint = mean of the CLS and patch cosines);
* ``"frozen"``: the backbone's pooled output with the LoRA adapters disabled (EfficientNet-Lite GAP);
* ``"frozen_patch"``: mean of the L2-normalised raw backbone tokens (DINOv3's patch row of Table 2b).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .prefix import PrefixStore

__all__ = ["KINDS", "model_embeddings", "token_maps", "merge_embeddings"]

KINDS = ("cls", "patch", "joint", "frozen", "frozen_patch")


@torch.no_grad()
def model_embeddings(model, store: PrefixStore, keys: Sequence[str], kinds: Sequence[str] = ("cls",),
                     batch_size: int = 64) -> dict[str, dict[str, np.ndarray]]:
    """``{kind: {key: vector}}`` for the ``kinds`` of :data:`KINDS`, one pass of the adapted suffix
    per batch over ``store``'s cached prefix features (variant 0: clean images; a missing one is
    computed by ``model``, :meth:`PrefixStore.using`)."""
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ValueError(f"model_embeddings: unknown kind(s) {bad}; valid: {', '.join(KINDS)}")
    keys = list(dict.fromkeys(keys))
    model.eval()
    with store.using(model):
        store.ensure(keys, [0])
    out: dict[str, list[torch.Tensor]] = {k: [] for k in kinds}
    need_frozen = any(k.startswith("frozen") for k in kinds)
    need_model = any(not k.startswith("frozen") for k in kinds)
    for i in range(0, len(keys), batch_size):
        f = store.get(keys[i:i + batch_size])
        if need_frozen:
            with model.adapters_disabled():
                cls0, tok0 = model.raw_from_prefix(f)
            if "frozen" in out:
                out["frozen"].append(F.normalize(cls0.float(), dim=-1))
            if "frozen_patch" in out:
                out["frozen_patch"].append(F.normalize(F.normalize(tok0.float(), dim=-1).mean(1), dim=-1))
        if need_model:
            o = model.from_prefix(f)
            c = F.normalize(o.pooled.float(), dim=-1)
            p = F.normalize(F.normalize(o.tokens.float(), dim=-1).mean(1), dim=-1)
            for kind, v in (("cls", c), ("patch", p), ("joint", torch.cat([c, p], 1) / np.sqrt(2))):
                if kind in out:
                    out[kind].append(v)
    return {k: dict(zip(keys, torch.cat(v).cpu().numpy())) for k, v in out.items()}


@torch.no_grad()
def token_maps(model, store: PrefixStore, keys: Sequence[str], frozen: bool = False) -> np.ndarray:
    """L2-normalised token maps [N, h*w, D] of ``keys``: the projected patch tokens, or the raw
    backbone tokens with ``frozen`` (adapters disabled); missing prefix features are computed by
    ``model`` (:meth:`PrefixStore.using`)."""
    out = []
    with store.using(model):
        store.ensure(keys, [0])
    for i in range(0, len(keys), 32):
        f = store.get(list(keys[i:i + 32]))
        if frozen:
            with model.adapters_disabled():
                _, tok = model.raw_from_prefix(f)
        else:
            tok = model.from_prefix(f).tokens
        out.append(F.normalize(tok.float(), dim=-1).cpu().numpy())
    return np.concatenate(out)


def merge_embeddings(*parts: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, np.ndarray]]:
    """Union of several ``{encoder: {key: vector}}`` mappings (later ones win on a name clash)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for p in parts:
        out.update({k: dict(v) for k, v in p.items()})
    return out
