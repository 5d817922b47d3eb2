"""The procedural NearID-mini world: identities built from parts, near-identity perturbations,
part edits, and a resolution-independent renderer.

An *identity* is a JSON-able dict (class, geometry factors, colours, body pattern, marking). A
*view* is a pose (centre, scale, rotation, aspect squash, perspective squash, flip) plus lighting
(gain, contrast, colour temperature, shading gradient), all in units of the image size, so the
same view renders at 224 or 448 px (the "_hr" distractor sources render at the higher size and
are Lanczos-downsampled).

Rendering maps every output (sub)pixel back into the object's canonical frame ([-1, 1]^2) and
evaluates implicit part shapes there (superellipses, triangles, rings), with 2x2 supersampling
for anti-aliased edges. The foreground mask is every pixel the object touches (alpha > 0), so
"outside the mask" means "exactly background" - which is what lets a distractor be composited
into the *exact* mask region of a positive view. Part masks are the pixels where a part is
visible in at least one subsample, so a colour edit of one part changes pixels only inside its
part mask and the MTG oracle ``1 - |part| / |object|`` is exact.

Everything is deterministic: randomness only enters through explicit ``numpy`` Generators.
"""
from __future__ import annotations

import colorsys
import copy
from typing import Any

import numpy as np
from PIL import Image

__all__ = ["CLASSES", "PERTURBATIONS", "MARKING_SHAPES", "PATTERN_TYPES", "sample_identity",
           "describe", "perturb", "perturb_strength", "part_edit", "editable_parts",
           "sample_view", "interpolate_view", "render_object", "composite", "render_scene",
           "to_uint8", "resize_lanczos", "visible_change", "min_visible_px", "VISIBLE_DELTA"]

CLASSES = ("beetle", "fish", "robot", "bird", "vase", "car")
PERTURBATIONS = ("recolor", "pattern", "marking", "shape", "hard", "edges")
MARKING_SHAPES = ("circle", "square", "triangle", "star", "diamond", "ring", "cross")
PATTERN_TYPES = ("none", "stripes", "spots", "checker", "bands")
_MARK_R = (0.2, 0.28)       # marking radius in canonical units = fraction of object size


# --------------------------------------------------------------------------- colours
def _hsv(h: float, s: float, v: float) -> list[float]:
    return [round(float(c), 5) for c in colorsys.hsv_to_rgb(h % 1.0, float(np.clip(s, 0, 1)),
                                                            float(np.clip(v, 0, 1)))]


def _shift(rgb: list[float], dh: float = 0.0, ds: float = 0.0, dv: float = 0.0) -> list[float]:
    h, s, v = colorsys.rgb_to_hsv(*rgb)
    # Near-grey colours have no usable hue: push saturation up so a hue shift is visible.
    if s < 0.25 and dh != 0:
        s = 0.5
    return _hsv(h + dh, s + ds, v + dv)


def _color_name(rgb: list[float]) -> str:
    h, s, v = colorsys.rgb_to_hsv(*rgb)
    if v < 0.25:
        return "black"
    if s < 0.2:
        return "white" if v > 0.8 else "grey"
    names = ["red", "orange", "yellow", "lime", "green", "teal", "cyan", "azure", "blue",
             "violet", "magenta", "pink"]
    return names[int(((h + 1 / 24) % 1.0) * 12)]


def _sign(rng: np.random.Generator) -> float:
    return 1.0 if rng.random() < 0.5 else -1.0


# --------------------------------------------------------------------------- identities
def _sample_pattern(rng: np.random.Generator, body_rgb: list[float], ptype: str | None = None):
    ptype = ptype or PATTERN_TYPES[int(rng.integers(len(PATTERN_TYPES)))]
    h, s, v = colorsys.rgb_to_hsv(*body_rgb)
    color = _hsv(h + rng.uniform(0.3, 0.7), rng.uniform(0.4, 1.0),
                 v - 0.45 if v > 0.55 else v + 0.4)
    pat: dict[str, Any] = {"type": ptype, "color": color,
                           "freq": round(float(rng.uniform(2.0, 4.5)), 4),
                           "angle": round(float(rng.uniform(0, np.pi)), 4),
                           "phase": round(float(rng.uniform(0, 1)), 4),
                           "width": round(float(rng.uniform(0.3, 0.55)), 4)}
    if ptype == "spots":
        n = int(rng.integers(4, 9))
        pat["spots"] = [[round(float(x), 4) for x in (rng.uniform(-0.7, 0.7), rng.uniform(-0.7, 0.7),
                                                      rng.uniform(0.07, 0.15))] for _ in range(n)]
    return pat


def _sample_marking(rng: np.random.Generator, r_range=_MARK_R, shape: str | None = None):
    shape = shape or MARKING_SHAPES[int(rng.integers(len(MARKING_SHAPES)))]
    return {"shape": shape, "x": round(float(rng.uniform(-0.3, 0.3)), 4),
            "y": round(float(rng.uniform(-0.15, 0.45)), 4),
            "r": round(float(rng.uniform(*r_range)), 4),
            "rot": round(float(rng.uniform(0, np.pi)), 4),
            "color": _hsv(rng.uniform(0, 1), rng.uniform(0.5, 1.0), rng.uniform(0.55, 1.0))}


def sample_identity(rng: np.random.Generator, class_name: str) -> dict[str, Any]:
    """A random identity of ``class_name`` (one of :data:`CLASSES`)."""
    if class_name not in CLASSES:
        raise ValueError(f"unknown class {class_name!r}; valid: {', '.join(CLASSES)}")
    body = _hsv(rng.uniform(0, 1), rng.uniform(0.4, 0.95), rng.uniform(0.45, 0.95))
    ident = {
        "class_name": class_name,
        "geom": {"aw": round(float(rng.uniform(0.88, 1.12)), 4),
                 "ah": round(float(rng.uniform(0.88, 1.12)), 4),
                 "p1": round(float(rng.uniform(0.8, 1.2)), 4),
                 "p2": round(float(rng.uniform(0.8, 1.2)), 4),
                 "p3": round(float(rng.uniform(0.8, 1.2)), 4),
                 "v1": int(rng.integers(3))},
        "colors": {"body": body,
                   "accent": _hsv(rng.uniform(0, 1), rng.uniform(0.4, 1.0), rng.uniform(0.4, 1.0)),
                   "dark": _hsv(rng.uniform(0, 1), rng.uniform(0.0, 0.6), rng.uniform(0.08, 0.3)),
                   "eye": _hsv(rng.uniform(0, 1), rng.uniform(0.0, 0.4), rng.uniform(0.85, 1.0))},
        "pattern": _sample_pattern(rng, body),
        "marking": _sample_marking(rng),
    }
    return ident


def describe(ident: dict[str, Any]) -> str:
    """A short text description (the ``description`` column; the prompt of the fill backends)."""
    c = ident["colors"]
    p = ident["pattern"]
    m = ident["marking"]
    pat = "" if p["type"] == "none" else f" with {_color_name(p['color'])} {p['type']}"
    return (f"a {_color_name(c['body'])} {ident['class_name']}{pat}, {_color_name(c['accent'])} "
            f"accents and a {_color_name(m['color'])} {m['shape']} marking")


def perturb(ident: dict[str, Any], family: str, rng: np.random.Generator,
            mag: float = 1.0) -> tuple[dict, list[str]]:
    """A near-identity instance of ``ident``: same class, a few attributes changed.

    Families (all but ``hard`` change at least two attributes, or a marking of radius >= 0.2 of
    the object size, which the prototype found necessary for the change to be visible at 224 px):
    ``recolor`` body + accent hue; ``pattern`` pattern geometry/type + pattern colour;
    ``marking`` marking shape + position + colour; ``shape`` body aspect + one part size +
    variant; ``hard`` exactly one attribute, chosen so that it stays visible under any view
    (marking shape, pattern type, one part's size, or an accent hue shift well beyond the views'
    colour-temperature range); ``edges`` keeps every edge of the object (geometry, pattern
    layout, marking shape and place) and redraws every colour at a similar brightness, the
    analogue of an edge-map-conditioned (Canny) inpainting generator.
    Returns (new identity, names of the changed attributes)."""
    new = copy.deepcopy(ident)
    changed: list[str] = []
    if family == "recolor":
        new["colors"]["body"] = _shift(ident["colors"]["body"], _sign(rng) * mag * rng.uniform(0.15, 0.3))
        new["colors"]["accent"] = _shift(ident["colors"]["accent"], _sign(rng) * mag * rng.uniform(0.2, 0.4))
        new["pattern"]["color"] = _shift(ident["pattern"]["color"], _sign(rng) * mag * rng.uniform(0.15, 0.3))
        changed = ["colors.body", "colors.accent", "pattern.color"]
    elif family == "pattern":
        p = new["pattern"]
        if p["type"] == "none" or rng.random() < 0.5:
            choices = [t for t in PATTERN_TYPES if t not in ("none", p["type"])]
            keep = {k: p[k] for k in ("color",)}
            new["pattern"] = _sample_pattern(rng, new["colors"]["body"],
                                             choices[int(rng.integers(len(choices)))])
            new["pattern"].update(keep)
            changed.append("pattern.type")
        else:
            p["freq"] = round(float(p["freq"] * (rng.uniform(1.5, 2.0) if rng.random() < 0.5
                                                 else 1 / rng.uniform(1.5, 2.0))), 4)
            p["angle"] = round(float(p["angle"] + _sign(rng) * rng.uniform(0.6, 1.2)), 4)
            if "spots" in p:
                p["spots"] = [[round(-x, 4), y, r] for x, y, r in p["spots"]]
            changed.append("pattern.geometry")
        new["pattern"]["color"] = _shift(ident["pattern"]["color"], _sign(rng) * mag * rng.uniform(0.15, 0.35))
        changed.append("pattern.color")
    elif family == "marking":
        m = ident["marking"]
        shapes = [s for s in MARKING_SHAPES if s != m["shape"]]
        nm = _sample_marking(rng, (max(_MARK_R[0], m["r"] * 0.9), _MARK_R[1]),
                             shapes[int(rng.integers(len(shapes)))])
        # Keep the new marking visibly away from the old spot.
        if abs(nm["x"] - m["x"]) + abs(nm["y"] - m["y"]) < 0.25:
            nm["x"] = round(-m["x"] if abs(m["x"]) > 0.12 else m["x"] + 0.3 * _sign(rng), 4)
        nm["color"] = _shift(m["color"], _sign(rng) * mag * rng.uniform(0.2, 0.45))
        new["marking"] = nm
        # A frozen GAP encoder barely registers a ~1-token marking change (first mini build:
        # object-only PA 0.05); a second, texture-level change keeps the family learnable.
        _pattern_tweak(new["pattern"], rng)
        changed = ["marking.shape", "marking.position", "marking.color", "pattern.geometry"]
    elif family == "shape":
        g = new["geom"]
        g["aw"] = round(float(g["aw"] + _sign(rng) * rng.uniform(0.1, 0.18)), 4)
        g["ah"] = round(float(g["ah"] + _sign(rng) * rng.uniform(0.1, 0.18)), 4)
        k = ("p1", "p2", "p3")[int(rng.integers(3))]
        g[k] = round(float(g[k] * (0.65 if g[k] > 1.0 else 1.45)), 4)
        g["v1"] = int((g["v1"] + 1 + rng.integers(2)) % 3)
        _pattern_tweak(new["pattern"], rng)
        changed = ["geom.aspect", f"geom.{k}", "geom.v1", "pattern.geometry"]
    elif family == "hard":
        # One attribute only. The earlier subtle version (a 0.04-0.07 body hue shift, a marking
        # nudge of 0.15, a pattern phase) sat inside the views' own lighting and pose variation
        # (colour temperature +-0.09, flips): invisible as an identity cue, it scored 0-3% SSR
        # for every model, foreground-only included, and measured nothing.
        which = int(rng.integers(4))
        if which == 0:
            shapes = [s for s in MARKING_SHAPES if s != ident["marking"]["shape"]]
            new["marking"]["shape"] = shapes[int(rng.integers(len(shapes)))]
            changed = ["marking.shape"]
        elif which == 1:
            p = ident["pattern"]
            choices = [t for t in PATTERN_TYPES if t not in ("none", p["type"])]
            new["pattern"] = _sample_pattern(rng, ident["colors"]["body"],
                                             choices[int(rng.integers(len(choices)))])
            new["pattern"]["color"] = list(p["color"])
            changed = ["pattern.type"]
        elif which == 2:
            g = new["geom"]
            k = ("p1", "p2", "p3")[int(rng.integers(3))]
            g[k] = round(float(g[k] * (0.6 if g[k] > 1.0 else 1.6)), 4)
            changed = [f"geom.{k}"]
        else:
            new["colors"]["accent"] = _shift(ident["colors"]["accent"], _sign(rng) * rng.uniform(0.3, 0.45))
            changed = ["colors.accent"]
    elif family == "edges":
        for key in ("body", "accent", "dark", "eye"):
            new["colors"][key] = _rehue(ident["colors"][key], rng)
        new["pattern"]["color"] = _rehue(ident["pattern"]["color"], rng)
        new["marking"]["color"] = _rehue(ident["marking"]["color"], rng)
        changed = ["colors.body", "colors.accent", "colors.dark", "colors.eye", "pattern.color",
                   "marking.color"]
    else:
        raise ValueError(f"unknown perturbation family {family!r}; valid: {', '.join(PERTURBATIONS)}")
    return new, changed


def _rehue(rgb: list[float], rng: np.random.Generator) -> list[float]:
    """A far hue (+-0.25..0.5 of the wheel) at the same brightness: luminance edges survive."""
    return _shift(rgb, _sign(rng) * rng.uniform(0.25, 0.5))


def _pattern_tweak(p: dict[str, Any], rng: np.random.Generator) -> None:
    """Change the body pattern's scale/orientation in place (adds stripes to a plain body)."""
    if p["type"] == "none":
        p["type"] = "stripes"
    p["freq"] = round(float(p["freq"] * (rng.uniform(1.4, 1.8) if rng.random() < 0.5
                                         else 1 / rng.uniform(1.4, 1.8))), 4)
    p["angle"] = round(float(p["angle"] + _sign(rng) * rng.uniform(0.5, 1.0)), 4)
    if "spots" in p:
        p["spots"] = [[round(-x, 4), round(-y, 4), r] for x, y, r in p["spots"]]


def _lerp(a, b, t):
    return [round(float(x + (y - x) * t), 5) for x, y in zip(a, b)]


def perturb_strength(ident: dict[str, Any], target: dict[str, Any], t: float) -> dict[str, Any]:
    """Identity change of strength ``t`` in [0, 1]: continuous attributes move linearly from
    ``ident`` to ``target`` (another identity of the same class); discrete ones (pattern type,
    marking shape, variant) switch at fixed thresholds. ``t=0`` is ``ident`` itself."""
    if t <= 0:
        return copy.deepcopy(ident)
    new = copy.deepcopy(ident)
    for k in ("aw", "ah", "p1", "p2", "p3"):
        new["geom"][k] = round(float(ident["geom"][k] + (target["geom"][k] - ident["geom"][k]) * t), 4)
    if t >= 0.75:
        new["geom"]["v1"] = target["geom"]["v1"]
    for k in ident["colors"]:
        new["colors"][k] = _lerp(ident["colors"][k], target["colors"][k], t)
    if t >= 0.5:
        new["pattern"] = copy.deepcopy(target["pattern"])
        new["pattern"]["color"] = _lerp(ident["pattern"]["color"], target["pattern"]["color"], t)
    else:
        new["pattern"]["color"] = _lerp(ident["pattern"]["color"], target["pattern"]["color"], t)
    m, tm = ident["marking"], target["marking"]
    for k in ("x", "y", "r", "rot"):
        new["marking"][k] = round(float(m[k] + (tm[k] - m[k]) * t), 4)
    new["marking"]["color"] = _lerp(m["color"], tm["color"], t)
    if t >= 0.6:
        new["marking"]["shape"] = tm["shape"]
    return new


# --------------------------------------------------------------------------- parts
def _parts(ident: dict[str, Any]) -> list[tuple[str, list[tuple], str]]:
    """Draw list [(part name, [shape, ...] (union), colour key)] in back-to-front order.

    Shapes: ("ell", cx, cy, rx, ry, n, rot) superellipse; ("tri", x1, y1, x2, y2, x3, y3);
    ("ring", cx, cy, rx, ry, inner, n). Colour key "body" = body colour + pattern + marking."""
    g = ident["geom"]
    aw, ah, p1, p2, p3, v1 = g["aw"], g["ah"], g["p1"], g["p2"], g["p3"], g["v1"]
    cls = ident["class_name"]
    n_body = (2, 3, 4)[v1]
    if cls == "beetle":
        bx, by = 0.6 * aw, 0.72 * ah
        legs = [("ell", s * (bx + 0.1), y, 0.2 * p2, 0.045, 4, s * 0.35)
                for s in (-1, 1) for y in (-0.2, 0.15, 0.5)]
        return [
            ("legs", legs, "dark"),
            ("antennae", [("ell", s * 0.18, -0.98, 0.035, 0.16 * p3, 4, s * 0.5) for s in (-1, 1)], "dark"),
            ("body", [("ell", 0, 0.18, bx, by, n_body, 0)], "body"),
            ("head", [("ell", 0, -0.7, 0.3 * p1, 0.22 * p1, 2, 0)], "accent"),
            ("eyes", [("ell", s * 0.13 * p1, -0.74, 0.06 * p3, 0.06 * p3, 2, 0) for s in (-1, 1)], "eye"),
        ]
    if cls == "fish":
        bx, by = 0.72 * aw, 0.45 * ah
        return [
            ("tail", [("tri", 0.5, 0.0, 1.0, -0.5 * p1, 1.0, 0.5 * p1)], "accent"),
            ("fin_top", [("tri", -0.4, -0.3 * ah, 0.2, -0.3 * ah, -0.2, -0.45 * ah - 0.35 * p2)], "accent"),
            ("fin_bottom", [("tri", -0.2, 0.3 * ah, 0.15, 0.3 * ah, 0.05, 0.45 * ah + 0.25 * p2)], "dark"),
            ("body", [("ell", -0.1, 0, bx, by, n_body, 0)], "body"),
            ("eye", [("ell", -0.1 - 0.68 * bx, -0.1, 0.09 * p3, 0.09 * p3, 2, 0)], "eye"),
        ]
    if cls == "robot":
        bx, by = 0.5 * aw, 0.48 * ah
        return [
            ("arms", [("ell", s * (bx + 0.12), 0.15, 0.1, 0.4 * p2, 6, s * 0.15) for s in (-1, 1)], "dark"),
            ("feet", [("ell", s * 0.25, 0.82, 0.16, 0.08, 6, 0) for s in (-1, 1)], "dark"),
            ("antenna", [("ell", 0, -0.88, 0.035, 0.14 * p3, 4, 0), ("ell", 0, -1.02, 0.07, 0.07, 2, 0)], "dark"),
            ("body", [("ell", 0, 0.22, bx, by, 4 + 2 * v1, 0)], "body"),
            ("head", [("ell", 0, -0.55, 0.32 * p1, 0.22 * p1, 6, 0)], "accent"),
            ("eyes", [("ell", s * 0.13 * p1, -0.56, 0.06 * p3, 0.06 * p3, 2, 0) for s in (-1, 1)], "eye"),
        ]
    if cls == "bird":
        bx, by = 0.6 * aw, 0.42 * ah
        return [
            ("tail", [("tri", 0.45, 0.05, 1.0, -0.1 - 0.25 * p2, 1.0, 0.2 + 0.15 * p2)], "accent"),
            ("legs", [("ell", s, 0.65, 0.03, 0.22, 4, 0) for s in (-0.1, 0.2)], "dark"),
            ("body", [("ell", 0.05, 0.12, bx, by, n_body, 0)], "body"),
            ("wing", [("ell", 0.15, 0.1, 0.38 * p2, 0.2, 2, 0.3)], "accent"),
            ("head", [("ell", -0.5, -0.38, 0.25 * p1, 0.25 * p1, 2, 0)], "body"),
            ("beak", [("tri", -0.7 - 0.1 * p1, -0.45, -0.7 - 0.1 * p1, -0.3, -1.0 - 0.1 * p3, -0.38)], "dark"),
            ("eye", [("ell", -0.55, -0.45, 0.06 * p3, 0.06 * p3, 2, 0)], "eye"),
        ]
    if cls == "vase":
        bx, by = 0.55 * aw, 0.58 * ah
        return [
            ("handle", [("ring", bx + 0.05, 0.05, 0.3 * p2, 0.32 * p2, 0.62, 2)], "dark"),
            ("neck", [("ell", 0, -0.5, 0.2 * p1, 0.32, 5, 0)], "accent"),
            ("body", [("ell", 0, 0.2, bx, by, n_body, 0)], "body"),
            ("lip", [("ell", 0, -0.82, 0.3 * p1, 0.08, 4, 0)], "accent"),
            ("base", [("ell", 0, 0.8, 0.36 * p3, 0.07, 6, 0)], "dark"),
        ]
    if cls == "car":
        bx, by = 0.92 * aw, 0.3 * ah
        return [
            ("cabin", [("ell", -0.05, -0.22, 0.52 * p2, 0.32, 3 + v1, 0)], "accent"),
            ("body", [("ell", 0, 0.15, bx, by, 5, 0)], "body"),
            ("window", [("ell", -0.05, -0.3, 0.36 * p2, 0.15, 4, 0)], "eye"),
            ("wheels", [("ell", s * 0.5 * aw, 0.45, 0.22 * p1, 0.22 * p1, 2, 0) for s in (-1, 1)], "dark"),
            ("hubs", [("ell", s * 0.5 * aw, 0.45, 0.09 * p3, 0.09 * p3, 2, 0) for s in (-1, 1)], "accent"),
        ]
    raise ValueError(f"unknown class {cls!r}")


def editable_parts(ident: dict[str, Any]) -> list[str]:
    """Parts an MTG-like edit may change in place (every part but the body, plus the marking)."""
    return [name for name, _, key in _parts(ident) if key != "body"] + ["marking"]


def part_edit(ident: dict[str, Any], rng: np.random.Generator,
              part: str | None = None) -> tuple[dict[str, Any], str]:
    """The same identity with one part's colour changed in place (geometry untouched, so every
    changed pixel lies inside that part's mask). Returns (edited identity, part name)."""
    parts = editable_parts(ident)
    part = part or parts[int(rng.integers(len(parts)))]
    if part not in parts:
        raise ValueError(f"part {part!r} is not editable for {ident['class_name']}; valid: {parts}")
    new = copy.deepcopy(ident)
    new.setdefault("part_colors", {})
    if part == "marking":
        new["marking"]["color"] = _shift(ident["marking"]["color"], rng.uniform(0.3, 0.6),
                                         dv=-0.3 if rng.random() < 0.5 else 0.0)
    else:
        key = dict((n, k) for n, _, k in _parts(ident))[part]
        base = ident.get("part_colors", {}).get(part, ident["colors"][key])
        h, s, v = colorsys.rgb_to_hsv(*base)
        new["part_colors"][part] = _hsv(h + rng.uniform(0.3, 0.7), max(s, 0.6) if s < 0.6 else s,
                                        v + 0.45 if v < 0.5 else v - 0.35)
    return new, part


# --------------------------------------------------------------------------- views
def sample_view(rng: np.random.Generator, object_frac: tuple[float, float] = (0.5, 0.62),
                strength: float = 1.0) -> dict[str, float]:
    """A random pose + lighting. ``object_frac`` is the object's extent / image size."""
    s = float(strength)
    frac = float(rng.uniform(*object_frac))
    margin = max(0.0, 0.5 - frac / 2 - 0.02)
    return {
        "cx": round(0.5 + float(rng.uniform(-1, 1)) * min(margin, 0.12), 4),
        "cy": round(0.5 + float(rng.uniform(-1, 1)) * min(margin, 0.12), 4),
        # Canonical parts fill ~[-0.9, 0.9]: scale so the *visible* object spans ~frac.
        "scale": round(frac / 1.8, 4),
        "rot": round(float(rng.uniform(-0.5, 0.5)) * s, 4),
        "sx": round(1.0 + float(rng.uniform(-0.15, 0.08)) * s, 4),
        "sy": round(1.0 + float(rng.uniform(-0.15, 0.08)) * s, 4),
        "persp": round(float(rng.uniform(-0.25, 0.25)) * s, 4),
        "flip": bool(rng.random() < 0.5),
        "gain": round(1.0 + float(rng.uniform(-0.3, 0.25)) * s, 4),
        "contrast": round(1.0 + float(rng.uniform(-0.25, 0.2)) * s, 4),
        "temp": round(float(rng.uniform(-0.15, 0.15)) * s, 4),
        "shade_dir": round(float(rng.uniform(0, 2 * np.pi)), 4),
        "shade": round(float(rng.uniform(0.0, 0.35)) * s, 4),
    }


def interpolate_view(a: dict[str, float], b: dict[str, float], t: float,
                     keys: tuple[str, ...]) -> dict[str, float]:
    """View ``a`` with the listed ``keys`` moved a fraction ``t`` towards ``b`` (flip switches at
    t >= 0.5). Used by the edit grids to vary only viewpoint or only lighting."""
    out = dict(a)
    for k in keys:
        if k == "flip":
            out[k] = b[k] if t >= 0.5 else a[k]
        else:
            out[k] = round(float(a[k] + (b[k] - a[k]) * t), 4)
    return out


# --------------------------------------------------------------------------- rendering
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
    for k, (name, shapes, key) in enumerate(_parts(ident)):
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
    for k, name in enumerate(_parts(ident)):
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
