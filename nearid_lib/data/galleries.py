"""The FPR galleries of the procedural world (FPR paper Sec. 3.2 and 4.1): species of visually
similar subjects, each with reference images and gallery images, in the FPR layout.

**Fine-grained by construction.** A species is a prototype identity. Its members share the
prototype's *species traits* (class, pattern type, marking shape, shape variant: the global
attributes a Re-ID gallery's "near-duplicates" share, FPR Sec. 3.2) and differ in individual detail
(pattern layout, marking placement and size, colours, part proportions: the "subtle, localized
details" that tell individuals apart). A member lies ``world.gallery_spread`` of the way from the
prototype to an individual draw of the same traits (:func:`blend_members`, continuous in every
detail, so the spread is a smooth difficulty knob); 0 would make every member the prototype.

**Knobs of their own.** The galleries' pose and lighting change (``world.gallery_view_strength``),
object size (``world.gallery_object_frac``) and background salience and depth of field
(``world.gallery_bg_salience``, ``world.gallery_bg_blur``) are not the NearID world's: recalibrating
one paper's analogue never moves the other's (docs/mini.md, "FPR galleries"). The simulated
methods (:mod:`nearid_lib.fpr.methods`) render their images with the same knobs.

**Splits.** The world's galleries (``split="test"``: identities ``fpr_<species>_<j>``, built with
the test split, judged once) and calibration galleries (``split="val"``: ``fprval_<species>_<j>``,
other prototypes and members from disjoint random streams, the same rules;
``benchmarks/calibrate_galleries.py``). Every draw is keyed by the item, never by the order of work.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

from ..runtime.seeding import make_rng
from . import backgrounds as B
from . import world as W
from .draws import world_classes
from .identity import sample_pattern
from .jobs import save_png

__all__ = ["GALLERY_SPLITS", "gallery_species", "gallery_items", "species_prototype", "gallery_member",
           "blend_members", "fpr_repeats", "fpr_scene", "fpr_view", "sample_gallery_view", "gallery_background",
           "gallery_job"]

GALLERY_SPLITS = ("val", "test")


def _check_split(split: str) -> str:
    if split not in GALLERY_SPLITS:
        raise ValueError(f"gallery split {split!r}: choose from {', '.join(GALLERY_SPLITS)}")
    return split


def gallery_species(wc) -> list[tuple[str, str]]:
    """``(species, class)`` of the world's ``n_species`` species (round-robin over the classes; a
    class used twice gets a numbered species, e.g. ``bird1``)."""
    classes = world_classes(wc)
    return [(classes[si % len(classes)] + (f"{si // len(classes)}" if si >= len(classes) else ""),
             classes[si % len(classes)]) for si in range(int(wc.n_species))]


def gallery_items(cfg, split: str = "test") -> list[tuple[str, str]]:
    """``(name, species)`` of every gallery subject of ``split``, species by species."""
    prefix = "fpr" if _check_split(split) == "test" else "fprval"
    return [(f"{prefix}_{sp}_{j:03d}", sp) for sp, _ in gallery_species(cfg.world)
            for j in range(int(cfg.world.ids_per_species))]


def _class_of(species: str) -> str:
    return species.rstrip("0123456789")


def _split_of(name: str) -> str:
    return "val" if name.startswith("fprval_") else "test"


def species_prototype(seed: int, species: str, split: str = "test") -> dict[str, Any]:
    """The prototype identity of ``species`` (the test split keeps the world's original key)."""
    keys = ("fpr_species", species) if _check_split(split) == "test" else ("fpr_species", "val", species)
    return W.sample_identity(make_rng(seed, *keys), _class_of(species))


def _with_traits(indiv: dict[str, Any], proto: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """``indiv`` with the prototype's species traits: pattern type (its layout redrawn from ``rng``
    for that type), marking shape and shape variant."""
    out = copy.deepcopy(indiv)
    out["geom"]["v1"] = proto["geom"]["v1"]
    out["marking"]["shape"] = proto["marking"]["shape"]
    out["pattern"] = sample_pattern(rng, out["colors"]["body"], proto["pattern"]["type"])
    return out


def _lerp(a, b, t: float):
    return [round(float(x + (y - x) * t), 5) for x, y in zip(a, b)]


def blend_members(a: dict[str, Any], b: dict[str, Any], t: float) -> dict[str, Any]:
    """Identity ``a`` moved a fraction ``t`` towards ``b``, two identities with the same species
    traits: every detail moves linearly (geometry, colours, pattern layout and colour, marking
    placement, size and colour; spots pairwise, ``a``'s count kept), so a member's distance from its
    prototype, and a generated image's drift, are continuous. Raises ValueError when the traits differ."""
    for path, x, y in ((("class_name",), a["class_name"], b["class_name"]),
                       (("geom", "v1"), a["geom"]["v1"], b["geom"]["v1"]),
                       (("pattern", "type"), a["pattern"]["type"], b["pattern"]["type"]),
                       (("marking", "shape"), a["marking"]["shape"], b["marking"]["shape"])):
        if x != y:
            raise ValueError(f"blend_members: {'.'.join(path)} differs ({x!r} vs {y!r}): not one species")
    t = float(t)
    out = copy.deepcopy(a)
    for k in ("aw", "ah", "p1", "p2", "p3"):
        out["geom"][k] = round(float(a["geom"][k] + (b["geom"][k] - a["geom"][k]) * t), 4)
    for k in a["colors"]:
        out["colors"][k] = _lerp(a["colors"][k], b["colors"][k], t)
    pa, pb = a["pattern"], b["pattern"]
    out["pattern"]["color"] = _lerp(pa["color"], pb["color"], t)
    for k in ("freq", "angle", "phase", "width"):
        out["pattern"][k] = round(float(pa[k] + (pb[k] - pa[k]) * t), 4)
    if "spots" in pa and "spots" in pb:
        out["pattern"]["spots"] = [_lerp(s, pb["spots"][i], t) if i < len(pb["spots"]) else list(s)
                                   for i, s in enumerate(pa["spots"])]
    ma, mb = a["marking"], b["marking"]
    for k in ("x", "y", "r", "rot"):
        out["marking"][k] = round(float(ma[k] + (mb[k] - ma[k]) * t), 4)
    out["marking"]["color"] = _lerp(ma["color"], mb["color"], t)
    return out


def gallery_member(seed: int, name: str, species: str, spread: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(member, prototype)``: gallery subject ``name`` of ``species``, ``spread`` of the way from
    the prototype to its individual draw (module docstring). The split follows the name."""
    split = _split_of(name)
    proto = species_prototype(seed, species, split)
    indiv = W.sample_identity(make_rng(seed, "fpr_id", name), _class_of(species))
    indiv = _with_traits(indiv, proto, make_rng(seed, "fpr_id_pattern", name))
    return blend_members(proto, indiv, spread), proto


def fpr_repeats(cfg, name: str, k: int) -> int:
    """The earlier image whose shot the k-th (0-based; references first) image of gallery subject
    ``name`` repeats, or ``k``: with probability ``world.gallery_dup_p`` a gallery image after the
    first is a near-duplicate of an earlier gallery image (same scene, pose nudged, like a burst),
    the duplicates a curated gallery drops (FPR Table 2, "Ours")."""
    wc = cfg.world
    p, first = float(wc.gallery_dup_p), int(wc.refs_per_id)
    if p > 0 and k > first:
        rng = make_rng(cfg.seed, "fpr_dup", name, k)
        if rng.random() < p:
            return first + int(rng.integers(k - first))
    return k


def fpr_scene(cfg, name: str, k: int) -> int:
    """The image index whose background the k-th gallery image uses (follows :func:`fpr_repeats`)."""
    while (j := fpr_repeats(cfg, name, k)) != k:
        k = j
    return k


def sample_gallery_view(cfg, *keys) -> dict[str, float]:
    """A pose + lighting drawn with the galleries' own object size and view change."""
    wc = cfg.world
    return W.sample_view(make_rng(cfg.seed, *keys), tuple(wc.gallery_object_frac), float(wc.gallery_view_strength))


def fpr_view(cfg, name: str, k: int) -> dict[str, float]:
    """The view of the k-th (0-based; references first) image of gallery subject ``name`` (a
    near-duplicate's is the repeated image's, nudged by less than 2% of the frame)."""
    j = fpr_repeats(cfg, name, k)
    if j != k:
        rng = make_rng(cfg.seed, "fpr_dup_nudge", name, k)
        v = dict(fpr_view(cfg, name, j))
        for key, d in (("cx", 0.01), ("cy", 0.01), ("rot", 0.02), ("gain", 0.02)):
            v[key] = round(v[key] + float(rng.uniform(-d, d)), 4)
        return v
    return sample_gallery_view(cfg, "fpr_view", name, k)


def gallery_background(cfg, held_out: bool, *keys) -> np.ndarray:
    """The float RGB background of ``keys`` with the galleries' own depth of field and salience."""
    wc = cfg.world
    spec = B.sample_background_spec(make_rng(cfg.seed, "bg", *keys), held_out=held_out)
    img = B.defocus(B.render_background(spec, wc.image_size), float(wc.gallery_bg_blur) * wc.image_size)
    return B.desaturate_scene(img, float(wc.gallery_bg_salience))


def gallery_job(args) -> tuple[str, dict]:
    """Render one gallery subject ``(cfg, root, (name, species))``: its references then its gallery
    images with masks, written atomically under ``root/fpr/``; returns its key and table rows."""
    cfg, root, (name, species) = args
    wc, lvl = cfg.world, cfg.world.png_compress
    ident, _ = gallery_member(cfg.seed, name, species, float(wc.gallery_spread))
    held = bool(wc.held_out_backgrounds)
    rows: dict[str, list] = {"train": [], "gallery": []}
    ref0 = ""
    for k in range(int(wc.refs_per_id) + int(wc.gallery_per_id)):
        kind = "train" if k < wc.refs_per_id else "gallery"
        bg = gallery_background(cfg, held, name, fpr_scene(cfg, name, k))
        img, mask, _ = W.render_scene(ident, fpr_view(cfg, name, k), bg)
        tag = "ref" if kind == "train" else "gal"
        p = save_png(Path(root), f"fpr/img/{name}_{tag}{k}.png", W.to_uint8(img), lvl)
        m = save_png(Path(root), f"fpr/mask/{name}_{tag}{k}.png", mask, lvl)
        ref0 = ref0 or p
        rows[kind].append({"name": name, "species": species, "file_path": p, "ref_path": ref0, "mask_path": m})
    return name, rows
