"""FPR's background removal (:mod:`nearid_lib.fpr.bg_removal`): carvekit's networks at the FPR
authors' settings with their weights read from the hub mirror, equal to carvekit's own
``HiInterface`` built with the same weights; the copies written once, per rank, resumable.

The weights are the dry run's stand-ins (:func:`tools.paper_fixtures.fpr.write_carvekit_standin`:
every key and shape of the real networks, seeded values) and the networks run at 64 px (the dry
run's ``retrieval.bg_sizes``): the code path is carvekit's, only the sizes and the weights are small."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from PIL import Image

from nearid_lib import hub
from nearid_lib.fpr import bg_removal as B
from tools.paper_fixtures.fpr import write_carvekit_standin

SIZES = (64, 64)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    d = tmp_path_factory.mktemp("hub")
    assert write_carvekit_standin(d) == [B.TRACER_REPO, B.FBA_REPO]
    assert (d / B.TRACER_REPO / B.TRACER_FILE).stat().st_size < 2_000_000          # a stand-in, not 267 MB
    return d


def _images(tmp_path, n):
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        p = tmp_path / f"img{i}.jpg"
        Image.fromarray(rng.integers(0, 255, (36 + 4 * i, 48, 3), dtype=np.uint8)).save(p)
        out.append(str(p))
    return out


def test_weights_come_from_the_mirror_with_their_release_check(mirror, tmp_path, monkeypatch):
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(mirror))
    assert B.weights_reason() is None
    w = B.resolve_weights()
    assert w.tracer == mirror / B.TRACER_REPO / B.TRACER_FILE and w.fba == mirror / B.FBA_REPO / B.FBA_FILE
    assert w.matches_release == {"tracer_b7": False, "fba": False} and "NOT carvekit release" in w.describe()
    from carvekit.utils import download_models

    monkeypatch.setitem(download_models.MODELS_CHECKSUMS, "fba_matting.pth", hashlib.sha512(w.fba.read_bytes()).hexdigest())
    assert B.resolve_weights().matches_release["fba"] is True
    # not in the mirror: the reason names the download
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(tmp_path / "empty"))
    why = B.weights_reason()
    assert why and "hf download Carve/tracer_b7" in why


def test_interface_equals_carvekits_hiinterface_at_the_authors_settings(mirror, tmp_path, monkeypatch):
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(mirror))
    w = B.resolve_weights()
    ours = B.build_interface(w, "cpu", *SIZES)
    # carvekit's own HiInterface with the authors' arguments, its downloader pointed at the same files
    import carvekit.ml.wrap.fba_matting as fm
    import carvekit.ml.wrap.tracer_b7 as tm
    from carvekit.api.high import HiInterface

    monkeypatch.setattr(tm, "tracer_b7_pretrained", lambda: w.tracer)
    monkeypatch.setattr(fm, "fba_pretrained", lambda: w.fba)
    s = dict(B.AUTHORS_SETTINGS, seg_mask_size=SIZES[0], matting_mask_size=SIZES[1])
    theirs = HiInterface(device="cpu", **s)
    img = _images(tmp_path, 1)[0]
    rgb, alpha = B.remove_one(ours, img)
    ref = theirs([Image.open(img).convert("RGB")])[0]
    assert ref.mode == "RGBA" and rgb.mode == "RGB" and alpha.mode == "L"
    assert np.array_equal(np.asarray(rgb), np.asarray(ref.convert("RGB")))
    assert np.array_equal(np.asarray(alpha), np.asarray(ref.getchannel("A")))
    # the composite the encoders see: the image where the matte is 1, grey 130 where it is 0
    a = np.asarray(alpha)
    assert (np.asarray(rgb)[a == 0] == 130).all()


def test_copies_are_written_once_per_rank_and_resume(mirror, tmp_path, monkeypatch):
    import pandas as pd

    monkeypatch.setenv(hub.HUB_DIR_ENV, str(mirror))
    monkeypatch.setenv("NEARID_DATA", str(tmp_path / "data"))
    paths = _images(tmp_path, 3)
    logs = []
    r0 = B.remove_backgrounds(paths, "paper", SIZES, rank=0, world=2, log=logs.append)
    r1 = B.remove_backgrounds(paths, "paper", SIZES, rank=1, world=2, log=logs.append)
    assert r0["root"] == r1["root"] and r0["written"] + r1["written"] == 3 and {r0["images"], r1["images"]} == {1, 2}
    root = tmp_path / "data" / "paper" / "fpr" / "_bg_removed"
    assert sorted(p.name for p in root.iterdir()) == [r0["root"].split("/")[-1]]
    settings = json.loads((root / r0["root"].split("/")[-1] / "settings.json").read_text())
    assert settings["settings"]["trimap_prob_threshold"] == 231 and settings["sizes"] == list(SIZES)
    # a second run writes nothing and never builds the networks
    monkeypatch.setattr(B, "build_interface", lambda *a, **k: (_ for _ in ()).throw(AssertionError("rebuilt")))
    assert B.remove_backgrounds(paths, "paper", SIZES)["written"] == 0
    t = pd.DataFrame({"name": ["a", "a", "b"], "file_path": paths, "mask_path": ["m"] * 3})
    (out,), made_by = B.removed_tables([t], "paper", SIZES)
    assert "mask_path" not in out and all(p.endswith(".png") and "_bg_removed" in p for p in out.file_path)
    assert Image.open(out.file_path[0]).size == Image.open(paths[0]).size and "NOT carvekit" in made_by
    # other sizes are another setting: their own folder
    assert B.removed_root("paper", B.resolve_weights(), (32, 32)) != B.removed_root("paper", B.resolve_weights(), SIZES)
