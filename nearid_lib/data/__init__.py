"""Datasets: the on-disk NearID schema and its loader, the procedural NearID-mini world and its
builder, loaders for the released datasets, and the papers' curation functions.

Public API::

    from nearid_lib.data import load_nearid, build_world, NearIDData, DataError
    root = build_world(get_profile("mini"))          # data_dir("mini") / "nearid"
    data = load_nearid(root)                          # validated tables + image()/mask()
"""
from __future__ import annotations

from .schema import COLUMNS, SCHEMA_VERSION, DataError, NearIDData, is_complete, load_nearid, \
    read_mask, read_rgb, validate_images

__all__ = ["load_nearid", "NearIDData", "DataError", "SCHEMA_VERSION", "COLUMNS", "read_rgb",
           "read_mask", "validate_images", "is_complete", "build_world", "nearid_root"]


def build_world(cfg, root=None, **kw):
    """Build the procedural world (see :func:`nearid_lib.data.build.build_world`)."""
    from .build import build_world as _bw

    return _bw(cfg, root, **kw)


def nearid_root(profile: str):
    """Default dataset root of a profile: ``data_dir(profile) / "nearid"``."""
    from ..paths import data_dir

    return data_dir(profile) / "nearid"
