"""Simulated personalization "methods" with known identity drift (the ``mini`` stand-in for the
paper's seven generators), written in the FPR layout so they are scored like any user's method.

Each FPR identity of the procedural world is re-rendered per method in ``n_per_id`` generated
images. A method is ``(name, drift, context)``:

- ``drift`` t in [0, 1]: the identity moves a fraction t towards a *sibling* of the same species
  (:func:`~nearid_lib.data.galleries.blend_members`; the sibling is a fixed, unseen member of the
  species drawn by the galleries' own rule, the same for every method), so t = 0 keeps every
  identity attribute and t = 1 renders another member of the species: a "generic" subject of the
  right kind -- the identity drift the paper measures;
- ``context``: ``"new"`` = a new pose and background (the same new contexts for every method, a
  paired design: drift methods differ only in t); ``"reference"`` = the pose and background of
  the identity's first reference (the IP-Adapter-Plus behaviour the paper describes: nearly the
  reference's layout and background, identity details lost); ``"paste"`` = the copy-paste
  method of the paper's Section 5.1: the reference's object pixels (reference k = i mod n_refs)
  pasted at the same place onto a new background.

Poses and backgrounds are drawn with the galleries' own knobs (``world.gallery_*``,
:mod:`nearid_lib.data.galleries`), so generated images live in the galleries' world. True drift is
written into ``generated_data.csv`` (columns ``drift``, ``context``), so a notebook can check a
protocol's verdicts against the truth.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd
from PIL import Image

from ..data import world as W
from ..data.build import world_fingerprint
from ..data.galleries import blend_members, fpr_scene, fpr_view, gallery_background, gallery_member, sample_gallery_view
from ..data.fpr_layout import FPRLayoutError, load_fpr_split, write_fpr_table
from ..io_utils import atomic_write, write_json
from ..runtime.runmeta import code_fingerprint

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["DEFAULT_METHODS", "fpr_identity", "reference_view", "simulate_methods", "render_generated"]

DEFAULT_METHODS: tuple[tuple[str, float, str], ...] = (
    ("copy_paste", 0.0, "paste"),
    ("faithful", 0.0, "new"),
    ("drift_low", 0.25, "new"),
    ("drift_mid", 0.5, "new"),
    ("drift_high", 0.8, "reference"),
)


def fpr_identity(cfg: Profile, name: str, species: str) -> tuple[dict, dict]:
    """``(identity, species prototype)`` parameters of gallery subject ``name`` of the procedural
    world: the galleries' own rule (:func:`~nearid_lib.data.galleries.gallery_member` at
    ``world.gallery_spread``). A test renders a reference view with these parameters and compares
    it with the stored reference image pixel for pixel."""
    return gallery_member(cfg.seed, name, species, float(cfg.world.gallery_spread))


def reference_view(cfg: Profile, name: str, k: int) -> tuple[dict, np.ndarray]:
    """The pose and background (float RGB) of the k-th image of gallery subject ``name`` (the world
    builder's keys: references are k < refs_per_id)."""
    wc = cfg.world
    # the builder's own derivations, so a re-rendered reference equals the stored image
    return fpr_view(cfg, name, k), gallery_background(cfg, bool(wc.held_out_backgrounds), name, fpr_scene(cfg, name, k))


def render_generated(cfg: Profile, name: str, species: str, drift: float, context: str, i: int,
                     ref_image: np.ndarray | None = None, ref_mask: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """One generated image (uint8 RGB, bool mask) of identity ``name`` by a method with ``drift``
    and ``context`` (see the module docstring); ``i`` indexes the identity's generations."""
    ident, _ = fpr_identity(cfg, name, species)
    new_view = sample_gallery_view(cfg, "fpr_gen_view", name, i)
    # New contexts come from the held-out background pool too: never a gallery/reference background.
    new_bg = gallery_background(cfg, True, "fpr_gen", name, i)
    if context == "paste":
        if ref_image is None or ref_mask is None:
            raise ValueError("render_generated: context='paste' needs the reference image and mask")
        m = ref_mask.astype(bool)
        out = np.where(m[..., None], ref_image.astype(np.float64) / 255.0, new_bg)
        return W.to_uint8(out), m
    # the sibling: an unseen member of the species (its own key, the galleries' rule)
    sib, _ = gallery_member(cfg.seed, f"{name}__sibling", species, float(cfg.world.gallery_spread))
    gen_ident = blend_members(ident, sib, float(drift))
    if context == "new":
        view, bg = new_view, new_bg
    elif context == "reference":
        view, bg = reference_view(cfg, name, 0)
    else:
        raise ValueError(f"unknown context {context!r}; valid: new, reference, paste")
    img, mask, _ = W.render_scene(gen_ident, view, bg)
    return W.to_uint8(img), mask


def simulate_methods(cfg: Profile, root: str | os.PathLike, methods: Sequence[tuple[str, float, str]] | None = None,
                     n_per_id: int = 4, force: bool = False) -> Path:
    """Render every simulated method for every FPR identity of the world at ``root`` (the dataset
    root, ``data_dir(profile)/"nearid"``) into ``fpr/generated/<method>/`` with one
    ``generated_data.csv`` per method there and all methods in ``fpr/generated_data.csv`` (paths
    relative to the dataset root; columns name, species, file_path, ref_path, mask_path, method,
    drift, context). Skips the work if a finished run with the same settings exists. Returns the
    path of the combined CSV."""
    root = Path(root)
    methods = tuple(tuple(m) for m in (methods or DEFAULT_METHODS))
    split = load_fpr_split(root / "fpr")
    out_csv = root / "fpr" / "generated_data.csv"
    fp = {"seed": int(cfg.seed), "methods": [list(m) for m in methods], "n_per_id": int(n_per_id),
          "world_size": int(cfg.world.image_size),
          # the galleries' settings and code: generated images live in the galleries' world
          "galleries": world_fingerprint(cfg)["galleries"], "code": code_fingerprint("fpr/methods.py"),
          "identities": sorted(split.train.name.unique().tolist())}
    fp_path = root / "fpr" / "generated" / "_settings.json"
    if not force and out_csv.exists() and fp_path.exists() and json.loads(fp_path.read_text()) == fp:
        return out_csv
    refs = split.train.groupby("name", sort=True)
    rows = []
    lvl = int(getattr(cfg.world, "png_compress", 3))
    for mname, drift, context in methods:
        mrows = []
        for name, grp in refs:
            grp = grp.reset_index(drop=True)
            species = grp.species.iloc[0]
            ref_path_rel = os.path.relpath(grp.ref_path.iloc[0], root)
            for i in range(n_per_id):
                r_img = r_mask = None
                if context == "paste":
                    k = i % len(grp)
                    if "mask_path" not in grp.columns or not grp.mask_path.iloc[k]:
                        raise FPRLayoutError(f"{root / 'fpr' / 'train_data.csv'}: copy-paste needs mask_path "
                                             f"for {grp.file_path.iloc[k]}")
                    r_img = np.asarray(Image.open(grp.file_path.iloc[k]).convert("RGB"))
                    r_mask = np.asarray(Image.open(grp.mask_path.iloc[k]).convert("L")) > 127
                img, mask = render_generated(cfg, name, species, drift, context, i, r_img, r_mask)
                rel = f"fpr/generated/{mname}/{name}__{i:02d}.png"
                mrel = f"fpr/generated/{mname}/mask/{name}__{i:02d}.png"
                atomic_write(root / rel, lambda p, a=img: Image.fromarray(a).save(p, format="PNG", compress_level=lvl))
                atomic_write(root / mrel, lambda p, a=mask: Image.fromarray(a.astype(np.uint8) * 255, "L").save(
                    p, format="PNG", compress_level=lvl))
                mrows.append({"name": name, "species": species, "file_path": rel, "ref_path": ref_path_rel,
                              "mask_path": mrel, "method": mname, "drift": float(drift), "context": context})
        write_fpr_table(pd.DataFrame(mrows), root / "fpr" / "generated" / mname / "generated_data.csv",
                        kind="generated")
        rows += mrows
    write_fpr_table(pd.DataFrame(rows), out_csv, kind="generated")
    write_json(fp, fp_path)
    return out_csv
