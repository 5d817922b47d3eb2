"""The procedural NearID-mini world: identities built from parts, near-identity perturbations,
part edits, and a resolution-independent renderer.

An *identity* is a JSON-able dict (class, geometry factors, colours, body pattern, marking). A
*view* is a pose (centre, scale, rotation, aspect squash, perspective squash, flip) plus lighting
(gain, contrast, colour temperature, shading gradient), all in units of the image size, so the
same view renders at 224 or 448 px (the "_hr" distractor sources render at the higher size and
are Lanczos-downsampled).

The concepts live in their own modules and are re-exported here, the world's public face:
:mod:`.identity` (identities), :mod:`.perturb` (near-identity perturbations), :mod:`.parts` (part
geometry and part edits), :mod:`.views` (pose + lighting) and :mod:`.render` (renderer,
compositing, visibility of a change).

Everything is deterministic: randomness only enters through explicit ``numpy`` Generators.
"""
from __future__ import annotations

from .identity import CLASSES, MARKING_SHAPES, PATTERN_TYPES, describe, sample_identity
from .parts import editable_parts, part_edit
from .perturb import PERTURBATIONS, perturb, perturb_strength
from .render import (
                     VISIBLE_DELTA,
                     composite,
                     min_visible_px,
                     render_object,
                     render_scene,
                     resize_lanczos,
                     to_uint8,
                     visible_change,
)
from .views import interpolate_view, sample_view

__all__ = ["CLASSES", "PERTURBATIONS", "MARKING_SHAPES", "PATTERN_TYPES", "sample_identity",
           "describe", "perturb", "perturb_strength", "part_edit", "editable_parts",
           "sample_view", "interpolate_view", "render_object", "composite", "render_scene",
           "to_uint8", "resize_lanczos", "visible_change", "min_visible_px", "VISIBLE_DELTA"]
