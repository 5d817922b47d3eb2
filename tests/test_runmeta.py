"""Run metadata written beside every notebook's outputs."""
from __future__ import annotations

import json

from nearid_lib import config as C, runmeta


def test_run_metadata(tmp_path):
    p = runmeta.write_run_metadata(tmp_path, {"PROFILE": "smoke"}, C.get_profile("smoke"))
    meta = json.loads(p.read_text())
    assert meta["params"]["PROFILE"] == "smoke"
    assert meta["profile"]["name"] == "smoke"
    assert set(meta["git"]) == {"sha", "dirty"}
    assert meta["packages"]["torch"].startswith("2.13.0")
