"""Similarity API and command (issue 25, item 3): ``nearid_lib.similarity(a, b)`` and ``nearid sim``
give the cosine of the encoder's embeddings for two images, two folders of same-named files or a
CSV of pairs; the default encoder is the released NearID model in ``paper`` (read through the hub
resolver, here from a local mirror), the profile's trained NearID head offline when it exists, else
the frozen backbone, and a line always says which model answered."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import nearid_lib
from nearid_lib.cli import main
from nearid_lib.config import get_profile
from nearid_lib.sim import SimilarityInputError


@pytest.fixture
def env(fresh_clone, tmp_path, monkeypatch):
    monkeypatch.delenv("NEARID_HUB_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rng = np.random.default_rng(0)
    for side in ("A", "B"):
        (tmp_path / side).mkdir()
    for i, n in enumerate(["cat.png", "dog.png", "owl.png"]):
        im = rng.integers(0, 255, (40, 56, 3), dtype=np.uint8)
        Image.fromarray(im).save(tmp_path / "A" / n)
        other = np.clip(im.astype(int) + rng.integers(-60, 60, im.shape), 0, 255) if i else im[:, ::-1]
        Image.fromarray(other.astype(np.uint8)).save(tmp_path / "B" / n)
    return tmp_path


def _by_hand(model, a, b):
    ea, eb = model.embed(a).double().numpy(), model.embed(b).double().numpy()
    return (ea * eb).sum(1), ea @ eb.T


def test_folders_lists_csv_equal_the_hand_computed_cosines(env, capsys):
    from nearid_lib.models import load_backbone

    names = ["cat.png", "dog.png", "owl.png"]
    a, b = [str(env / "A" / n) for n in names], [str(env / "B" / n) for n in names]
    model, _ = load_backbone(get_profile("smoke"))
    want, m = _by_hand(model, a, b)

    df = nearid_lib.similarity(env / "A", env / "B", encoder="efficientnet-lite0", profile="smoke")
    assert capsys.readouterr().out.startswith("similarity: answered by efficientnet-lite0 (registered, as profile "
                                              "'smoke' loads it) (tiny random-init)")
    assert df.a.tolist() == a and df.b.tolist() == b
    assert df.similarity.to_numpy() == pytest.approx(want, abs=1e-5)
    assert df.attrs["unpaired_mean"] == pytest.approx((m.sum() - np.trace(m)) / 6, abs=1e-5)
    # lists of PIL images and paths, one pair, a CSV of pairs with paths relative to its folder
    pil = nearid_lib.similarity([Image.open(p) for p in a], b, encoder="efficientnet-lite0", profile="smoke",
                                verbose=False)
    assert pil.similarity.to_numpy() == pytest.approx(want, abs=1e-5)
    one = nearid_lib.similarity(a[1], b[1], encoder="efficientnet-lite0", profile="smoke", verbose=False)
    assert one.similarity.item() == pytest.approx(want[1], abs=1e-5) and "unpaired_mean" not in one.attrs
    sub = env / "lists"
    sub.mkdir()
    pd.DataFrame({"a": ["../A/owl.png", str(env / "A" / "cat.png")], "b": ["../B/owl.png", "../B/dog.png"]}).to_csv(
        sub / "pairs.csv", index=False)
    csv = nearid_lib.similarity(sub / "pairs.csv", encoder="efficientnet-lite0", profile="smoke", verbose=False)
    assert csv.similarity.to_numpy() == pytest.approx([want[2], m[0, 1]], abs=1e-5)


def test_bad_pairs_are_errors_naming_them(env):
    (env / "B" / "dog.png").rename(env / "B" / "dogg.png")
    with pytest.raises(SimilarityInputError, match=r"paired by file name; 1 image\(s\) only in .*\['dog.png'\].*"
                                                   r"1 only in .*\['dogg.png'\]"):
        nearid_lib.similarity(env / "A", env / "B", encoder="efficientnet-lite0", profile="smoke")
    with pytest.raises(SimilarityInputError, match="2 images in a but 1 in b"):
        nearid_lib.similarity(["x.png", "y.png"], ["z.png"], profile="smoke")
    with pytest.raises(SimilarityInputError, match="no such image file 'A/nope.png'"):
        nearid_lib.similarity("A/nope.png", "A/cat.png", profile="smoke")
    with pytest.raises(SimilarityInputError, match="one CSV of pairs"):
        nearid_lib.similarity("A/cat.png", profile="smoke")
    # a degenerate image is named, before any model loads (a file, a PIL image, an array)
    from PIL import Image

    Image.new("RGB", (1, 1)).save(env / "dot.png")
    with pytest.raises(SimilarityInputError, match=r"image '.*dot.png' is 1x1 px, below 8 px"):
        nearid_lib.similarity(env / "dot.png", env / "A" / "cat.png", profile="smoke")
    with pytest.raises(SimilarityInputError, match=r"image \(an in-memory Image\) is 4x40 px"):
        nearid_lib.similarity(Image.new("RGB", (4, 40)), env / "A" / "cat.png", profile="smoke")
    import numpy as np

    with pytest.raises(SimilarityInputError, match=r"image \(an in-memory ndarray\) is 2x2 px"):
        nearid_lib.similarity(np.zeros((2, 2, 3), np.uint8), env / "A" / "cat.png", profile="smoke")


def test_a_folder_and_a_file_and_names_differing_in_extension_are_told_apart(env, capsys):
    """Issue 57: `nearid sim A cat.png` with A a folder said "no such image file 'A'"; x.jpg vs x.png
    in two folders were reported unpaired without a hint."""
    with pytest.raises(SimilarityInputError, match=r"'A' is a folder but 'A/cat.png' is not; give two folders"):
        nearid_lib.similarity("A", "A/cat.png", profile="smoke")
    with pytest.raises(SimilarityInputError, match=r"'B' is a folder but 'A/cat.png' is not"):
        nearid_lib.similarity("A/cat.png", "B", profile="smoke")
    with pytest.raises(SimilarityInputError, match=r"no such image file 'A' \(it is a folder, not an image\)"):
        nearid_lib.similarity(["A"], ["A/cat.png"], profile="smoke")
    assert main(["sim", "A", "A/cat.png", "--profile", "smoke"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nearid sim: error: similarity: 'A' is a folder but") and err.count("\n") == 1
    Image.open(env / "B" / "owl.png").save(env / "B" / "owl.jpg")
    (env / "B" / "owl.png").unlink()
    with pytest.raises(SimilarityInputError, match=r"1 of them differ only in the extension \(e.g. 'owl.png' vs "
                                                   r"'owl.jpg'\): the full file name pairs images"):
        nearid_lib.similarity("A", "B", profile="smoke")
    (env / "B" / "cat.png").rename(env / "B" / "tiger.png")         # a real mismatch: no hint about it
    with pytest.raises(SimilarityInputError) as exc:
        nearid_lib.similarity("A", "B", profile="smoke")
    assert "1 of them differ only in the extension" in str(exc.value) and "tiger" in str(exc.value)


def test_default_offline_is_the_trained_head_else_the_frozen_backbone(env, capsys):
    from nearid_lib.models import MAPHead, load_backbone, load_encoder, save_head
    from nearid_lib.paths import checkpoint_dir

    a, b = str(env / "A" / "dog.png"), str(env / "B" / "dog.png")
    cfg = get_profile("smoke")
    frozen = nearid_lib.similarity(a, b, profile="smoke")
    line = capsys.readouterr().out.strip()
    assert line.startswith("similarity: answered by frozen efficientnet-lite0 backbone of profile 'smoke' (tiny "
                           "random-init); no trained NearID head at ") and line.count("\n") == 0
    assert frozen.similarity.item() == pytest.approx(_by_hand(load_backbone(cfg)[0], [a], [b])[0][0], abs=1e-5)
    # a head in the profile's checkpoint folder (what `nearid train` writes) answers from then on
    bb = load_backbone(cfg)[0]
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    head = MAPHead(bb.token_dim, num_heads=1, out_dim=16)
    ck = checkpoint_dir("smoke") / "nearid"
    save_head(head, ck, backbone={"name": cfg.backbone.name, "tiny": True, "image_size": cfg.backbone.image_size})
    got = nearid_lib.similarity(a, b, profile="smoke")
    assert capsys.readouterr().out.strip() == f"similarity: answered by NearID head trained in profile 'smoke' ({ck})"
    want = _by_hand(load_encoder("nearid", tiny=True, checkpoint=str(ck))[0], [a], [b])[0][0]
    assert got.similarity.item() == pytest.approx(want, abs=1e-5)
    assert abs(got.similarity.item() - frozen.similarity.item()) > 1e-4          # another model answered


def test_default_in_paper_is_the_released_nearid_model(env, monkeypatch, capsys):
    from tools.paper_fixtures.nearid import _save_release, _save_siglip2
    from nearid_lib.models import load_encoder

    hub = env / "hub"
    _save_release(hub / "Aleksandar" / "nearid-siglip2", _save_siglip2(hub / "google" / "siglip2-so400m-patch14-384"))
    monkeypatch.setenv("NEARID_HUB_DIR", str(hub))
    monkeypatch.setenv("NEARID_ALLOW_CPU", "1")
    a, b = [str(env / "A" / n) for n in ("cat.png", "owl.png")], [str(env / "B" / n) for n in ("cat.png", "owl.png")]
    got = nearid_lib.similarity(a, b, profile="paper")
    assert capsys.readouterr().out.strip() == ("similarity: answered by NearID, the released model "
                                               "Aleksandar/nearid-siglip2")
    want = _by_hand(load_encoder("nearid", checkpoint="Aleksandar/nearid-siglip2")[0], a, b)[0]
    assert got.similarity.to_numpy() == pytest.approx(want, abs=1e-4)


def test_nearid_sim_prints_and_writes(env, capsys):
    rc = main(["sim", "A", "B", "--profile", "smoke", "--encoder", "efficientnet-lite0", "--out", "s.csv"])
    assert rc == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("similarity: answered by efficientnet-lite0")
    assert out[1].split() == ["a", "b", "similarity"] and out[2].startswith("A/cat.png")
    assert out[5].startswith("mean similarity ") and out[6].startswith("unpaired images (a_i vs b_j, i != j) score ")
    assert out[-1] == "wrote s.csv (provenance: s.meta.json)"
    want = nearid_lib.similarity("A", "B", encoder="efficientnet-lite0", profile="smoke", verbose=False)
    got = pd.read_csv(env / "s.csv")
    assert got.similarity.to_numpy() == pytest.approx(want.similarity.to_numpy()) and got.a.tolist() == want.a.tolist()
    # the sidecar says which model answered, in which profile, on what, at which commit (issue 57)
    import json

    from nearid_lib.runtime.runmeta import git_state

    meta = json.loads((env / "s.meta.json").read_text())
    assert meta["encoder"] == out[0][len("similarity: answered by "):] and meta["profile"] == "smoke"
    assert meta["inputs"] == {"a": "A", "b": "B"} and meta["pairs"] == 3 and meta["table"] == "s.csv"
    assert meta["unpaired_mean"] == pytest.approx(want.attrs["unpaired_mean"])
    assert meta["commit"] == git_state()["sha"] and meta["date"]
    # a wrong encoder is one line and status 2, as for every command
    assert main(["sim", "A", "B", "--profile", "smoke", "--encoder", "efficientnet-lite9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nearid sim: error: unknown encoder 'efficientnet-lite9'") and err.count("\n") == 1
    assert main(["sim", "A", "--profile", "smoke"]) == 2
    assert "one CSV of pairs" in capsys.readouterr().err
