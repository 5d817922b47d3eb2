"""Datasets: the on-disk NearID schema and its loader, the procedural NearID-mini world and its
builder, loaders for the released datasets, and the papers' curation functions.

Public API::

    from nearid_lib.data import load_nearid, build_world, NearIDData, DataError
    root = build_world(get_profile("mini"))          # data_dir("mini") / "nearid"
    data = load_nearid(root)                          # validated tables + image()/mask()
    data = load_profile_data(cfg)                     # both: the dataset a profile's notebooks read
    root = prepare_profile_data(cfg)                  # notebook 01: build the world / materialise the release
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..paths import data_dir
from .build import build_world
from .released import load_released_from_hub
from .schema import (
    COLUMNS,
    SCHEMA_VERSION,
    DataError,
    NearIDData,
    is_complete,
    load_nearid,
    read_mask,
    read_rgb,
    validate_images,
)

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["load_nearid", "NearIDData", "DataError", "SCHEMA_VERSION", "COLUMNS", "read_rgb",
           "read_mask", "validate_images", "is_complete", "build_world", "nearid_root", "load_profile_data",
           "prepare_profile_data"]


def nearid_root(profile: str):
    """Default dataset root of a profile: ``data_dir(profile) / "nearid"``."""
    return data_dir(profile) / "nearid"


def prepare_profile_data(cfg: Profile, progress: bool = True):
    """Make the dataset of a profile and return its root: the procedural world
    (:func:`build_world`) or, for ``world.source="released"``, the released datasets read through
    the hub resolver and materialised into the same schema
    (:func:`nearid_lib.data.released.load_released_from_hub`). Both resume an interrupted run and
    return a finished one untouched."""
    if cfg.world.source == "procedural":
        return build_world(cfg, progress=progress)
    if cfg.world.source == "released":
        return load_released_from_hub(cfg, nearid_root(cfg.name), progress=progress)
    raise ValueError(f"world.source must be 'procedural' or 'released', got {cfg.world.source!r}")


def load_profile_data(cfg: Profile, build: bool = True, **kw) -> NearIDData:
    """The NearID-schema dataset of a profile through :func:`load_nearid` (``kw``), made first when
    ``build`` (:func:`prepare_profile_data`), else the data already at :func:`nearid_root` (what
    notebook 01 made)."""
    root = nearid_root(cfg.name)
    if build and not (cfg.world.source == "released" and is_complete(root)):
        # a materialised release is taken as notebook 01 left it (no hub read, no mask model)
        root = prepare_profile_data(cfg)
    return load_nearid(root, **kw)
