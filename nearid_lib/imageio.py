"""The one image loader of the library: every entry point that takes images (``Encoder.embed`` /
``encode``, ``rank_generator``, the datasets, the feature caches, ``score_encoder``) turns them into
8-bit RGB PIL images here, with one documented rule::

    from nearid_lib.imageio import load_image, load_images, load_mask
    im = load_image("photo.png")            # a path, a PIL image, a numpy array or a torch tensor
    ims = load_images([path, pil, array])   # a list of any of those (or one [N, ...] batch)

The rule (``to_rgb``):

* **Files** are decoded completely (a truncated or corrupt file fails here, and the error names
  the file) and turned upright by their EXIF orientation tag (phone photos).
* **Alpha** (``RGBA``, ``LA``, ``PA``, palette images with a transparent colour) is composited onto
  **black**: ``rgb * alpha / 255``. Hidden pixels therefore never reach an encoder, and an
  object cut out with an alpha channel looks exactly like NearID's foreground-only evaluation,
  which blacks out the background with the object mask (``features.variants``, variant ``"fg"``).
* **16-bit and 32-bit integer images** (``I;16*``, ``I``, ``uint16`` arrays) are *scaled* to 8 bit
  by their bit depth (``/257`` for 16 bit), never saturated; 32-bit integer images whose values
  fit in 16 bit are treated as 16 bit. **Float** images and arrays are read as 0..1 when their
  maximum is <= 1, else as 0..255; negative or non-finite values are an error (a normalised
  tensor is not an image).
* Grayscale, palette, CMYK and the other PIL modes are converted to RGB.

Arrays and tensors: ``[H, W]``, ``[H, W, C]`` or ``[C, H, W]`` with C in 1, 3, 4 (a numpy array
is read channels-last unless only its first axis can be channels; a torch tensor is read
channels-first, torchvision's convention, unless only its last axis can be channels); a 4-D array
or tensor is a batch (:func:`load_images`). ``bool`` arrays are 0/255. Every problem raises
:class:`ImageError` (a ``ValueError``) naming the file or the position in the list.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

__all__ = ["ImageError", "load_image", "load_images", "as_sequence", "load_mask", "to_rgb", "composite_on_black",
           "ImageSource"]

ImageSource = Any   # str | os.PathLike | PIL.Image.Image | np.ndarray | torch.Tensor

_ALPHA_MODES = {"RGBA", "LA", "PA", "RGBa", "La"}


class ImageError(ValueError):
    """An image that cannot be read; the message names the file (or the item of a list)."""


def _tag(where: str) -> str:
    return f"{where}: " if where else ""


def composite_on_black(rgba: np.ndarray) -> np.ndarray:
    """``uint8 [H, W, 4] -> uint8 [H, W, 3]``: ``rgb * alpha / 255``, rounded (alpha = a soft
    foreground mask; fully transparent pixels become black)."""
    a = rgba[..., 3:4].astype(np.float64) / 255.0
    return np.rint(rgba[..., :3].astype(np.float64) * a).astype(np.uint8)


def _scale_to_8bit(arr: np.ndarray, kind: str, where: str) -> np.ndarray:
    """Integer or float pixel values -> uint8 by the documented rule (``kind``: "int16" | "int" |
    "float")."""
    if arr.dtype == np.uint8:
        return arr
    a = arr.astype(np.float64)
    if not np.isfinite(a).all():
        raise ImageError(f"{_tag(where)}image has non-finite (NaN/inf) pixel values")
    if a.size and a.min() < 0:
        raise ImageError(f"{_tag(where)}image has negative pixel values (min {a.min():.3g}): pass "
                         f"pixels in 0..1 (float) or 0..255 / 0..65535 (integer), not a normalised tensor")
    top = float(a.max()) if a.size else 0.0
    if kind == "float":
        a = a * 255.0 if top <= 1.0 else a
    elif kind == "int16":
        a = a / 257.0
    elif top > 65535:
        a = a / 16843009.0                 # full 32-bit range -> 8 bit
    elif top > 255:
        a = a / 257.0                      # 16-bit values stored in a wider integer type
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


def to_rgb(image: Image.Image, where: str = "") -> Image.Image:
    """An 8-bit RGB copy of a decoded PIL image by the module's rule (alpha onto black, 16-bit
    scaled, everything else converted)."""
    mode = image.mode
    if mode == "RGB":
        return image.copy()
    if mode == "P" and "transparency" in image.info:
        image, mode = image.convert("RGBA"), "RGBA"
    if mode in _ALPHA_MODES:
        return Image.fromarray(composite_on_black(np.asarray(image.convert("RGBA"))), "RGB")
    if mode.startswith("I;16") or mode in ("I", "F"):
        kind = "int16" if mode.startswith("I;16") else ("float" if mode == "F" else "int")
        a8 = _scale_to_8bit(np.asarray(image), kind, where)
        return Image.fromarray(np.stack([a8] * 3, axis=-1), "RGB")
    return image.convert("RGB")


def _open(path: str | os.PathLike, where: str, what: str = "image") -> Image.Image:
    """Decode a file completely and apply its EXIF orientation; errors name the file."""
    tag = _tag(where)
    try:
        with Image.open(path) as im:
            im.load()                                   # forces decoding: truncated files fail here
            return ImageOps.exif_transpose(im) if im.getexif().get(0x0112, 1) != 1 else im.copy()
    except FileNotFoundError:
        raise ImageError(f"{tag}{what} file not found: {path}") from None
    except IsADirectoryError:
        raise ImageError(f"{tag}{what} path is a folder, not a file: {path}") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise ImageError(f"{tag}cannot decode {what} {path} (corrupt or truncated?): {e}") from None


def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _hwc(arr: np.ndarray, channels_first: bool, where: str) -> np.ndarray:
    """``[H, W]`` / ``[H, W, C]`` / ``[C, H, W]`` -> ``[H, W, C]`` (C in 1, 3, 4)."""
    if arr.ndim == 2:
        return arr[..., None]
    if arr.ndim != 3:
        raise ImageError(f"{_tag(where)}expected an image of shape [H, W], [H, W, C] or [C, H, W], "
                         f"got {tuple(arr.shape)}")
    first, last = arr.shape[0] in (1, 3, 4), arr.shape[-1] in (1, 3, 4)
    if not (first or last):
        raise ImageError(f"{_tag(where)}cannot find the channel axis of shape {tuple(arr.shape)}: "
                         f"1, 3 or 4 channels, first or last")
    if first and (channels_first or not last):
        return np.moveaxis(arr, 0, -1)
    return arr


def _from_array(arr: np.ndarray, where: str, channels_first: bool = False) -> Image.Image:
    arr = _hwc(np.asarray(arr), channels_first, where)
    if arr.dtype == bool:
        arr = arr.astype(np.uint8) * 255
    if arr.dtype.kind == "f":
        arr = _scale_to_8bit(arr, "float", where)
    elif arr.dtype == np.uint16:
        arr = _scale_to_8bit(arr, "int16", where)
    elif arr.dtype.kind in "iu":
        arr = _scale_to_8bit(arr, "int", where)
    else:
        raise ImageError(f"{_tag(where)}unsupported array dtype {arr.dtype}")
    c = arr.shape[-1]
    if c == 1:
        arr = np.repeat(arr, 3, axis=-1)
    elif c == 4:
        arr = composite_on_black(arr)
    return Image.fromarray(np.ascontiguousarray(arr), "RGB")


def load_image(src: ImageSource, where: str = "") -> Image.Image:
    """One image as 8-bit RGB PIL from a path, a PIL image, a numpy array or a torch tensor
    (the module's rule). ``where`` prefixes error messages (e.g. ``"dataset x, row 3, field 'img1'"``)."""
    if isinstance(src, (str, os.PathLike)):
        return to_rgb(_open(src, where), where or str(src))
    if isinstance(src, Image.Image):
        try:
            src.load()
        except (OSError, SyntaxError, ValueError) as e:
            raise ImageError(f"{_tag(where)}cannot decode image (corrupt or truncated?): {e}") from None
        if src.getexif().get(0x0112, 1) != 1:
            src = ImageOps.exif_transpose(src)
        return to_rgb(src, where)
    if isinstance(src, np.ndarray):
        return _from_array(src, where)
    if _is_tensor(src):
        return _from_array(src.detach().cpu().numpy(), where, channels_first=True)
    raise ImageError(f"{_tag(where)}cannot read an image from {type(src).__name__}; pass a path, a "
                     f"PIL image, a numpy array or a torch tensor")


def as_sequence(srcs: ImageSource | Sequence[ImageSource]) -> Sequence[ImageSource]:
    """A sliceable sequence of image sources, nothing decoded yet: one source (a path, a PIL image,
    a 2-D/3-D array or tensor) becomes ``[source]``; a 4-D batch and a list stay as they are. Lets
    a caller load a long list batch by batch (:func:`load_images` on each slice)."""
    if isinstance(srcs, (str, os.PathLike, Image.Image)):
        return [srcs]
    if isinstance(srcs, np.ndarray) or _is_tensor(srcs):
        return srcs if srcs.ndim == 4 else [srcs]
    return srcs if isinstance(srcs, Sequence) else list(srcs)


def load_images(srcs: ImageSource | Sequence[ImageSource], where: str = "", start: int = 0) -> list[Image.Image]:
    """A list of 8-bit RGB PIL images from a list of image sources, one source (path or PIL
    image), or one 4-D batch (``[N, H, W, C]`` array, ``[N, C, H, W]`` tensor). An error names the
    file, or the item's index (counted from ``start``: the offset of a slice)."""
    out = []
    for i, s in enumerate(as_sequence(srcs)):
        path = isinstance(s, (str, os.PathLike))
        out.append(load_image(s, where if path else f"{where or 'images'}[{start + i}]"))
    return out


def load_mask(src: ImageSource, where: str = "", threshold: int = 128) -> np.ndarray:
    """A bool mask ``[H, W]`` (True = object): pixel >= ``threshold`` of the grayscale image
    (16-bit masks scaled like images; float masks in 0..1 scaled to 0..255 first; bool arrays as
    they are). Files get their EXIF orientation, as images do, so the two stay aligned."""
    if isinstance(src, np.ndarray) and src.dtype == bool and src.ndim == 2:
        return src.copy()
    if _is_tensor(src) and str(src.dtype) == "torch.bool" and src.ndim == 2:
        return src.detach().cpu().numpy().copy()
    if isinstance(src, (str, os.PathLike)):
        im = _open(src, where, "mask")
        where = where or str(src)
    elif isinstance(src, Image.Image):
        im = src
    else:
        im = None
    if im is not None:
        if im.mode.startswith("I;16") or im.mode in ("I", "F"):
            kind = "int16" if im.mode.startswith("I;16") else ("float" if im.mode == "F" else "int")
            arr = _scale_to_8bit(np.asarray(im), kind, where)
        else:
            arr = np.asarray(im.convert("L"))
    else:
        arr = np.asarray(load_image(src, where).convert("L"))
    return arr >= threshold
