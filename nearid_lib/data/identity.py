"""Procedural identities of the NearID-mini world: an *identity* is a JSON-able dict (class,
geometry factors, colours, body pattern, marking), sampled from an explicit ``numpy`` Generator.
Also the colour helpers shared by perturbations and part edits, and the text description.
"""
from __future__ import annotations

import colorsys
from typing import Any

import numpy as np

__all__ = ["CLASSES", "MARKING_SHAPES", "PATTERN_TYPES", "sample_identity", "describe"]

CLASSES = ("beetle", "fish", "robot", "bird", "vase", "car")
MARKING_SHAPES = ("circle", "square", "triangle", "star", "diamond", "ring", "cross")
PATTERN_TYPES = ("none", "stripes", "spots", "checker", "bands")
MARK_R = (0.2, 0.28)       # marking radius in canonical units = fraction of object size


# --------------------------------------------------------------------------- colours
def hsv(h: float, s: float, v: float) -> list[float]:
    return [round(float(c), 5) for c in colorsys.hsv_to_rgb(h % 1.0, float(np.clip(s, 0, 1)),
                                                            float(np.clip(v, 0, 1)))]


def shift_hsv(rgb: list[float], dh: float = 0.0, ds: float = 0.0, dv: float = 0.0) -> list[float]:
    h, s, v = colorsys.rgb_to_hsv(*rgb)
    # Near-grey colours have no usable hue: push saturation up so a hue shift is visible.
    if s < 0.25 and dh != 0:
        s = 0.5
    return hsv(h + dh, s + ds, v + dv)


def _color_name(rgb: list[float]) -> str:
    h, s, v = colorsys.rgb_to_hsv(*rgb)
    if v < 0.25:
        return "black"
    if s < 0.2:
        return "white" if v > 0.8 else "grey"
    names = ["red", "orange", "yellow", "lime", "green", "teal", "cyan", "azure", "blue",
             "violet", "magenta", "pink"]
    return names[int(((h + 1 / 24) % 1.0) * 12)]


def random_sign(rng: np.random.Generator) -> float:
    return 1.0 if rng.random() < 0.5 else -1.0


# --------------------------------------------------------------------------- identities
def sample_pattern(rng: np.random.Generator, body_rgb: list[float], ptype: str | None = None):
    ptype = ptype or PATTERN_TYPES[int(rng.integers(len(PATTERN_TYPES)))]
    h, s, v = colorsys.rgb_to_hsv(*body_rgb)
    color = hsv(h + rng.uniform(0.3, 0.7), rng.uniform(0.4, 1.0),
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


def sample_marking(rng: np.random.Generator, r_range=MARK_R, shape: str | None = None):
    shape = shape or MARKING_SHAPES[int(rng.integers(len(MARKING_SHAPES)))]
    return {"shape": shape, "x": round(float(rng.uniform(-0.3, 0.3)), 4),
            "y": round(float(rng.uniform(-0.15, 0.45)), 4),
            "r": round(float(rng.uniform(*r_range)), 4),
            "rot": round(float(rng.uniform(0, np.pi)), 4),
            "color": hsv(rng.uniform(0, 1), rng.uniform(0.5, 1.0), rng.uniform(0.55, 1.0))}


def sample_identity(rng: np.random.Generator, class_name: str) -> dict[str, Any]:
    """A random identity of ``class_name`` (one of :data:`CLASSES`)."""
    if class_name not in CLASSES:
        raise ValueError(f"unknown class {class_name!r}; valid: {', '.join(CLASSES)}")
    body = hsv(rng.uniform(0, 1), rng.uniform(0.4, 0.95), rng.uniform(0.45, 0.95))
    ident = {
        "class_name": class_name,
        "geom": {"aw": round(float(rng.uniform(0.88, 1.12)), 4),
                 "ah": round(float(rng.uniform(0.88, 1.12)), 4),
                 "p1": round(float(rng.uniform(0.8, 1.2)), 4),
                 "p2": round(float(rng.uniform(0.8, 1.2)), 4),
                 "p3": round(float(rng.uniform(0.8, 1.2)), 4),
                 "v1": int(rng.integers(3))},
        "colors": {"body": body,
                   "accent": hsv(rng.uniform(0, 1), rng.uniform(0.4, 1.0), rng.uniform(0.4, 1.0)),
                   "dark": hsv(rng.uniform(0, 1), rng.uniform(0.0, 0.6), rng.uniform(0.08, 0.3)),
                   "eye": hsv(rng.uniform(0, 1), rng.uniform(0.0, 0.4), rng.uniform(0.85, 1.0))},
        "pattern": sample_pattern(rng, body),
        "marking": sample_marking(rng),
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

