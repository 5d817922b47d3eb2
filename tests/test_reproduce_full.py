"""``make reproduce-full``: every notebook with ID-Sim's Supp. Tables 5-7 and 9 and five seeds per
trained row, into folders of its own (never the committed figures/ of ``make reproduce``)."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from nearid_lib.config import env_overrides, get_profile

ROOT = Path(__file__).resolve().parents[1]


def _dry(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("NEARID_SET", "NEARID_THREADS", "MAKEFLAGS")}
    res = subprocess.run(["make", "-n", "--no-print-directory", "reproduce-full", "VENV=/nonexistent", "-o",
                          "/nonexistent/.nearid-installed", *args], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True)
    return res.stdout


def test_its_settings_and_its_own_folders(monkeypatch):
    out = _dry()
    nearid_set = re.search(r'NEARID_SET="([^"]*)"', out).group(1)
    assert f'NEARID_OUT="{ROOT}/build/full-mini"' in out
    assert f'NEARID_FIGURES="{ROOT}/build/full-mini/figures"' in out and "NB_OUT=build/full-mini/notebooks" in out
    monkeypatch.setenv("NEARID_SET", nearid_set)
    cfg = get_profile("mini")
    assert cfg.idsim.ablation_tables == ("idsim_table3_data_ablation", "idsim_supp_table5_scale",
                                         "idsim_supp_table6_composition", "idsim_supp_table7_backbone",
                                         "idsim_supp_table8_cls_patch", "idsim_supp_table9_loss")
    assert (cfg.idsim.ablation_seeds, cfg.idsim.n_seeds, cfg.eval.n_seeds) == (5, 5, 5)
    # the mini of `make reproduce` runs two tables at one seed, three seeds elsewhere
    monkeypatch.delenv("NEARID_SET")
    assert get_profile("mini").eval.n_seeds == 3 and len(get_profile("mini").idsim.ablation_tables) == 2
    # a NEARID_SET of one's own applies after them; PROFILE picks the folder
    assert re.search(r'NEARID_SET="[^"]*eval.n_seeds=5; train.lr=1e-3"', _dry("NEARID_SET=train.lr=1e-3"))
    assert env_overrides() == {}
    assert "build/full-smoke/notebooks" in _dry("PROFILE=smoke")
