"""Backgrounds of the NearID-mini world: real photographs that ship inside wheels, plus
procedural texture families, cropped/flipped/colour-jittered and mixed.

Why: the first prototype trained on only 7 source photos and its head memorised backgrounds.
Here every background is drawn from a *spec* (a small JSON-able dict: source, crop box, flip,
colour mixing matrix, texture mix, noise), so a background is (a) cheap to re-render at any
size, (b) exactly reproducible from the spec, and (c) assignable to a split. Photos and texture
families are partitioned into a train pool (train + val identities) and a held-out pool (test
identities), see :data:`HELD_OUT`.

Photos come from ``skimage.data`` (pooch-only ones fail offline and are skipped),
``sklearn.datasets.load_sample_images`` and matplotlib's ``grace_hopper.jpg``. When none load
(a stripped environment) the procedural textures alone still work.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np
from PIL import Image

__all__ = ["PHOTO_NAMES", "TEXTURE_FAMILIES", "HELD_OUT", "photo_pool", "available_sources",
           "sample_background_spec", "render_background", "defocus", "reframe"]

# (name, loader kind). Grayscale photos are tinted with a random two-colour map when drawn.
PHOTO_NAMES = (
    "astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry",
    "retina", "stereo_motorcycle", "grass", "gravel", "brick", "camera", "coins", "moon", "page",
    "text", "colorwheel", "sk_china", "sk_flower", "grace_hopper",
)
TEXTURE_FAMILIES = ("noise", "stripes", "blobs", "gradient", "checker", "waves")
# Held out for the test split only: never seen by a model trained on train/val backgrounds.
HELD_OUT = frozenset({"coffee", "sk_flower", "retina", "gravel", "moon", "text", "checker", "waves"})


def _load_one(name: str) -> np.ndarray | None:
    """Float RGB [H,W,3] in 0..1, or None when the photo cannot be loaded offline."""
    try:
        if name.startswith("sk_"):
            from sklearn.datasets import load_sample_images

            imgs = load_sample_images()
            idx = {"sk_china": "china.jpg", "sk_flower": "flower.jpg"}[name]
            arr = imgs.images[[p.split("/")[-1] for p in imgs.filenames].index(idx)]
        elif name == "grace_hopper":
            from matplotlib.cbook import get_sample_data

            with get_sample_data("grace_hopper.jpg") as fh:
                arr = np.asarray(Image.open(fh).convert("RGB"))
        else:
            import skimage.data

            arr = getattr(skimage.data, name)()
            if isinstance(arr, tuple):          # stereo_motorcycle: (left, right, disparity)
                arr = arr[0]
    except Exception:  # offline pooch-only image, missing optional module, ...
        return None
    arr = np.asarray(arr)
    if arr.dtype == bool:
        arr = arr.astype(np.uint8) * 255
    if arr.ndim == 2:
        arr = np.repeat(arr[..., None], 3, axis=2)
    arr = arr[..., :3].astype(np.float32)
    arr /= 255.0 if arr.max() > 1.0 else 1.0
    # Cap the long side: crops are small, and a 1411 px retina only costs resize time.
    h, w = arr.shape[:2]
    s = 640 / max(h, w)
    if s < 1:
        im = Image.fromarray((arr * 255).astype(np.uint8)).resize(
            (max(8, round(w * s)), max(8, round(h * s))), Image.BILINEAR)
        arr = np.asarray(im, dtype=np.float32) / 255.0
    return arr


@functools.lru_cache(maxsize=1)
def photo_pool() -> dict[str, np.ndarray]:
    """All photos that load here, name -> float RGB array (cached per process)."""
    out = {}
    for n in PHOTO_NAMES:
        arr = _load_one(n)
        if arr is not None:
            out[n] = arr
    return out


def _is_gray(arr: np.ndarray) -> bool:
    return bool(np.abs(arr[..., 0] - arr[..., 1]).max() < 1e-3 and
                np.abs(arr[..., 1] - arr[..., 2]).max() < 1e-3)


def available_sources(held_out: bool) -> tuple[list[str], list[str]]:
    """(photo names, texture families) of the held-out pool (``held_out=True``) or the train pool."""
    photos = [n for n in photo_pool() if (n in HELD_OUT) == held_out]
    tex = [t for t in TEXTURE_FAMILIES if (t in HELD_OUT) == held_out]
    return photos, tex


def _rand_color(rng: np.random.Generator) -> list[float]:
    return [float(x) for x in rng.uniform(0.05, 0.95, 3)]


def _texture_spec(rng: np.random.Generator, family: str) -> dict[str, Any]:
    return {"family": family, "seed": int(rng.integers(2**31)), "c1": _rand_color(rng),
            "c2": _rand_color(rng), "c3": _rand_color(rng), "freq": float(rng.uniform(2, 12)),
            "angle": float(rng.uniform(0, np.pi))}


def sample_background_spec(rng: np.random.Generator, held_out: bool = False) -> dict[str, Any]:
    """Draw a background spec from the train pool or the held-out pool."""
    photos, tex = available_sources(held_out)
    use_photo = bool(photos) and rng.random() < 0.75
    spec: dict[str, Any] = {"held_out": bool(held_out)}
    if use_photo:
        name = photos[int(rng.integers(len(photos)))]
        scale = float(rng.uniform(0.25, 1.0))            # crop side as a fraction of the short side
        spec.update(kind="photo", name=name, scale=scale,
                    cx=float(rng.uniform(0, 1)), cy=float(rng.uniform(0, 1)),
                    tint=[_rand_color(rng), _rand_color(rng)])
        # Optional texture overlay: multiplies the number of distinct backgrounds.
        if rng.random() < 0.35:
            spec["mix"] = _texture_spec(rng, tex[int(rng.integers(len(tex)))])
            spec["mix_alpha"] = float(rng.uniform(0.15, 0.45))
    else:
        spec.update(kind="texture", tex=_texture_spec(rng, tex[int(rng.integers(len(tex)))]))
    spec["flip"] = bool(rng.random() < 0.5)
    spec["vflip"] = bool(rng.random() < 0.15)
    # Colour jitter as a channel-mixing matrix near identity (a cheap hue/saturation change).
    spec["cmix"] = (np.eye(3) + rng.normal(0, 0.09, (3, 3))).round(4).tolist()
    spec["gain"] = float(rng.uniform(0.7, 1.25))
    spec["bias"] = float(rng.uniform(-0.08, 0.08))
    spec["noise"] = float(rng.choice([0.0, 0.0, 0.02, 0.05]))
    spec["noise_seed"] = int(rng.integers(2**31))
    return spec


def _smooth_noise(rng: np.random.Generator, size: int, cells: int) -> np.ndarray:
    """Value noise in 0..1: a random ``cells x cells`` grid upsampled bicubically."""
    g = rng.random((cells, cells)).astype(np.float32)
    im = Image.fromarray((g * 255).astype(np.uint8)).resize((size, size), Image.BICUBIC)
    return np.asarray(im, dtype=np.float32) / 255.0


def _texture(t: dict[str, Any], size: int) -> np.ndarray:
    rng = np.random.default_rng(t["seed"])
    c1, c2, c3 = (np.asarray(t[k], np.float32) for k in ("c1", "c2", "c3"))
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    fam = t["family"]
    if fam == "noise":
        v = sum(_smooth_noise(rng, size, c) * w for c, w in ((4, 0.5), (9, 0.3), (23, 0.2)))
    elif fam == "stripes":
        u = xx * np.cos(t["angle"]) + yy * np.sin(t["angle"])
        v = 0.5 + 0.5 * np.sign(np.sin(2 * np.pi * t["freq"] * u))
        v = 0.8 * v + 0.2 * _smooth_noise(rng, size, 12)
    elif fam == "blobs":
        v = (_smooth_noise(rng, size, int(t["freq"])) > 0.5).astype(np.float32)
        v = 0.85 * v + 0.15 * _smooth_noise(rng, size, 30)
    elif fam == "gradient":
        u = xx * np.cos(t["angle"]) + yy * np.sin(t["angle"])
        v = (u - u.min()) / max(float(u.max() - u.min()), 1e-6)
    elif fam == "checker":
        k = max(2, int(t["freq"]))
        v = ((np.floor(xx * k) + np.floor(yy * k)) % 2).astype(np.float32)
        v = 0.85 * v + 0.15 * _smooth_noise(rng, size, 16)
    elif fam == "waves":
        f = t["freq"]
        v = 0.5 + 0.25 * (np.sin(2 * np.pi * f * xx + 3 * np.sin(2 * np.pi * 1.5 * yy))
                          + np.sin(2 * np.pi * f * 0.7 * yy + t["angle"]))
    else:  # pragma: no cover - specs are produced by sample_background_spec
        raise ValueError(f"unknown texture family {fam!r}")
    v = np.clip(v, 0, 1)[..., None]
    # Three-colour map: c1 -> c2 -> c3 along v.
    return np.where(v < 0.5, c1 + (c2 - c1) * (2 * v), c2 + (c3 - c2) * (2 * v - 1))


def _photo_crop(spec: dict[str, Any], size: int) -> np.ndarray:
    arr = photo_pool()[spec["name"]]
    h, w = arr.shape[:2]
    side = max(8, int(round(min(h, w) * spec["scale"])))
    x0 = int(round(spec["cx"] * (w - side)))
    y0 = int(round(spec["cy"] * (h - side)))
    crop = arr[y0:y0 + side, x0:x0 + side]
    im = Image.fromarray((crop * 255).astype(np.uint8)).resize((size, size), Image.BILINEAR)
    out = np.asarray(im, dtype=np.float32) / 255.0
    if _is_gray(crop):
        c1, c2 = (np.asarray(c, np.float32) for c in spec["tint"])
        out = c1 + (c2 - c1) * out[..., :1]
    return out


def render_background(spec: dict[str, Any], size: int) -> np.ndarray:
    """Float RGB [size,size,3] in 0..1 for a spec from :func:`sample_background_spec`."""
    if spec["kind"] == "photo":
        if spec["name"] not in photo_pool():
            raise RuntimeError(f"background photo {spec['name']!r} is not available here")
        img = _photo_crop(spec, size)
        if "mix" in spec:
            a = spec["mix_alpha"]
            img = (1 - a) * img + a * _texture(spec["mix"], size)
    else:
        img = _texture(spec["tex"], size)
    if spec["flip"]:
        img = img[:, ::-1]
    if spec["vflip"]:
        img = img[::-1]
    img = img @ np.asarray(spec["cmix"], np.float32).T        # [H,W,3] x [3,3]
    img = img * spec["gain"] + spec["bias"]
    if spec["noise"] > 0:
        img = img + np.random.default_rng(spec["noise_seed"]).normal(
            0, spec["noise"], img.shape).astype(np.float32)
    return np.clip(img, 0, 1).astype(np.float32)


def defocus(img: np.ndarray, sigma_px: float) -> np.ndarray:
    """A background seen out of focus: a Gaussian blur of ``sigma_px`` pixels per channel (the
    shallow depth of field of a product photo, where the subject is sharp and the scene is not).
    ``sigma_px <= 0`` returns ``img`` itself, byte for byte."""
    if sigma_px <= 0:
        return img
    from scipy.ndimage import gaussian_filter

    return np.clip(gaussian_filter(img, sigma=(sigma_px, sigma_px, 0), mode="reflect"), 0, 1).astype(np.float32)


def desaturate_scene(img: np.ndarray, salience: float) -> np.ndarray:
    """A background made less salient: its contrast and colour scaled by ``salience`` about its mean
    colour (a grey seamless sweep at 0, as drawn at 1: the studio-like scenes where a subject, not
    its surroundings, fills the eye). ``salience >= 1`` returns ``img`` itself, byte for byte."""
    if salience >= 1:
        return img
    mean = img.reshape(-1, img.shape[-1]).mean(axis=0)
    return np.clip(mean + float(salience) * (img - mean), 0, 1).astype(np.float32)


def reframe(spec: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """The same scene shot again: a photo re-cropped around a nearby centre at a similar scale
    (+-0.15 of the photo, x0.85-1.15) with a new mirror flip; a texture with a nearby orientation
    and frequency (+-0.3 rad, x0.85-1.15), mirrored. Colours, colour jitter, gain and noise are
    the scene's own."""
    out = dict(spec)
    if spec["kind"] == "photo":
        out["cx"] = float(np.clip(spec["cx"] + rng.uniform(-0.15, 0.15), 0, 1))
        out["cy"] = float(np.clip(spec["cy"] + rng.uniform(-0.15, 0.15), 0, 1))
        out["scale"] = float(np.clip(spec["scale"] * rng.uniform(0.85, 1.15), 0.2, 1.0))
        out["flip"] = bool(rng.random() < 0.5)
    else:
        t = spec["tex"]
        out["tex"] = {**t, "angle": float(t["angle"] + rng.uniform(-0.3, 0.3)),
                      "freq": float(t["freq"] * rng.uniform(0.85, 1.15))}
        out["flip"] = not spec["flip"]      # some textures ignore angle and frequency
    return out
