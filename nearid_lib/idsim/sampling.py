"""The inputs of ID-Sim training (ID-Sim App. A.1, A.2.1, C.4): balanced instance sampling over
source datasets (the mini world's classes), identity-preserving context edits (the mini analogue of
S2a's Qwen-Image-Edit background/lighting edits: object pixels kept, background redrawn, lighting
changed) and the App. C.4 augmentations, each with an explicit seed.

A triplet refers to an image by a *key*: a dataset-relative path, ``"ctx:<relpath>"`` for the
context edit of that image, or ``"edit:<kind>:<relpath>"`` for one of the mild identity-preserving
Photoshop-like edits of :func:`preserving_edit` (the Identity Validation positives,
:mod:`.validation`); :func:`load_key` resolves all three."""
from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import pandas as pd
from PIL import Image, ImageEnhance, ImageFilter, ImageOps

from ..data.backgrounds import render_background, sample_background_spec
from ..data.curation import balanced_allocation
from ..runtime.seeding import derive_seed, make_rng

if TYPE_CHECKING:
    from ..data import NearIDData

__all__ = ["CTX", "EDIT", "PRESERVING_EDITS", "balanced_quotas", "unbalanced_quotas", "balanced_instances",
           "context_edit", "preserving_edit", "edit_key", "augment", "load_key"]

CTX = "ctx:"      # key prefix of a context edit of the image that follows
EDIT = "edit:"    # key prefix "edit:<kind>:<relpath>" of an identity-preserving edit (:func:`preserving_edit`)
PRESERVING_EDITS = ("photometric", "flip", "crop")
_NEEDS_MASK = frozenset({"crop"})
_PREFIX = re.compile(r"^([A-Za-z][\w.-]+):")       # "<name>:" before any "/" (not a dataset path)


def balanced_quotas(counts: Mapping[str, int], total: int) -> dict[str, int]:
    """Per-dataset instance quotas of ID-Sim App. A.1 steps 1-3 (equal shares; datasets smaller
    than their share give everything and leave; the rest is re-divided until spent; integer
    remainders one each in name order). Delegates to the data package's
    :func:`nearid_lib.data.curation.balanced_allocation` (one implementation in the project).

    Returns {dataset: quota} with quota <= counts[dataset] and sum = min(total, sum(counts))."""
    if total < 0:
        raise ValueError(f"balanced_quotas: total must be >= 0, got {total}")
    bad = {k: v for k, v in counts.items() if int(v) < 0}
    if bad:
        raise ValueError(f"balanced_quotas: negative instance counts {bad}")
    return {str(k): int(v) for k, v in balanced_allocation(dict(counts), int(total)).items()}


def unbalanced_quotas(counts: Mapping[str, int], total: int, shares: Sequence[float]) -> dict[str, int]:
    """Quotas of a *raw, skewed* pool (ID-Sim Table 3 "no balancing"): dataset i (name order) gets a
    share of ``total`` proportional to ``shares`` spread evenly over the datasets (with n datasets and
    m shares sorted descending, dataset i takes share ``round(i (m-1)/(n-1))``), capped by its count;
    largest-remainder rounding, leftovers to the datasets with room in share order."""
    names = sorted(counts)
    if not names:
        return {}
    sh = sorted((float(v) for v in shares), reverse=True)
    if not sh or min(sh) <= 0:
        raise ValueError(f"unbalanced_quotas: shares must be positive, got {list(shares)}")
    pick = [sh[round(i * (len(sh) - 1) / max(len(names) - 1, 1))] for i in range(len(names))]
    w = np.asarray(pick) / sum(pick)
    total = min(int(total), sum(int(counts[k]) for k in names))
    raw = w * total
    q = np.minimum(np.floor(raw).astype(int), [int(counts[k]) for k in names])
    for i in np.argsort(-(raw - np.floor(raw)), kind="stable"):
        if q.sum() >= total:
            break
        if q[i] < counts[names[i]]:
            q[i] += 1
    for i in np.argsort(-w, kind="stable"):              # capped datasets leave room to the others
        while q.sum() < total and q[i] < counts[names[i]]:
            q[i] += 1
    return {k: int(v) for k, v in zip(names, q)}


def balanced_instances(instances: pd.DataFrame, total: int, rng: np.random.Generator,
                       group_col: str = "class_name", id_col: str = "id", balanced: bool = True,
                       shares: Sequence[float] | None = None) -> pd.DataFrame:
    """Sample ``total`` unique instances with :func:`balanced_quotas` over ``group_col`` (the
    paper's source datasets; the mini world's classes), or with :func:`unbalanced_quotas` of
    ``shares`` when ``balanced`` is False. Rows keep their original order."""
    for c in (group_col, id_col):
        if c not in instances.columns:
            raise ValueError(f"balanced_instances: column {c!r} missing; have {list(instances.columns)}")
    counts = instances.groupby(group_col)[id_col].nunique().to_dict()
    if balanced:
        quotas = balanced_quotas(counts, total)
    else:
        if shares is None:
            raise ValueError("balanced_instances: balanced=False needs the raw pool's shares")
        quotas = unbalanced_quotas(counts, total, shares)
    keep = []
    for g, q in sorted(quotas.items()):
        ids = sorted(instances.loc[instances[group_col] == g, id_col].unique())
        keep.extend(np.asarray(ids)[rng.permutation(len(ids))[:q]].tolist())
    keep = set(keep)
    return instances[instances[id_col].isin(keep)].copy()


def context_edit(image: Image.Image, mask: np.ndarray, seed: int) -> Image.Image:
    """Identity-preserving context edit (mini analogue of ID-Sim S2a): the object's pixels are
    kept, the background is replaced by a freshly drawn (train-pool) world background, and a global
    lighting change (gain, colour temperature, contrast) is applied to the whole scene."""
    rng = make_rng(seed, "context_edit")
    arr = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0          # [H, W, 3]
    H, W = arr.shape[:2]
    m = np.asarray(mask, dtype=bool)
    if m.shape != (H, W):
        raise ValueError(f"context_edit: mask {m.shape} does not match image {(H, W)}")
    bg = render_background(sample_background_spec(rng, held_out=False), H)[:H, :W]
    out = np.where(m[..., None], arr, bg)
    gain = rng.uniform(0.75, 1.2)
    temp = rng.uniform(-0.12, 0.12)                                              # warm (+) / cool (-)
    contrast = rng.uniform(0.8, 1.15)
    return _relight(out, gain, temp, contrast)


def _relight(arr: np.ndarray, gain: float, temp: float, contrast: float) -> Image.Image:
    """Global lighting change of a float RGB array in [0, 1]: contrast about mid-grey, then
    brightness ``gain`` and colour temperature ``temp`` (red x (1 + temp), blue x (1 - temp))."""
    out = (arr - 0.5) * contrast + 0.5
    out = out * gain * np.array([1 + temp, 1.0, 1 - temp], dtype=np.float32)
    return Image.fromarray((np.clip(out, 0, 1) * 255).round().astype(np.uint8))


def _signed(rng: np.random.Generator, lo: float, hi: float) -> float:
    """A magnitude drawn from U(lo, hi) with a random sign (an edit that is never a no-op)."""
    return float(rng.uniform(lo, hi) * rng.choice([-1.0, 1.0]))


def _crop_window(rng: np.random.Generator, size: int, frac: float, lo: int, hi: int) -> tuple[int, int]:
    """(start, length) of a crop of ``frac`` x ``size`` along one axis that holds [lo, hi) when it
    fits (uniform over such starts), else is centred on it; always inside [0, size)."""
    n = max(1, round(size * frac))
    a, b = max(0, hi - n), min(lo, size - n)
    start = int(rng.integers(a, b + 1)) if a <= b else int(np.clip(round((lo + hi - n) / 2), 0, size - n))
    return start, n


def preserving_edit(image: Image.Image, kind: str, seed: int, mask: np.ndarray | None = None) -> Image.Image:
    """A mild identity-preserving Photoshop-like edit of ``image`` (same size, deterministic in
    ``seed``), the positives of ID-Sim's Identity Validation (Supp. B.1):

    * ``"photometric"``: Brightness/Contrast and Colour Balance - brightness gain and contrast each
      1 +- U(0.05, 0.15), colour temperature +- U(0.02, 0.05) (red x (1 + t), blue x (1 - t));
    * ``"flip"``: horizontal mirror (``seed`` unused);
    * ``"crop"``: crop to U(0.80, 0.90) of the width and height (same aspect), placed uniformly
      among the windows that keep the object's bounding box (``mask``, needed) whole, rescaled
      bicubic to the original size."""
    img = image.convert("RGB")
    rng = make_rng(seed, "preserving_edit", kind)
    if kind == "photometric":
        gain, contrast = 1 + _signed(rng, 0.05, 0.15), 1 + _signed(rng, 0.05, 0.15)
        return _relight(np.asarray(img, dtype=np.float32) / 255.0, gain, _signed(rng, 0.02, 0.05), contrast)
    if kind == "flip":
        return ImageOps.mirror(img)
    if kind == "crop":
        W, H = img.size
        m = np.asarray(mask, dtype=bool) if mask is not None else None
        if m is None or m.shape != (H, W) or not m.any():
            raise ValueError(f"preserving_edit: 'crop' needs the object's non-empty mask of shape {(H, W)}")
        ys, xs = np.nonzero(m)
        frac = float(rng.uniform(0.80, 0.90))
        x0, cw = _crop_window(rng, W, frac, int(xs.min()), int(xs.max()) + 1)
        y0, ch = _crop_window(rng, H, frac, int(ys.min()), int(ys.max()) + 1)
        return img.crop((x0, y0, x0 + cw, y0 + ch)).resize((W, H), Image.BICUBIC)
    raise ValueError(f"preserving_edit: unknown edit {kind!r}; valid: {', '.join(PRESERVING_EDITS)}")


def edit_key(kind: str, relpath: str) -> str:
    """Key of the ``kind`` :func:`preserving_edit` of the dataset image ``relpath``."""
    if kind not in PRESERVING_EDITS:
        raise ValueError(f"edit_key: unknown edit {kind!r}; valid: {', '.join(PRESERVING_EDITS)}")
    return f"{EDIT}{kind}:{relpath}"


def augment(image: Image.Image, seed: int) -> Image.Image:
    """ID-Sim App. C.4 augmentations with an explicit seed: random resized crop (scale 0.9-1.0,
    aspect 1:1, bicubic, back to the input size); colour jitter (brightness 0.2, contrast 0.2,
    saturation 0.08) with p=0.8; Gaussian blur (sigma 0.05-0.6) with p=0.5."""
    rng = make_rng(seed, "augment")
    img = image.convert("RGB")
    W, H = img.size
    s = math.sqrt(rng.uniform(0.9, 1.0))
    cw, ch = max(1, round(W * s)), max(1, round(H * s))
    x0, y0 = int(rng.integers(0, W - cw + 1)), int(rng.integers(0, H - ch + 1))
    img = img.crop((x0, y0, x0 + cw, y0 + ch)).resize((W, H), Image.BICUBIC)
    if rng.random() < 0.8:
        for enh, amt in ((ImageEnhance.Brightness, 0.2), (ImageEnhance.Contrast, 0.2),
                         (ImageEnhance.Color, 0.08)):
            img = enh(img).enhance(float(rng.uniform(1 - amt, 1 + amt)))
    if rng.random() < 0.5:
        img = img.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.05, 0.6))))
    return img


def _mask_of(data: NearIDData, key: str) -> str | None:
    """Mask path of a world image (positives views; distractors share their view's mask)."""
    table = getattr(data, "_idsim_masks", None)
    if table is None:
        table = {}
        for _, r in data.positives.iterrows():
            for k in (1, 2, 3):
                if r[f"img{k}"]:
                    table[r[f"img{k}"]] = r[f"mask{k}"]
        if data.mtg is not None:
            for _, r in data.mtg.iterrows():
                for k in (1, 2):
                    table[r[f"image_{k}_original"]] = r[f"image_{k}_object_mask"]
        data._idsim_masks = table
    return table.get(key)


def _object_mask(data: NearIDData, rel: str, key: str) -> np.ndarray:
    mrel = _mask_of(data, rel)
    if mrel is None:
        raise ValueError(f"load_key({key!r}): no mask known for {rel!r} (this edit needs the object mask)")
    return data.mask(mrel, where=f"load_key({key!r})")


def load_key(data: NearIDData, key: str, seed: int = 0) -> Image.Image:
    """PIL image for a key: a relative path of the dataset, ``"ctx:<relpath>"`` (its context edit)
    or ``"edit:<kind>:<relpath>"`` (its :func:`preserving_edit`), edits deterministic in ``seed``
    and the key. Raises ValueError naming the key on an unknown prefix or edit, a missing mask or
    file (:class:`~nearid_lib.data.DataError`)."""
    where = f"load_key({key!r})"
    if key.startswith(CTX):
        rel = key[len(CTX):]
        return context_edit(data.image(rel, where), _object_mask(data, rel, key), derive_seed("ctx", rel, base=seed))
    if key.startswith(EDIT):
        kind, _, rel = key[len(EDIT):].partition(":")
        if kind not in PRESERVING_EDITS or not rel:
            raise ValueError(f"{where}: unknown edit {kind!r} or no path; keys read 'edit:<kind>:<relpath>' "
                             f"with kind in {', '.join(PRESERVING_EDITS)}")
        mask = _object_mask(data, rel, key) if kind in _NEEDS_MASK else None
        return preserving_edit(data.image(rel, where), kind, derive_seed("edit", kind, rel, base=seed), mask)
    pre = _PREFIX.match(key)
    if pre:
        raise ValueError(f"{where}: unknown key prefix {pre.group(1) + ':'!r}; valid: {CTX!r}, {EDIT!r} "
                         f"or a dataset-relative path")
    return data.image(key, where)
