"""The one image loader (nearid_lib.imageio) and the entry points that use it: every input kind,
alpha onto black, 16 bit scaled, EXIF orientation, and errors that name the file."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from PIL import Image

from nearid_lib.data import DataError, read_mask, read_rgb
from nearid_lib.features import default_loaders
from nearid_lib.imageio import ImageError, load_image, load_images, load_mask
from nearid_lib.models import load_encoder

RNG = np.random.default_rng(0)
RGB = RNG.integers(0, 256, (12, 10, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def tiny():
    return load_encoder("efficientnet-lite0", tiny=True)[0]


def _rgba(hidden_seed: int) -> Image.Image:
    """An RGBA image whose alpha hides the left half; the hidden pixels depend on the seed."""
    rgb = RGB.copy()
    rgb[:, :5] = np.random.default_rng(hidden_seed).integers(0, 256, (12, 5, 3), dtype=np.uint8)
    alpha = np.full((12, 10), 255, np.uint8)
    alpha[:, :5] = 0
    return Image.fromarray(np.dstack([rgb, alpha]), "RGBA")


def test_every_input_kind_gives_the_same_rgb(tmp_path):
    p = tmp_path / "x.png"
    Image.fromarray(RGB).save(p)
    want = RGB
    kinds = [p, str(p), Image.open(p), RGB, RGB.astype(np.float32) / 255,
             torch.from_numpy(RGB).permute(2, 0, 1).float() / 255, torch.from_numpy(RGB).permute(2, 0, 1)]
    for src in kinds:
        out = load_image(src)
        assert out.mode == "RGB" and out.size == (10, 12), type(src)
        np.testing.assert_array_equal(np.asarray(out), want, err_msg=str(type(src)))
    # one 4-D batch = a list of images; a single path = a list of one
    assert len(load_images(np.stack([RGB, RGB]))) == 2 and len(load_images(p)) == 1


def test_rgba_is_composited_onto_black_so_hidden_pixels_never_matter(tmp_path, tiny):
    a, b = _rgba(1), _rgba(2)
    out = np.asarray(load_image(a))
    assert (out[:, :5] == 0).all()                                   # hidden half is black
    np.testing.assert_array_equal(out[:, 5:], RGB[:, 5:])           # opaque half untouched
    half = np.array(a)
    half[..., 3] = 128
    got = np.asarray(load_image(Image.fromarray(half, "RGBA")))
    np.testing.assert_array_equal(got, np.rint(np.asarray(a)[..., :3] * (128 / 255)).astype(np.uint8))
    pa, pb = tmp_path / "a.png", tmp_path / "b.png"
    a.save(pa)
    b.save(pb)
    # the embedding of an RGBA file does not depend on its hidden pixels (it did when alpha was dropped)
    e = tiny.embed([pa, pb, np.asarray(a), np.asarray(b)])
    assert torch.allclose(e[0], e[1]) and torch.allclose(e[2], e[3]) and torch.allclose(e[0], e[2])
    # a palette image with a transparent colour follows the same rule
    pal = Image.fromarray(RGB).convert("P")
    pal.info["transparency"] = int(np.asarray(pal)[0, 0])
    assert (np.asarray(load_image(pal))[0, 0] == 0).all()


def test_16_bit_images_are_scaled_not_saturated(tmp_path, tiny):
    gray8 = RGB[..., 0]
    gray16 = gray8.astype(np.uint16) * 257
    p16, p8 = tmp_path / "g16.png", tmp_path / "g8.png"
    Image.fromarray(gray16).save(p16)                                  # mode I;16
    Image.fromarray(gray8, "L").save(p8)
    assert Image.open(p16).mode.startswith("I;16")
    for src in (p16, gray16, torch.from_numpy(gray16.astype(np.int32))):
        np.testing.assert_array_equal(np.asarray(load_image(src))[..., 0], gray8)
    e = tiny.embed([p16, p8])
    assert torch.allclose(e[0], e[1], atol=1e-6)                       # not near-white any more
    assert read_mask(p16, size=(10, 12), allow_empty=True).tolist() == (gray8 >= 128).tolist()


def test_exif_orientation_is_applied_to_images_and_masks(tmp_path):
    im = Image.fromarray(RGB)                                          # 10 wide, 12 high
    exif = Image.Exif()
    exif[0x0112] = 6                                                   # "rotate 90 CW to view"
    p = tmp_path / "phone.jpg"
    im.save(p, exif=exif, quality=95)
    assert Image.open(p).size == (10, 12)
    assert load_image(p).size == (12, 10)
    m = tmp_path / "mask.png"
    Image.fromarray(np.full((12, 10), 255, np.uint8), "L").save(m, exif=exif)
    assert load_mask(m).shape == (10, 12)


def test_truncated_and_corrupt_files_name_the_file(tmp_path):
    p = tmp_path / "cut.png"
    Image.fromarray(RGB).save(p)
    p.write_bytes(p.read_bytes()[:60])
    with pytest.raises(ImageError, match="^" + re.escape(f"cannot decode image {p} (corrupt or truncated?): ")):
        load_image(p)
    with pytest.raises(DataError, match="^" + re.escape(f"dataset d, row 3: cannot decode image {p} "
                                                        f"(corrupt or truncated?): ")):
        read_rgb(p, "dataset d, row 3")
    loader, _ = default_loaders(root=tmp_path)
    with pytest.raises(ImageError, match=re.escape(f"cannot decode image {p}")):
        loader("cut.png")
    with pytest.raises(ImageError, match="^" + re.escape(f"image file not found: {tmp_path / 'nope.png'}") + "$"):
        load_image(tmp_path / "nope.png")


def test_bad_arrays_and_types_get_clear_errors(tiny):
    with pytest.raises(ImageError, match=re.escape("images[1]: image has negative pixel values (min -2.12): "
                                                   "pass pixels in 0..1 (float) or 0..255 / 0..65535 "
                                                   "(integer), not a normalised tensor")):
        tiny.embed([RGB, torch.full((3, 8, 8), -2.118)])
    with pytest.raises(ImageError, match=re.escape("cannot find the channel axis of shape (5, 6, 7)")):
        load_image(np.zeros((5, 6, 7), np.uint8))
    with pytest.raises(ImageError, match=re.escape("cannot read an image from dict; pass a path, a PIL image, "
                                                   "a numpy array or a torch tensor")):
        load_image({})
    with pytest.raises(ImageError, match="non-finite"):
        load_image(np.full((4, 4), np.nan, np.float32))


def test_embed_accepts_arrays_and_tensors_like_pil(tiny):
    pil = Image.fromarray(RGB)
    e = tiny.embed([pil, RGB, torch.from_numpy(RGB).permute(2, 0, 1)])
    assert e.shape[0] == 3 and torch.allclose(e[0], e[1]) and torch.allclose(e[0], e[2])
    out = tiny.encode(np.stack([RGB, RGB]))
    assert out.pooled.shape[0] == 2
    # the preprocess call takes the same kinds
    assert torch.equal(tiny.preprocess(RGB), tiny.preprocess(pil))
