"""Near-identity perturbations of a procedural identity: the distractor families
(:data:`PERTURBATIONS`) and a continuous identity change of given strength (the edit grids).
"""
from __future__ import annotations

import copy
from typing import Any

import numpy as np

from .identity import MARK_R, MARKING_SHAPES, PATTERN_TYPES, sample_marking, sample_pattern, shift_hsv, random_sign

__all__ = ["PERTURBATIONS", "perturb", "perturb_strength"]

PERTURBATIONS = ("recolor", "pattern", "marking", "shape", "hard", "edges")


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
        new["colors"]["body"] = shift_hsv(ident["colors"]["body"], random_sign(rng) * mag * rng.uniform(0.15, 0.3))
        new["colors"]["accent"] = shift_hsv(ident["colors"]["accent"], random_sign(rng) * mag * rng.uniform(0.2, 0.4))
        new["pattern"]["color"] = shift_hsv(ident["pattern"]["color"], random_sign(rng) * mag * rng.uniform(0.15, 0.3))
        changed = ["colors.body", "colors.accent", "pattern.color"]
    elif family == "pattern":
        p = new["pattern"]
        if p["type"] == "none" or rng.random() < 0.5:
            choices = [t for t in PATTERN_TYPES if t not in ("none", p["type"])]
            keep = {k: p[k] for k in ("color",)}
            new["pattern"] = sample_pattern(rng, new["colors"]["body"],
                                             choices[int(rng.integers(len(choices)))])
            new["pattern"].update(keep)
            changed.append("pattern.type")
        else:
            p["freq"] = round(float(p["freq"] * (rng.uniform(1.5, 2.0) if rng.random() < 0.5
                                                 else 1 / rng.uniform(1.5, 2.0))), 4)
            p["angle"] = round(float(p["angle"] + random_sign(rng) * rng.uniform(0.6, 1.2)), 4)
            if "spots" in p:
                p["spots"] = [[round(-x, 4), y, r] for x, y, r in p["spots"]]
            changed.append("pattern.geometry")
        new["pattern"]["color"] = shift_hsv(ident["pattern"]["color"], random_sign(rng) * mag * rng.uniform(0.15, 0.35))
        changed.append("pattern.color")
    elif family == "marking":
        m = ident["marking"]
        shapes = [s for s in MARKING_SHAPES if s != m["shape"]]
        nm = sample_marking(rng, (max(MARK_R[0], m["r"] * 0.9), MARK_R[1]),
                             shapes[int(rng.integers(len(shapes)))])
        # Keep the new marking visibly away from the old spot.
        if abs(nm["x"] - m["x"]) + abs(nm["y"] - m["y"]) < 0.25:
            nm["x"] = round(-m["x"] if abs(m["x"]) > 0.12 else m["x"] + 0.3 * random_sign(rng), 4)
        nm["color"] = shift_hsv(m["color"], random_sign(rng) * mag * rng.uniform(0.2, 0.45))
        new["marking"] = nm
        # A frozen GAP encoder barely registers a ~1-token marking change (first mini build:
        # object-only PA 0.05); a second, texture-level change keeps the family learnable.
        _pattern_tweak(new["pattern"], rng)
        changed = ["marking.shape", "marking.position", "marking.color", "pattern.geometry"]
    elif family == "shape":
        g = new["geom"]
        g["aw"] = round(float(g["aw"] + random_sign(rng) * rng.uniform(0.1, 0.18)), 4)
        g["ah"] = round(float(g["ah"] + random_sign(rng) * rng.uniform(0.1, 0.18)), 4)
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
            new["pattern"] = sample_pattern(rng, ident["colors"]["body"],
                                             choices[int(rng.integers(len(choices)))])
            new["pattern"]["color"] = list(p["color"])
            changed = ["pattern.type"]
        elif which == 2:
            g = new["geom"]
            k = ("p1", "p2", "p3")[int(rng.integers(3))]
            g[k] = round(float(g[k] * (0.6 if g[k] > 1.0 else 1.6)), 4)
            changed = [f"geom.{k}"]
        else:
            new["colors"]["accent"] = shift_hsv(ident["colors"]["accent"], random_sign(rng) * rng.uniform(0.3, 0.45))
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
    return shift_hsv(rgb, random_sign(rng) * rng.uniform(0.25, 0.5))


def _pattern_tweak(p: dict[str, Any], rng: np.random.Generator) -> None:
    """Change the body pattern's scale/orientation in place (adds stripes to a plain body)."""
    if p["type"] == "none":
        p["type"] = "stripes"
    p["freq"] = round(float(p["freq"] * (rng.uniform(1.4, 1.8) if rng.random() < 0.5
                                         else 1 / rng.uniform(1.4, 1.8))), 4)
    p["angle"] = round(float(p["angle"] + random_sign(rng) * rng.uniform(0.5, 1.0)), 4)
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

