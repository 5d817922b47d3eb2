"""Parts of a procedural object: each class's draw list of implicit part shapes in its
canonical frame ([-1, 1]^2), and MTG-like part edits that recolour one part in place.
"""
from __future__ import annotations

import colorsys
import copy
from typing import Any

import numpy as np

from .identity import hsv, shift_hsv

__all__ = ["editable_parts", "part_edit"]


def part_list(ident: dict[str, Any]) -> list[tuple[str, list[tuple], str]]:
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
    return [name for name, _, key in part_list(ident) if key != "body"] + ["marking"]


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
        new["marking"]["color"] = shift_hsv(ident["marking"]["color"], rng.uniform(0.3, 0.6),
                                         dv=-0.3 if rng.random() < 0.5 else 0.0)
    else:
        key = dict((n, k) for n, _, k in part_list(ident))[part]
        base = ident.get("part_colors", {}).get(part, ident["colors"][key])
        h, s, v = colorsys.rgb_to_hsv(*base)
        new["part_colors"][part] = hsv(h + rng.uniform(0.3, 0.7), max(s, 0.6) if s < 0.6 else s,
                                        v + 0.45 if v < 0.5 else v - 0.35)
    return new, part

