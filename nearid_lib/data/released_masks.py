"""The authors' foreground masks of the released NearID views, and CLIPSeg only where a view has none.

Today's card of ``Aleksandar/NearID`` ships ``masks1..3``: one foreground mask per view, aligned
with ``images1..3`` (the "oracle segmentation mask" of NearID App. E.7's FG-only rows). Every place
the paper uses a foreground (Table 7, the FG half of the token store, the judge's FG pairs) reads
the mask curation wrote for a view, so curation decides once, per view, where it comes from
(``mask_source``): ``released`` when the row carries a non-empty mask for the view, ``clipseg``
(:class:`~nearid_lib.data.masks.ObjectMasker`) when it does not (the earlier card has no masks at
all). :class:`LazyMasker` loads CLIPSeg on the first view that needs it, so a release whose every
view is masked never loads (or needs) the model.

How a released mask becomes a foreground (``world.released_masks``, versioned in :data:`RULES`):

- ``"authors"`` (default): the authors' evaluation (``evaluation/sim_test.py`` of Gorluxor/NearID,
  FG-only path): the grey mask is cleaned -- 5x5 binomial blur (OpenCV's ``GaussianBlur`` with
  ``sigma=0``: weights [1, 4, 6, 4, 1] / 16 per axis, reflect-101 border, rounded half up),
  foreground where the blurred value is > 10, a 5x5 closing then a 5x5 opening, and only the largest
  outer component kept, its holes filled -- then binarised at > 0. Re-implemented here with numpy and
  scipy (the project does not depend on OpenCV): the blur and the morphology are exact; "largest"
  counts the component's filled pixels where OpenCV measures its contour polygon, which can only
  differ between two components of nearly equal size.
- ``"binary"``: the mask binarised at > 0 (the authors' ``binarize_mask``) without the clean-up.
- ``"clipseg"``: the release's masks ignored, every view masked by CLIPSeg (the path before the
  release shipped masks; for comparisons).

The background outside the mask is then filled with black (``features.variants.fill_background``,
variant ``fg``), as the authors keep the foreground and fill black. A mask whose size differs from
its view's is resized with nearest-neighbour sampling, as the authors do, when the aspect ratios
agree (counted in the manifest); otherwise it is an error naming the row and field. A released mask
that is empty after the rule falls back to CLIPSeg (its reason counted apart).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from PIL import Image
from scipy import ndimage

from .released_schema import PositivesLayout, pil_from_value
from .schema import DataError

__all__ = ["RULES", "clean_mask", "binarize_released", "released_mask", "mask_cells", "LazyMasker"]

RULES = {
    "authors": "authors' FG clean-up (binomial 5x5 blur > 10, close 5x5, open 5x5, largest outer component "
               "filled) then > 0; v1",
    "binary": "released mask > 0; v1",
    "clipseg": "every view masked by CLIPSeg (the release's masks ignored)",
}
_BINOMIAL = np.array([1, 4, 6, 4, 1], dtype=np.int64)
_SQUARE5 = np.ones((5, 5), dtype=bool)


def _blur_binomial(grey: np.ndarray) -> np.ndarray:
    """OpenCV's ``GaussianBlur(grey, (5, 5), 0)`` on uint8, bit for bit: separable [1,4,6,4,1]/16
    with a reflect-101 border (numpy's ``reflect``), the sum of 256ths rounded half up."""
    x = np.pad(grey.astype(np.int64), 2, mode="reflect")
    rows = sum(w * x[:, i:i + grey.shape[1]] for i, w in enumerate(_BINOMIAL))        # [H+4, W]
    both = sum(w * rows[i:i + grey.shape[0], :] for i, w in enumerate(_BINOMIAL))     # [H, W], 256ths
    return ((both + 128) >> 8).astype(np.uint8)


def clean_mask(grey: np.ndarray) -> np.ndarray:
    """The authors' clean-up of a grey (uint8) mask, as a bool mask (module docstring, rule
    ``"authors"``): blur, > 10, closing, opening (OpenCV's borders: outside pixels never erode or
    dilate), the largest 8-connected component with its holes filled."""
    m = _blur_binomial(np.asarray(grey, dtype=np.uint8)) > 10
    m = ndimage.binary_erosion(ndimage.binary_dilation(m, _SQUARE5, border_value=0), _SQUARE5, border_value=1)
    m = ndimage.binary_dilation(ndimage.binary_erosion(m, _SQUARE5, border_value=1), _SQUARE5, border_value=0)
    labels, n = ndimage.label(m, structure=np.ones((3, 3), dtype=bool))
    if n == 0:
        return m
    filled = [ndimage.binary_fill_holes(labels == k) for k in range(1, n + 1)]
    sizes = [int(f.sum()) for f in filled]
    return filled[int(np.argmax(sizes))]                 # first of equal sizes: raster order


def binarize_released(grey: np.ndarray, rule: str) -> np.ndarray:
    """A released mask (uint8 grey) as a bool foreground under ``rule`` (``"authors"`` or ``"binary"``)."""
    if rule == "authors":
        return clean_mask(grey)
    if rule == "binary":
        return np.asarray(grey) > 0
    raise ValueError(f"released mask rule must be one of {sorted(set(RULES) - {'clipseg'})}, got {rule!r}")


def _grey(im: Image.Image) -> np.ndarray:
    if im.mode in ("I;16", "I;16B", "I;16L", "I"):
        return (np.asarray(im).astype(np.float64) / 257.0).round().clip(0, 255).astype(np.uint8)
    return np.asarray(im.convert("L"))


def released_mask(value: Any, where: str, size: tuple[int, int], rule: str) -> tuple[np.ndarray | None, str]:
    """The foreground of one released mask cell for a view of ``size`` (W, H): ``(mask, status)``,
    status ``"released"`` (``mask`` bool [H, W]), ``"missing"`` (no cell) or ``"empty"`` (nothing
    left after ``rule``); ``mask`` is None unless released. A mask of another size is resized
    (nearest) when its aspect ratio matches the view's (status ``"released-resized"``), else a
    :class:`DataError` names ``where``."""
    im = pil_from_value(value, where)
    if im is None:
        return None, "missing"
    status = "released"
    if im.size != size:
        ar_m, ar_v = im.size[0] / im.size[1], size[0] / size[1]
        if abs(ar_m / ar_v - 1) > 0.01:
            raise DataError(f"{where}: mask size {im.size} has another aspect ratio than its view {size}")
        im, status = im.resize(size, Image.NEAREST), "released-resized"
    m = binarize_released(_grey(im), rule)
    return (m, status) if m.any() else (None, "empty")


def mask_cells(ds, layout: PositivesLayout) -> dict[str, int]:
    """Counts over the views of a positives dataset (``datasets.Dataset``, image columns undecoded)
    read from the arrow columns' validity alone (no image decoded): ``views`` (view cells present),
    ``with_mask`` (of those, with a mask cell) and ``without_mask``."""
    table = ds.data.table if hasattr(ds.data, "table") else ds.data
    views = with_mask = 0
    for k in (1, 2, 3):
        v = _present(table.column(f"{layout.image_prefix}{k}"))
        views += int(v.sum())
        if layout.mask_prefix is not None:
            with_mask += int((v & _present(table.column(f"{layout.mask_prefix}{k}"))).sum())
    return {"views": views, "with_mask": with_mask, "without_mask": views - with_mask}


def _present(col) -> np.ndarray:
    """Per row: the image cell holds bytes or a path (an arrow ``struct<bytes, path>`` column)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not pa.types.is_struct(col.type):
        return np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)
    out = np.zeros(len(col), dtype=bool)
    for f in ("bytes", "path"):
        if col.type.get_field_index(f) < 0 or pa.types.is_null(col.type.field(f).type):
            continue
        n = pc.fill_null(pc.binary_length(pc.struct_field(col, f)), 0)
        out |= np.asarray(n.to_numpy(zero_copy_only=False)) > 0
    return out & np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)


class LazyMasker:
    """A masker built by ``factory()`` on its first call (CLIPSeg loads only when a view needs it).
    ``fingerprint`` (given, without loading anything) keys curation's progress folder; ``loaded``
    says whether the model was ever built."""

    def __init__(self, factory: Callable[[], Callable], fingerprint: str):
        self._factory, self._masker, self.fingerprint = factory, None, str(fingerprint)

    @property
    def loaded(self) -> bool:
        return self._masker is not None

    @property
    def last_fallback(self) -> list[bool]:
        return list(getattr(self._masker, "last_fallback", []) or [])

    def __call__(self, images: Sequence, prompts: Sequence[str]) -> list:
        if self._masker is None:
            self._masker = self._factory()
        return self._masker(images, prompts)
