"""Ecosystem habits (issue 25, item 5): `make lab` works as root, and a mask of the wrong size is an
error naming the file (as the dataset loader's rule says) instead of being silently resized.
The file-mode rule of the atomic writer is tested in test_io_utils.py."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
@pytest.mark.parametrize("uid, root", [("0", True), ("1000", False)])
def test_make_lab_passes_allow_root_only_as_root(tmp_path, uid, root):
    """An `id` on PATH that answers ``uid``: the recipe `make -n lab` would run has --allow-root iff 0."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (fake / "id").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    res = subprocess.run(["make", "-n", "lab"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    line = [ln for ln in res.stdout.splitlines() if "jupyter lab" in ln]
    assert len(line) == 1, res.stdout
    assert ("--allow-root" in line[0]) is root, line[0]


def test_mask_of_another_size_is_an_error_naming_the_file(tmp_path):
    from nearid_lib.fpr.encoders import embed_images, remove_background
    from nearid_lib.models import load_encoder

    img = tmp_path / "img.png"
    Image.new("RGB", (48, 32), (200, 30, 30)).save(img)
    good, bad = tmp_path / "good.png", tmp_path / "bad.png"
    Image.fromarray(np.full((32, 48), 255, np.uint8), "L").save(good)
    Image.fromarray(np.full((16, 24), 255, np.uint8), "L").save(bad)       # half size
    model, _ = load_encoder("efficientnet-lite0", tiny=True)
    assert embed_images(model, [img], masks=[str(good)], background="removed", progress=False).shape[0] == 1
    with pytest.raises(ValueError, match=r"img\.png \(mask .*bad\.png\): mask size \(24, 16\) differs from its "
                                         r"image size \(48, 32\)"):
        embed_images(model, [img], masks=[str(bad)], background="removed", progress=False)
    # the function itself, with a bool mask: same rule
    with pytest.raises(ValueError, match="mask size"):
        remove_background(Image.open(img), np.ones((10, 10), bool))
    out = np.asarray(remove_background(Image.open(img), np.zeros((32, 48), bool)))
    assert (out == out[0, 0]).all() and tuple(out[0, 0]) != (200, 30, 30)
