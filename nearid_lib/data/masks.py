"""Object masks for the released NearID views, which ship none, computed with CLIPSeg.

The released positives dataset (``Aleksandar/NearID``) has images and text but no object masks,
while the foreground-only evaluation (NearID Table 7) and role-aware masking need one mask per
view. :class:`ObjectMasker` computes them with a real text-prompted segmentation model,
``CIDAS/clipseg-rd64-refined`` (``CLIPSegForImageSegmentation``), prompted with the identity's own
text (:func:`identity_prompt`: its ``category_description``, falling back to ``category``).

Mask rule (:func:`binarize`, versioned as :data:`MASK_RULE`)
    1. ``p = sigmoid(logits)`` on CLIPSeg's square output grid (352 px for the real model);
    2. ``p`` is resized bilinearly (``align_corners=False``) to the image's own ``(H, W)``; the
       processor squashed the image to a square, so this undoes the squash;
    3. a pixel is foreground when ``p > threshold`` (strict: ``p == 0.5`` at logit 0 is undecided);
    4. never empty: with ``k = max(1, ceil(min_frac * H * W))``, when fewer than ``k`` pixels pass,
       the mask is instead the ``k`` most probable pixels (ties broken in raster order, so the
       result is deterministic). Since every passing pixel is among the most probable, the fallback
       mask contains the thresholded one. :attr:`ObjectMasker.counts` counts how often it happened.

Loads go through :mod:`nearid_lib.hub` (``NEARID_HUB_DIR`` mirror or the hub), so a missing model is
a :class:`~nearid_lib.hub.HubError` naming the repository and its download command.
The tests' and the dry run's tiny CLIPSeg folder is written by :mod:`tools.tiny_models.clipseg`.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from PIL import Image

from ..hub import HubError, download_command, hub_dir, model_source, note_load, resolve

__all__ = ["DEFAULT_REPO", "MASK_RULE", "DEFAULT_MIN_FRAC", "ObjectMasker", "binarize",
           "identity_prompt", "masker_fingerprint"]

DEFAULT_REPO = "CIDAS/clipseg-rd64-refined"
# Bumped whenever the mapping logits -> mask changes, so mask caches keyed on the fingerprint
# are invalidated.
MASK_RULE = "sigmoid>bilinear(HxW)>p>thr; if <k=ceil(min_frac*HW) pass: top-k (raster ties); v1"
# NearID views are object-centric renders: an object covering < 1% of the view is implausible, so a
# mask that small means CLIPSeg missed the object, and the 1% most probable pixels are a better
# (non-empty) guess than nothing.
DEFAULT_MIN_FRAC = 0.01
# CLIP's text context length; long category descriptions are truncated to it.
MAX_TOKENS = 77   # CLIPSeg's text length (CLIP's 77 tokens)


def identity_prompt(category_description: str | None, category: str | None) -> str:
    """The text CLIPSeg is prompted with for one identity: its ``category_description`` when
    non-empty, else its ``category``. Raises ``ValueError`` when both are empty."""
    for text in (category_description, category):
        if isinstance(text, str) and text.strip():
            return " ".join(text.split())
    raise ValueError("identity has neither a category_description nor a category to prompt CLIPSeg with")


def _min_pixels(n_pixels: int, min_frac: float) -> int:
    # round() first: min_frac * n is often 7.000000000000001 in floating point, and ceil of that
    # would ask for one pixel more than the hand-computed count.
    return max(1, math.ceil(round(min_frac * n_pixels, 6)))


def binarize(prob: np.ndarray, threshold: float, min_frac: float) -> tuple[np.ndarray, bool]:
    """The mask rule on one probability map (see the module docstring): ``(mask, fell_back)``.

    ``mask`` is ``prob > threshold`` when at least ``k = max(1, ceil(min_frac * prob.size))`` pixels
    pass, else exactly the ``k`` most probable pixels (ties in raster order); ``fell_back`` says
    which. The mask is never empty."""
    prob = np.asarray(prob)
    if prob.ndim != 2 or prob.size == 0:
        raise ValueError(f"probability map must be a non-empty 2-D array, got shape {prob.shape}")
    k = _min_pixels(prob.size, min_frac)
    passing = prob > threshold
    if int(passing.sum()) >= k:
        return passing, False
    # Stable sort of -p keeps raster order among equal probabilities: deterministic ties.
    order = np.argsort(-prob.ravel(), kind="stable")[:k]
    mask = np.zeros(prob.size, dtype=bool)
    mask[order] = True
    return mask.reshape(prob.shape), True


def _check_params(threshold: float, min_frac: float, batch_size: int) -> None:
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    # min_frac = 0 would allow empty masks, which the rule exists to forbid.
    if not 0.0 < min_frac <= 1.0:
        raise ValueError(f"min_frac must be in (0, 1], got {min_frac}")
    if int(batch_size) < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")


class ObjectMasker:
    """One boolean object mask per image from CLIPSeg prompted with text (module docstring: rule).

    Build with :meth:`from_pretrained`. Calling it is batched (``batch_size`` images per forward),
    runs under ``torch.no_grad`` in eval mode, and is deterministic. :attr:`counts` reports how
    many masks were produced and how many needed the ``min_frac`` fallback."""

    def __init__(self, model, processor, *, repo_id: str = DEFAULT_REPO, source: str | None = None,
                 revision: str | None = None, device: str | torch.device = "cpu",
                 threshold: float = 0.5, min_frac: float = DEFAULT_MIN_FRAC, batch_size: int = 8):
        _check_params(threshold, min_frac, batch_size)
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.processor = processor
        self.repo_id = repo_id
        self.source = source if source is not None else repo_id
        self.revision = revision
        self.threshold = float(threshold)
        self.min_frac = float(min_frac)
        self.batch_size = int(batch_size)
        self.last_fallback: list[bool] = []
        self._counts = {"images": 0, "fallback": 0}
        self._weights_digest: str | None = None

    @classmethod
    def from_pretrained(cls, repo_id: str = DEFAULT_REPO, device: str | torch.device = "cpu",
                        threshold: float = 0.5, min_frac: float = DEFAULT_MIN_FRAC,
                        batch_size: int = 8) -> "ObjectMasker":
        """Load ``CLIPSegForImageSegmentation`` + ``CLIPSegProcessor`` of ``repo_id`` through the hub
        resolver (``$NEARID_HUB_DIR/<repo_id>`` when the mirror is set, a local folder path, or the
        hub). A model missing from the mirror, or a mirror folder that cannot be loaded, raises
        :class:`~nearid_lib.hub.HubError` naming the repository and its download command."""
        from transformers import CLIPSegForImageSegmentation, CLIPSegProcessor

        _check_params(threshold, min_frac, batch_size)
        path, kw = model_source(repo_id)  # raises HubError (with the download command) if absent
        note_load(repo_id, "masks")
        try:
            model = CLIPSegForImageSegmentation.from_pretrained(path, **kw)
            processor = CLIPSegProcessor.from_pretrained(path, **kw)
        except OSError as err:
            # A half-copied mirror folder (or no hub access) surfaces as a bare OSError from
            # transformers; say which repository it was and how to fetch it.
            raise HubError(f"CLIPSeg model {repo_id!r} could not be loaded from {path!r} "
                           f"({err.__class__.__name__}: {err}). Fetch it on a machine with internet:\n  "
                           + download_command(repo_id, "model", hub_dir())) from err
        revision = resolve(repo_id, "model").revision
        return cls(model, processor, repo_id=repo_id, source=path, revision=revision, device=device,
                   threshold=threshold, min_frac=min_frac, batch_size=batch_size)

    # ------------------------------------------------------------------ counts
    @property
    def counts(self) -> dict[str, int]:
        """``{"images": masks produced, "fallback": masks that used the min_frac rule}`` since
        construction or the last :meth:`reset_counts` (a caller reports the fallback rate)."""
        return dict(self._counts)

    def reset_counts(self) -> None:
        """Zero :attr:`counts`."""
        self._counts = {"images": 0, "fallback": 0}

    # ------------------------------------------------------------------ inference
    @torch.no_grad()
    def probabilities(self, images: Sequence[Image.Image], prompts: Sequence[str]) -> list[np.ndarray]:
        """Per image, CLIPSeg's foreground probability (float32) resized to the image's ``(H, W)``
        (steps 1-2 of the rule)."""
        images, prompts = list(images), list(prompts)
        if len(images) != len(prompts):
            raise ValueError(f"got {len(images)} images but {len(prompts)} prompts (one prompt per image)")
        for i, p in enumerate(prompts):
            if not isinstance(p, str) or not p.strip():
                raise ValueError(f"prompt {i} is empty; use identity_prompt() to build one")
        out: list[np.ndarray] = []
        for start in range(0, len(images), self.batch_size):
            chunk = [im.convert("RGB") for im in images[start:start + self.batch_size]]
            # padding="max_length": every prompt gets the same 77-token layout whatever it is
            # batched with, so a mask does not depend on its batch neighbours.
            inputs = self.processor(text=prompts[start:start + self.batch_size], images=chunk,
                                    padding="max_length", truncation=True, max_length=MAX_TOKENS,
                                    return_tensors="pt")
            inputs = {k: v.to(self.device) for k, v in inputs.items()}
            logits = self.model(**inputs).logits.float()
            # Older transformers squeezed a batch of one to (h, w); restore the batch axis.
            logits = logits.reshape(len(chunk), logits.shape[-2], logits.shape[-1])
            prob = torch.sigmoid(logits)
            for im, p in zip(chunk, prob):
                w, h = im.size
                up = torch.nn.functional.interpolate(p[None, None], size=(h, w), mode="bilinear",
                                                     align_corners=False)[0, 0]
                out.append(up.cpu().numpy().astype(np.float32, copy=False))
        return out

    def __call__(self, images: Sequence[Image.Image], prompts: Sequence[str]) -> list[np.ndarray]:
        """One bool mask of shape ``(H, W)`` per image (its own size), never empty; ``prompts[i]``
        names the object in ``images[i]``. Updates :attr:`counts` and :attr:`last_fallback`."""
        masks, fell = [], []
        for prob in self.probabilities(images, prompts):
            m, f = binarize(prob, self.threshold, self.min_frac)
            masks.append(m)
            fell.append(f)
        self.last_fallback = fell
        self._counts["images"] += len(masks)
        self._counts["fallback"] += sum(fell)
        return masks

    # ------------------------------------------------------------------ provenance
    def weights_digest(self) -> str:
        """SHA-256 of the loaded weights (every state-dict tensor, sorted by name): tells a real
        download from a tiny fixture saved under the same repo id, and two revisions apart."""
        if self._weights_digest is None:
            h = hashlib.sha256()
            for name, t in sorted(self.model.state_dict().items()):
                arr = t.detach().cpu().contiguous().reshape(-1)
                h.update(f"{name}:{arr.dtype}:{tuple(arr.shape)};".encode())
                h.update(arr.view(torch.uint8).numpy().tobytes() if arr.numel() else b"")
            self._weights_digest = h.hexdigest()
        return self._weights_digest

    def provenance(self) -> dict[str, Any]:
        """What determines the masks: model (repo id, revision, weights digest, input size),
        threshold, min_frac and the rule. Written next to cached masks; hashed by
        :func:`masker_fingerprint`."""
        ip = getattr(self.processor, "image_processor", None)
        size = getattr(ip, "size", None)
        return {"model": "CLIPSegForImageSegmentation", "repo_id": self.repo_id,
                "revision": self.revision, "weights_sha256": self.weights_digest(),
                "input_size": dict(size) if size is not None else None,
                "max_tokens": MAX_TOKENS, "threshold": self.threshold, "min_frac": self.min_frac,
                "rule": MASK_RULE}


def masker_fingerprint(masker: ObjectMasker) -> str:
    """A short stable key (16 hex chars) for a mask cache: the hash of
    :meth:`ObjectMasker.provenance` (model source and weights, threshold, min_frac, rule). Masks
    computed under a different model, threshold or rule get a different key."""
    blob = json.dumps(masker.provenance(), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
