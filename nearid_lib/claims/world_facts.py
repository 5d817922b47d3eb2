"""Facts of a profile's world that decide whether a claim can be a test there, keyed by quantity.

Two registries, per profile, read by every claim the same way (never set on one claim):

* :data:`CALIBRATED`: the quantities a world knob was tuned to hit, with the target (mini: the frozen
  encoder's val SSRs and MTG SSR, docs/mini.md "Calibration"; the specialised encoder's oracle mAP on
  the FPR galleries, docs/mini.md "FPR galleries"). A claim whose **every** quantity is a calibration
  target states what the world was made to satisfy: :func:`calibration_target` names the targets.
* :data:`BY_CONSTRUCTION`: quantity patterns (:func:`fnmatch.fnmatchcase`) whose value the way the
  data is made decides, whatever the model knows, with why. A claim that reads **any** such quantity
  is true (or false) by construction: :func:`construction_reasons` gives the reasons.

:func:`nearid_lib.claims.evaluate_claim` writes both into a claims row (columns ``calibrated`` and
``by_construction``) and :mod:`nearid_lib.claims.exclusions` applies them in the report.
"""
from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Sequence

__all__ = ["Target", "CALIBRATED", "BY_CONSTRUCTION", "EDGES_EASIER", "COPY_PASTE", "calibration_target",
           "construction_reasons"]


@dataclass(frozen=True)
class Target:
    """What a calibrated quantity was tuned to: ``measure`` (a noun, e.g. "frozen val SSR"),
    ``relation`` ("of", "<=" or "" when ``value`` says it), ``value`` and a ``label`` that tells two
    targets of one measure apart."""
    measure: str
    relation: str
    value: str
    label: str = ""


# per profile, in the order the targets are named (the full images' SSR before the FG-only one)
CALIBRATED: dict[str, dict[str, Target]] = {
    "mini": {
        "frozen.full.main.ssr": Target("frozen val SSR", "of", "30.7 +- 5", "full"),
        "frozen.fg.main.ssr": Target("frozen val SSR", "of", "64.7 +- 8", "FG-only"),
        "frozen.mtg.ssr": Target("frozen MTG SSR", "<=", "5"),
        "specialised.oracle.map": Target("specialised encoder's oracle mAP on the val galleries", "of",
                                         "0.80 +- 0.08 (3-seed mean)"),
        "general.oracle.map": Target("general encoder's oracle mAP on the val galleries", "",
                                     "below the specialised encoder's (a constraint of the calibration)"),
    },
}

EDGES_EASIER = ("the `edges` generator redraws every colour of the object at a far hue (6 attributes, a quarter "
                "to half of the hue wheel; nearid_lib.data.perturb) where the training generators' edits change 2 "
                "to 4: a larger identity change by construction, so 'no drop' on it cannot fail for the reason the "
                "paper's claim is about")
COPY_PASTE = ("copy-paste pastes the reference's own object pixels onto a new background here, so its query "
              "shows the oracle's reference object unchanged and its mAP follows the oracle's "
              "(specialised.oracle.map), not the encoder's grasp of identity")

# per profile: (quantity pattern, why a comparison reading it is decided by how the data is made)
BY_CONSTRUCTION: dict[str, tuple[tuple[str, str], ...]] = {
    "mini": (
        ("*.*.structure.*", EDGES_EASIER),        # the structure-conditioned group is the `edges` generator
        ("*.copy_paste.map", COPY_PASTE),         # FPR's copy-paste method pastes the reference's pixels
    ),
}


def calibration_target(profile: str, quantities: Sequence[str]) -> str:
    """"the world was calibrated to ..." when every one of ``quantities`` is a calibration target of
    ``profile``'s world (:data:`CALIBRATED`), naming the targets; "" otherwise."""
    targets = CALIBRATED.get(profile, {})
    if not quantities or any(q not in targets for q in quantities):
        return ""
    groups: dict[tuple[str, str], list[Target]] = {}
    for q, t in targets.items():                   # the registry's order, not the criterion's
        if q in quantities:
            groups.setdefault((t.measure, t.relation), []).append(t)
    parts = []
    for (measure, relation), ts in groups.items():
        rel = f" {relation}" if relation else ""
        if len(ts) == 1:
            parts.append(f"a {measure}{rel} {ts[0].value}")
        else:
            parts.append(f"{measure}s{rel} " + " and ".join(f"{t.value} ({t.label})" for t in ts))
    return "the world was calibrated to " + " and ".join(parts)


def construction_reasons(profile: str, quantities: Sequence[str]) -> str:
    """The reasons of :data:`BY_CONSTRUCTION` whose pattern one of ``quantities`` matches in
    ``profile`` ("; "-joined, each once), "" when none does."""
    out: list[str] = []
    for pattern, why in BY_CONSTRUCTION.get(profile, ()):
        if any(fnmatchcase(q, pattern) for q in quantities) and why not in out:
            out.append(why)
    return "; ".join(out)
