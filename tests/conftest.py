"""Shared fixtures. The smoke world is built once per test session into a temporary folder
(a few seconds), so tests never depend on what a notebook run left in ``data/``."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smoke_world(tmp_path_factory):
    """``NearIDData`` of the smoke profile's world, built fresh for this session."""
    from nearid_lib.config import get_profile
    from nearid_lib.data import build_world, load_nearid

    root = build_world(get_profile("smoke"), root=tmp_path_factory.mktemp("smoke") / "nearid",
                       progress=False)
    return load_nearid(root)


@pytest.fixture
def fresh_clone(tmp_path, monkeypatch):
    """A fresh clone's output folders in ``tmp_path`` (data, cache, build, figures through the
    ``NEARID_*`` variables), no ``NEARID_SET`` overrides, cwd = ``tmp_path``; returns ``tmp_path``."""
    for var, sub in (("NEARID_DATA", "data"), ("NEARID_CACHE", "cache"), ("NEARID_OUT", "build"),
                     ("NEARID_FIGURES", "figures")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.delenv("NEARID_SET", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path
