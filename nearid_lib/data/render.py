"""The resolution-independent renderer of the procedural world, compositing, and the rule for
when a change between two renders is visible.

Rendering maps every output (sub)pixel back into the object's canonical frame ([-1, 1]^2) and
evaluates implicit part shapes there (superellipses, triangles, rings), with 2x2 supersampling
for anti-aliased edges. The foreground mask is every pixel the object touches (alpha > 0), so
"outside the mask" means "exactly background" - which is what lets a distractor be composited
into the *exact* mask region of a positive view. Part masks are the pixels where a part is
visible in at least one subsample, so a colour edit of one part changes pixels only inside its
part mask and the MTG oracle ``1 - |part| / |object|`` is exact.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image

from .parts import part_list

__all__ = ["render_object", "composite", "render_scene", "to_uint8", "resize_lanczos", "visible_change",
           "min_visible_px", "VISIBLE_DELTA"]


def _pow(a: np.ndarray, n: float) -> np.ndarray:
    """|a|**n; integer exponents by repeated multiplication (pow() is ~10x slower)."""
    if float(n).is_integer():
        n = int(n)
        if n % 2:
            a = np.abs(a)
        out = a * a
        for _ in range(n - 2):
            out *= a
        return out
    return np.abs(a) ** n


def _inside(shape: tuple, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    kind = shape[0]
    if kind == "ell":
        _, cx, cy, rx, ry, n, rot = shape
        # Cheap bounding-box rejection first: most shapes are small parts of the canvas.
        R = max(rx, ry) * (1.0 if not rot else 1.42)
        sel = (np.abs(X - cx) <= R) & (np.abs(Y - cy) <= R)
        out = np.zeros(X.shape, bool)
        dx, dy = X[sel] - cx, Y[sel] - cy
        if rot:
            c, s = np.cos(rot), np.sin(rot)
            dx, dy = c * dx + s * dy, -s * dx + c * dy
        out[sel] = (_pow(dx / rx, n) + _pow(dy / ry, n)) <= 1.0
        return out
    if kind == "tri":
        _, x1, y1, x2, y2, x3, y3 = shape
        d1 = (X - x2) * (y1 - y2) - (x1 - x2) * (Y - y2)
        d2 = (X - x3) * (y2 - y3) - (x2 - x3) * (Y - y3)
        d3 = (X - x1) * (y3 - y1) - (x3 - x1) * (Y - y1)
        neg = (d1 < 0) | (d2 < 0) | (d3 < 0)
        pos = (d1 > 0) | (d2 > 0) | (d3 > 0)
        return ~(neg & pos)
    if kind == "ring":
        _, cx, cy, rx, ry, inner, n = shape
        v = _pow((X - cx) / rx, n) + _pow((Y - cy) / ry, n)
        return (v <= 1.0) & (v >= inner ** n)
    raise ValueError(f"unknown shape kind {kind!r}")


def _marking_inside(m: dict[str, Any], X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    dx, dy = X - m["x"], Y - m["y"]
    c, s = np.cos(m["rot"]), np.sin(m["rot"])
    u, v = (c * dx + s * dy) / m["r"], (-s * dx + c * dy) / m["r"]
    shape = m["shape"]
    if shape == "circle":
        return u * u + v * v <= 1
    if shape == "square":
        return (np.abs(u) <= 0.8) & (np.abs(v) <= 0.8)
    if shape == "diamond":
        return np.abs(u) + np.abs(v) <= 1
    if shape == "ring":
        r2 = u * u + v * v
        return (r2 <= 1) & (r2 >= 0.36)
    if shape == "cross":
        return ((np.abs(u) <= 1) & (np.abs(v) <= 0.3)) | ((np.abs(v) <= 1) & (np.abs(u) <= 0.3))
    if shape == "triangle":
        return (v <= 0.6) & (v >= 2.0 * np.abs(u) - 1.0)
    if shape == "star":
        ang = np.arctan2(v, u)
        return np.sqrt(u * u + v * v) <= 0.55 + 0.45 * np.cos(5 * ang)
    raise ValueError(f"unknown marking shape {shape!r}")


def _pattern_mask(p: dict[str, Any], X: np.ndarray, Y: np.ndarray) -> np.ndarray | None:
    t = p["type"]
    if t == "none":
        return None
    if t == "stripes":
        u = X * np.cos(p["angle"]) + Y * np.sin(p["angle"])
        return ((u * p["freq"] + p["phase"]) % 1.0) < p["width"]
    if t == "checker":
        c, s = np.cos(p["angle"]), np.sin(p["angle"])
        u, v = (c * X + s * Y) * p["freq"] + p["phase"], (-s * X + c * Y) * p["freq"]
        return ((np.floor(u) + np.floor(v)) % 2) == 0
    if t == "bands":
        r = np.sqrt((X - 0.1 * np.cos(p["angle"])) ** 2 + (Y - 0.1 * np.sin(p["angle"])) ** 2)
        return ((r * p["freq"] + p["phase"]) % 1.0) < p["width"]
    if t == "spots":
        out = np.zeros(X.shape, bool)
        for x, y, r in p["spots"]:
            out |= (X - x) ** 2 + (Y - y) ** 2 <= r * r
        return out
    raise ValueError(f"unknown pattern type {t!r}")


def _ss_mean(x: np.ndarray, ss: int) -> np.ndarray:
    """Mean over ss x ss sub-sample blocks of [h*ss, w*ss, ...] (strided sums: a reshape + mean
    over two non-adjacent axes is several times slower in numpy)."""
    if ss == 1:
        return x
    out = x[0::ss, 0::ss].copy()
    for dy in range(ss):
        for dx in range(ss):
            if dy or dx:
                out += x[dy::ss, dx::ss]
    out *= 1.0 / (ss * ss)
    return out


def render_object(ident: dict[str, Any], view: dict[str, float], size: int,
                  ss: int | None = None, with_parts: bool = True) -> dict[str, Any]:
    """Render ``ident`` under ``view`` on a ``size x size`` canvas.

    Returns ``{"prem": float [S,S,3] premultiplied colour, "alpha": float [S,S] coverage,
    "parts": {name: bool [S,S]}}``. ``ss`` is the supersampling factor (default 2 up to 256 px,
    else 1: the high-resolution renders are Lanczos-downsampled anyway). ``with_parts=False``
    skips the part masks (faster; ``parts`` is then empty)."""
    ss = ss or (2 if size <= 256 else 1)
    sc = view["scale"] * size                     # pixels per canonical unit
    ext = 1.15 * sc * max(view["sx"], view["sy"]) / max(1 - abs(view["persp"]) * 1.2, 0.3)
    cxp, cyp = view["cx"] * size, view["cy"] * size
    x0, x1 = max(0, int(np.floor(cxp - ext))), min(size, int(np.ceil(cxp + ext)))
    y0, y1 = max(0, int(np.floor(cyp - ext))), min(size, int(np.ceil(cyp + ext)))
    h, w = y1 - y0, x1 - x0
    prem = np.zeros((size, size, 3), np.float32)
    alpha = np.zeros((size, size), np.float32)
    parts_out: dict[str, np.ndarray] = {}
    if h <= 0 or w <= 0:
        return {"prem": prem, "alpha": alpha, "parts": parts_out}
    # Sub-sample centres in image pixels: [h*ss, w*ss]
    offs = (np.arange(ss, dtype=np.float32) + 0.5) / ss
    py = (y0 + np.repeat(np.arange(h, dtype=np.float32), ss) + np.tile(offs, h))[:, None]
    px = (x0 + np.repeat(np.arange(w, dtype=np.float32), ss) + np.tile(offs, w))[None, :]
    dx, dy = (px - cxp) / sc, (py - cyp) / sc
    c, s = np.cos(view["rot"]), np.sin(view["rot"])
    X = (c * dx + s * dy) / view["sx"]
    Y = (-s * dx + c * dy) / view["sy"]
    den = 1.0 + view["persp"] * X                  # a cheap perspective squash along x
    X, Y = X / den, Y / den
    if view["flip"]:
        X = -X
    top = np.full(X.shape, -1, np.int16)
    col = np.zeros(X.shape + (3,), np.float32)
    part_colors = ident.get("part_colors", {})
    for k, (name, shapes, key) in enumerate(part_list(ident)):
        ins = np.zeros(X.shape, bool)
        for sh in shapes:
            ins |= _inside(sh, X, Y)
        top[ins] = k
        if key == "body":
            col[ins] = ident["colors"]["body"]
            pm = _pattern_mask(ident["pattern"], X, Y)
            if pm is not None:
                col[ins & pm] = ident["pattern"]["color"]
            mk = ins & _marking_inside(ident["marking"], X, Y)
            col[mk] = ident["marking"]["color"]
            top[mk] = 100                               # marked separately, on top of the body
        else:
            col[ins] = part_colors.get(name, ident["colors"][key])
    cov = top >= 0
    # Lighting on the object only: gain, contrast, colour temperature, a linear shading ramp.
    col = (col * view["gain"] - 0.5) * view["contrast"] + 0.5
    col[..., 0] *= 1 + view["temp"]
    col[..., 2] *= 1 - view["temp"]
    ramp = (np.cos(view["shade_dir"]) * dx + np.sin(view["shade_dir"]) * dy)   # canonical units
    col *= (1.0 - view["shade"] * np.clip(ramp, -1.2, 1.2))[..., None]
    col = np.clip(col, 0, 1) * cov[..., None]
    # Average sub-samples: [h*ss, w*ss, 3] -> [h, w, 3]
    prem[y0:y1, x0:x1] = _ss_mean(col, ss)
    alpha[y0:y1, x0:x1] = _ss_mean(cov.astype(np.float32), ss)
    if not with_parts:
        return {"prem": prem, "alpha": alpha, "parts": parts_out}
    for k, name in enumerate(part_list(ident)):
        vis = (top == k).reshape(h, ss, w, ss).any(axis=(1, 3))
        full = np.zeros((size, size), bool)
        full[y0:y1, x0:x1] = vis
        parts_out[name[0]] = full
    vis = (top == 100).reshape(h, ss, w, ss).any(axis=(1, 3))
    full = np.zeros((size, size), bool)
    full[y0:y1, x0:x1] = vis
    parts_out["marking"] = full
    return {"prem": prem, "alpha": alpha, "parts": parts_out}


# A change counts as visible where a pixel's colour moves by more than this (max over RGB, 0..1,
# ~31/255) in the same view; a distractor must change at least ``min_visible_px`` such pixels.
VISIBLE_DELTA = 0.12
_MIN_VISIBLE_FRAC = 128 / 224 ** 2      # 128 px at 224 (half a stride-16 token's 256 px)


def min_visible_px(size: int) -> int:
    """Changed pixels a distractor needs at ``size`` px to count as humanly distinguishable."""
    return max(4, int(np.ceil(_MIN_VISIBLE_FRAC * size * size)))


def _area_resize(x: np.ndarray, size: int) -> np.ndarray:
    """Area-average resample of a float [H, W] or [H, W, C] array to ``size x size``."""
    if x.shape[0] == size:
        return x
    chans = [x] if x.ndim == 2 else [x[..., c] for c in range(x.shape[-1])]
    out = [np.asarray(Image.fromarray(np.ascontiguousarray(c, np.float32), mode="F").resize(
        (size, size), Image.BOX)) for c in chans]
    return out[0] if x.ndim == 2 else np.stack(out, axis=-1)


def visible_change(ref: dict[str, Any], other: dict[str, Any], delta: float = VISIBLE_DELTA) -> int:
    """Pixels (at ``ref``'s size) where two object layers of the same view differ visibly: inside
    either object, max-channel |difference of premultiplied colour| > ``delta``. ``other`` may be
    rendered at another size (the "_hr" sources); it is area-averaged to ``ref``'s size."""
    S = ref["alpha"].shape[0]
    pa, aa = _area_resize(other["prem"], S), _area_resize(other["alpha"], S)
    inside = (ref["alpha"] > 0) | (aa > 0)
    return int(((np.abs(ref["prem"] - pa).max(axis=-1) > delta) & inside).sum())


def composite(background: np.ndarray, layer: dict[str, Any],
              clip_mask: np.ndarray | None = None) -> np.ndarray:
    """Alpha-composite an object layer over a float RGB background; ``clip_mask`` (bool) limits
    the object to a region (the exact mask of the view it replaces)."""
    a = layer["alpha"]
    prem = layer["prem"]
    if clip_mask is not None:
        a = a * clip_mask
        prem = prem * clip_mask[..., None]
    return background * (1 - a[..., None]) + prem


def render_scene(ident: dict[str, Any], view: dict[str, float], background: np.ndarray,
                 with_parts: bool = False) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(float RGB image, bool object mask, part masks) of ``ident`` on ``background``."""
    size = background.shape[0]
    layer = render_object(ident, view, size, with_parts=with_parts)
    img = composite(background, layer)
    return img, layer["alpha"] > 0, layer["parts"]


def to_uint8(img: np.ndarray) -> np.ndarray:
    """Float 0..1 -> uint8 with rounding (deterministic)."""
    return np.clip(np.rint(img * 255.0), 0, 255).astype(np.uint8)


def resize_lanczos(img: np.ndarray, size: int) -> np.ndarray:
    """uint8 RGB -> uint8 RGB at ``size x size`` with Lanczos (the high-resolution sources)."""
    return np.asarray(Image.fromarray(img).resize((size, size), Image.LANCZOS))
