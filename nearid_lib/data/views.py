"""Views of a procedural object: a pose (centre, scale, rotation, aspect squash, perspective
squash, flip) plus lighting (gain, contrast, colour temperature, shading gradient), all in units of
the image size, so the same view renders at any resolution.
"""
from __future__ import annotations

import numpy as np

__all__ = ["sample_view", "interpolate_view"]


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

