"""Fill generators of the procedural world: the analogue of the inpainting models behind NearID's
distractor sources (Table 5: FLUX.1-Fill and Qwen-Image in training; PowerPaint and SDXL-Inpaint
unseen).

A real inpainting model is not a kind of identity change: each renders every kind of edit its
prompts ask for, in a look of its own (tone, sharpness, grain, colour rendering). A generator here
is the same pair: the edit kinds it draws, one per item and uniformly from ``world.fill_kinds``
(perturbation families of :func:`nearid_lib.data.world.perturb`), and its look, the settings of
the ``procedural`` fill backend (:class:`~nearid_lib.generate.procedural.ProceduralFill`). Every
generator draws the same kinds, so "unseen fill" tests a new generator, not a new kind of change.
A source named after a perturbation family (``"recolor"``, ``"hard"``, ``"edges"``) is that one
kind in the plain look.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..generate.base import FillBackend, get_backend
from .perturb import PERTURBATIONS

__all__ = ["FillGenerator", "GENERATORS", "source_family", "source_kinds", "draw_kind", "fill_backend"]


@dataclass(frozen=True)
class FillGenerator:
    """One procedural inpainting generator: its fill look (keyword arguments of
    ``ProceduralFill``; empty = the plain look). It draws the world's ``fill_kinds``."""
    look: dict[str, Any] = field(default_factory=dict)
    note: str = ""


# Two training generators and two held-out ones; each look is mild (a few percent of tone, a pixel
# of blur), like the differences between real inpainting models, and none changes the identity.
GENERATORS: dict[str, FillGenerator] = {
    "sharp": FillGenerator(note="the plain procedural fill (training; FLUX.1-Fill's place)"),
    "soft": FillGenerator(look={"blur": 3.0, "soften": 0.7, "gain": (1.03, 1.0, 0.97)},
                          note="softer and warmer (training; Qwen-Image's place)"),
    # A first "grainy" look (per-pixel grain of sd 0.025) was read by the frozen CNN on 79% of val
    # identities, against 16-24% for every other generator and the paper's frozen range of 12-67%
    # (E.4): a distractor-only texture cue, not a look. Replaced by a tone change (docs/mini.md).
    "lifted": FillGenerator(look={"noise": 0.02, "gamma": 0.9, "gain": (1.0, 1.02, 0.98)},
                            note="lifted shadows, a green cast (unseen; PowerPaint's place)"),
    "poster": FillGenerator(look={"blur": 1.0, "soften": 0.4, "levels": 24, "gain": (0.97, 1.0, 1.03)},
                            note="quantised colours, cooler (unseen; SDXL-Inpaint's place)"),
}


def source_family(source: str) -> str:
    """``"marking_hr"`` -> ``"marking"``: the family (perturbation family or fill generator) a source
    renders at any resolution; the one naming rule of sources, for any source name."""
    return source[:-len("_hr")] if source.endswith("_hr") else source


def source_kinds(source: str, fill_kinds: Sequence[str] = ()) -> tuple[str, ...]:
    """The perturbation families ``source`` draws from: ``fill_kinds`` (the world's) for a
    generator, or the one family a source named after it renders. Unknown names raise, listing
    the valid ones."""
    fam = source_family(source)
    if fam in GENERATORS:
        bad = [k for k in fill_kinds if k not in PERTURBATIONS]
        if bad:
            raise ValueError(f"world.fill_kinds {bad}: unknown perturbation families; valid: {', '.join(PERTURBATIONS)}")
        return tuple(fill_kinds)
    if fam in PERTURBATIONS:
        return (fam,)
    raise ValueError(f"distractor source {source!r}: unknown family {fam!r}; valid: "
                     f"{', '.join(PERTURBATIONS + tuple(GENERATORS))} (optionally with suffix '_hr')")


def draw_kind(source: str, rng: np.random.Generator, fill_kinds: Sequence[str]) -> str:
    """The edit kind of one item of ``source``, drawn from ``rng`` (no draw for a one-kind source,
    so such sources keep the draws they had before generators existed)."""
    kinds = source_kinds(source, fill_kinds)
    if not kinds:
        raise ValueError(f"distractor source {source!r} is a fill generator and world.fill_kinds is empty")
    return kinds[0] if len(kinds) == 1 else kinds[int(rng.integers(len(kinds)))]


def fill_backend(source: str) -> FillBackend:
    """The ``procedural`` backend in ``source``'s look (the plain look for a one-kind source)."""
    gen = GENERATORS.get(source_family(source))
    return get_backend("procedural", **(gen.look if gen else {}))
