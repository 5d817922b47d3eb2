"""Datasets: the on-disk NearID schema and its loader, the procedural NearID-mini world and its
builder, loaders for the released datasets, and the papers' curation functions.

Public API::

    from nearid_lib.data import load_nearid, build_world, NearIDData, DataError
    root = build_world(get_profile("mini"))          # data_dir("mini") / "nearid"
    data = load_nearid(root)                          # validated tables + image()/mask()
    data = load_profile_data(cfg)                     # both: the dataset a profile's notebooks read
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..paths import data_dir
from .build import build_world
from .schema import COLUMNS, SCHEMA_VERSION, DataError, NearIDData, is_complete, load_nearid, \
    read_mask, read_rgb, validate_images

if TYPE_CHECKING:
    from ..config import Profile

__all__ = ["load_nearid", "NearIDData", "DataError", "SCHEMA_VERSION", "COLUMNS", "read_rgb",
           "read_mask", "validate_images", "is_complete", "build_world", "nearid_root", "load_profile_data"]


def nearid_root(profile: str):
    """Default dataset root of a profile: ``data_dir(profile) / "nearid"``."""
    return data_dir(profile) / "nearid"


def load_profile_data(cfg: Profile, build: bool = True, **kw) -> NearIDData:
    """The NearID-schema dataset of a profile through :func:`load_nearid` (``kw``): the procedural
    world, built or resumed first when ``build`` (:func:`build_world`), or the data already at
    :func:`nearid_root` (released data, or a world an upstream notebook built)."""
    procedural = cfg.world.source == "procedural"
    return load_nearid(build_world(cfg) if procedural and build else nearid_root(cfg.name), **kw)
