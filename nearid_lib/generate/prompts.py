"""Prompts for near-identity distractors and ID-Sim edits.

A NearID distractor is "a semantically similar but distinct instance": same class, different
instance. Given a dataset description of the positive ("a red ceramic mug with blue stripes") we
keep its class and structure and swap its instance-defining attributes (colours, materials,
patterns) for different ones chosen deterministically from the item's seed, so the prompt asks
for a sibling instance, never the same object (negations like "not red" are ignored by diffusion
text encoders). Without a description, a template builds one from the class name.

All choices come from ``make_rng(seed, item_id, ...)``: the same item always gets the same
prompt, whatever the order of work.
"""
from __future__ import annotations

import re

from ..runtime.seeding import make_rng

__all__ = ["near_identity_prompt", "identity_edit_prompt", "context_edit_prompt",
           "CONTEXT_EDIT_TEMPLATE", "COLORS", "MATERIALS", "PATTERNS", "BACKGROUNDS", "LIGHTINGS"]

COLORS = ("red", "orange", "yellow", "green", "teal", "blue", "navy", "purple", "pink", "brown",
          "black", "white", "grey", "beige", "gold", "silver", "maroon", "olive", "turquoise",
          "lavender", "cream", "copper")
MATERIALS = ("ceramic", "glass", "wooden", "metal", "plastic", "leather", "fabric", "stone",
             "rubber", "porcelain", "steel", "brass", "bamboo", "wicker", "velvet", "marble")
PATTERNS = ("stripes", "polka dots", "a checkered pattern", "a floral print", "a zigzag pattern",
            "a geometric print", "a plaid pattern", "speckles", "a gradient finish",
            "a glossy solid finish", "a matte solid finish", "a painted logo")
_SHAPE_WORDS = ("round", "square", "tall", "short", "slim", "wide", "rounded", "angular",
                "oval", "rectangular", "curved", "flat")

# ID-Sim Appendix A.2.1: the prompt of every contextual edit (verbatim, with the two slots).
CONTEXT_EDIT_TEMPLATE = (
    "Replace only the white background pixels with {background}; keep the foreground objects and "
    "text completely unchanged in size, position, orientation, and appearance (except lighting); "
    "preserve original text, composition, proportions, alignment, and text properties; "
    "seamlessly blend the new background with simulated {lighting} to match scene lighting, "
    "shadows, and reflections; ensure natural integration without duplication, movement, or "
    "distortion of the foreground; maintain original dimensions, aspect ratio, and focal center; "
    "adjust foreground lighting for seamless blending.")
# The papers' lists were generated with GPT-4o and ship only in their supplement; these short
# lists are ours and stand in for them.
BACKGROUNDS = ("a sunny park lawn", "a wooden kitchen table", "a busy city street",
               "a sandy beach", "a snowy mountain trail", "a modern office desk",
               "a cozy living room", "a forest clearing", "a marble countertop",
               "a rainy sidewalk", "a garden with flowers")
LIGHTINGS = ("warm golden-hour sunlight", "cool overcast daylight", "soft studio lighting",
             "dim evening lamp light", "bright midday sun", "neon city lights at night",
             "candle light", "cold blue moonlight")


def _swap(words: tuple[str, ...], text: str, rng) -> tuple[str, int]:
    """Replace each whole-word occurrence of any of ``words`` by a *different* one."""
    n = 0

    def repl(m: re.Match) -> str:
        nonlocal n
        n += 1
        old = m.group(0)
        choices = [w for w in words if w != old.lower()]
        new = choices[int(rng.integers(len(choices)))]
        return new.capitalize() if old[:1].isupper() else new

    pattern = r"\b(" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")\b"
    return re.sub(pattern, repl, text, flags=re.IGNORECASE), n


def near_identity_prompt(class_name: str, description: str | None = None, item_id: str = "",
                         seed: int = 0) -> str:
    """A same-class, different-instance description for the distractor of ``item_id``.

    With a description: its colour/material/pattern/shape words are swapped for different ones;
    if none is found, a new colour and pattern are appended so the instance still differs.
    Without one (empty/NaN): ``"a photo of a {colour} {material} {class} with {pattern}"``."""
    if not isinstance(class_name, str) or not class_name.strip():
        raise ValueError(f"item {item_id!r}: field 'class_name' is empty")
    rng = make_rng(seed, "near_identity_prompt", item_id)
    cls = class_name.strip().replace("_", " ")
    desc = description.strip() if isinstance(description, str) else ""
    if not desc:
        color = COLORS[int(rng.integers(len(COLORS)))]
        material = MATERIALS[int(rng.integers(len(MATERIALS)))]
        pattern = PATTERNS[int(rng.integers(len(PATTERNS)))]
        return f"a photo of a {color} {material} {cls} with {pattern}, high detail, realistic"
    text = desc
    total = 0
    for vocab in (COLORS, MATERIALS, _SHAPE_WORDS):
        text, n = _swap(vocab, text, rng)
        total += n
    if total == 0:
        color = COLORS[int(rng.integers(len(COLORS)))]
        pattern = PATTERNS[int(rng.integers(len(PATTERNS)))]
        text = f"{text}, but {color} with {pattern}"
    if cls.lower() not in text.lower():
        text = f"a {cls}: {text}"
    return f"a photo of {text}, a different {cls}, high detail, realistic"


def identity_edit_prompt(object_name: str) -> str:
    """ID-Sim Appendix A.2.2: ``"Photo of a <object>"`` for FLUX Fill identity edits."""
    return f"Photo of a {object_name.strip().replace('_', ' ')}"


def context_edit_prompt(item_id: str, seed: int = 0, background: str | None = None,
                        lighting: str | None = None) -> str:
    """ID-Sim Appendix A.2.1 context-edit prompt; background/lighting sampled per item."""
    rng = make_rng(seed, "context_edit", item_id)
    bg = background or BACKGROUNDS[int(rng.integers(len(BACKGROUNDS)))]
    li = lighting or LIGHTINGS[int(rng.integers(len(LIGHTINGS)))]
    return CONTEXT_EDIT_TEMPLATE.format(background=bg, lighting=li)
