"""Released-data loaders on tiny fixture datasets written in the released schemas (no network)."""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from PIL import Image

datasets = pytest.importorskip("datasets")

from nearid_lib.data import DataError, load_nearid  # noqa: E402
from nearid_lib.data.benchmarks import load_dreambenchpp, load_fpr  # noqa: E402
from nearid_lib.data.released import materialise_released  # noqa: E402

S = 32


def _img(seed, size=S, mode="RGB"):
    a = np.random.default_rng(seed).integers(0, 255, (size, size, 3), dtype=np.uint8)
    im = Image.fromarray(a)
    return im.convert(mode) if mode != "RGB" else im


def _mask(size=S, box=(8, 8, 24, 24)):
    m = np.zeros((size, size), np.uint8)
    m[box[1]:box[3], box[0]:box[2]] = 255
    return Image.fromarray(m, "L")


def _positives(spelling="img", n=3, third=(True, False, True)):
    icol = {"img": "img{k}", "images": "images{k}"}[spelling]
    mcol = {"img": "mask{k}", "images": "masks{k}"}[spelling]
    d = {"id": [f"obj{i}" for i in range(n)], "description": [f"thing {i}" for i in range(n)]}
    for k in (1, 2, 3):
        d[icol.format(k=k)] = [(_img(10 * i + k) if (k < 3 or third[i]) else None) for i in range(n)]
        d[mcol.format(k=k)] = [(_mask() if (k < 3 or third[i]) else None) for i in range(n)]
    feats = datasets.Features({c: (datasets.Image() if c[:-1] in ("img", "images", "mask", "masks")
                                   else datasets.Value("string")) for c in d})
    return datasets.Dataset.from_dict(d, features=feats)


def _distractors(n=3, third=(True, False, True), col="nimg{k}", size=S, ids=True):
    d = {}
    if ids:
        d["id"] = [f"obj{i}" for i in range(n)]
    for k in (1, 2, 3):
        d[col.format(k=k)] = [(_img(100 + 10 * i + k, size) if (k < 3 or third[i]) else None)
                              for i in range(n)]
    feats = datasets.Features({c: (datasets.Value("string") if c == "id" else datasets.Image())
                               for c in d})
    return datasets.Dataset.from_dict(d, features=feats)


@pytest.mark.parametrize("spelling", ["img", "images"])
def test_nearid_positives_and_distractors_roundtrip(tmp_path, spelling):
    pos_dir = tmp_path / "NearID"
    _positives(spelling).save_to_disk(str(pos_dir))
    flux = tmp_path / "NearID-Flux"
    _distractors().save_to_disk(str(flux))
    # A 1024-style source at another resolution, spelled images1..3 and without ids.
    big = _distractors(col="images{k}", size=48, ids=False)
    root = materialise_released(tmp_path / "out", str(pos_dir), {"Flux": str(flux), "Flux_1024": big},
                                train_sources=["Flux"])
    d = load_nearid(root, check_images=True)
    assert list(d.positives.id) == ["obj0", "obj1", "obj2"]
    assert d.identities.n_views.tolist() == [3, 2, 3]
    assert d.positives.img3[1] == "" and d.distractors["Flux"].nimg3[1] == ""
    np.testing.assert_array_equal(np.asarray(d.image(d.positives.img1[2])), np.asarray(_img(21)))
    assert d.image(d.distractors["Flux_1024"].nimg2[0]).size == (S, S)
    assert d.sources == ["Flux", "Flux_1024"] and d.train_sources == ["Flux"]
    assert d.identities.description[1] == "thing 1"


def test_distractor_dataset_one_row_short(tmp_path):
    with pytest.raises(DataError, match=r"dataset SDXL: 2 rows but NearID has 3"):
        materialise_released(tmp_path / "o", _positives(), {"SDXL": _distractors().select(range(2))})


def test_distractor_dataset_misaligned_ids(tmp_path):
    d = _distractors()
    d = d.select([1, 0, 2])
    with pytest.raises(DataError, match=r"dataset Qwen, row 0, field 'id'.*not row-aligned"):
        materialise_released(tmp_path / "o", _positives(), {"Qwen": d})


def test_bad_inputs_in_released_rows(tmp_path):
    pos = _positives().to_dict()
    pos["mask1"][1] = _mask(size=20)
    feats = _positives().features
    with pytest.raises(DataError, match=r"dataset NearID, row 1, field 'mask1'.*size"):
        materialise_released(tmp_path / "a", datasets.Dataset.from_dict(pos, features=feats))
    pos = _positives().to_dict()
    pos["mask2"][0] = Image.new("L", (S, S), 0)
    with pytest.raises(DataError, match=r"row 0, field 'mask2'.*empty"):
        materialise_released(tmp_path / "b", datasets.Dataset.from_dict(pos, features=feats))
    pos = _positives().to_dict()
    pos["img2"][2] = None
    pos["mask2"][2] = None
    with pytest.raises(DataError, match=r"row 2, field 'img2'.*fewer than two views"):
        materialise_released(tmp_path / "c", datasets.Dataset.from_dict(pos, features=feats))
    # A truncated PNG stored as raw bytes.
    buf = io.BytesIO()
    _img(1).save(buf, format="PNG")
    pos = _positives().to_dict()
    pos["img1"][1] = {"bytes": buf.getvalue()[:60], "path": None}
    with pytest.raises(DataError, match=r"row 1, field 'img1'.*corrupt"):
        materialise_released(tmp_path / "d", datasets.Dataset.from_dict(pos, features=feats))
    assert not (tmp_path / "d" / "manifest.json").exists()


def test_grayscale_and_16bit_positives_are_converted(tmp_path):
    pos = _positives().to_dict()
    pos["img1"][0] = _img(5, mode="L")
    g = np.asarray(_img(6).convert("L")).astype(np.uint16) * 257
    pos["img2"][0] = Image.fromarray(g)
    ds = datasets.Dataset.from_dict(pos, features=_positives().features)
    d = load_nearid(materialise_released(tmp_path / "o", ds), check_images=True)
    a = np.asarray(d.image(d.positives.img2[0]))
    assert a.shape == (S, S, 3)
    np.testing.assert_array_equal(a[..., 0], (g // 257).astype(np.uint8))


def _mtg(n=2):
    d = {"id": [f"p{i}" for i in range(n)], "category": ["mug", "car"][:n]}
    for k in (1, 2):
        d[f"image_{k}_original"] = [_img(200 + i * 2 + k) for i in range(n)]
        d[f"image_{k}_inpainted"] = [_img(300 + i * 2 + k) for i in range(n)]
        d[f"image_{k}_object_mask"] = [_mask(box=(4, 4, 28, 28)) for _ in range(n)]   # 576 px
        d[f"image_{k}_part_mask"] = [_mask(box=(4, 4, 4 + 6 * (k + i), 28)) for i in range(n)]
    return datasets.Dataset.from_dict(d)


def test_mtg_oracle_from_masks(tmp_path):
    mtg_dir = tmp_path / "mtg"
    datasets.DatasetDict({"test": _mtg()}).save_to_disk(str(mtg_dir))
    root = materialise_released(tmp_path / "o", _positives(), mtg=str(mtg_dir))
    d = load_nearid(root, check_images=True)
    assert d.mtg.split.tolist() == ["test", "test"]
    assert d.mtg.class_name.tolist() == ["mug", "car"]
    # part masks: 6*(k+i) x 24 pixels inside a 24 x 24 object
    for i in range(2):
        for k in (1, 2):
            assert d.mtg[f"oracle_{k}"][i] == pytest.approx(1 - 6 * (k + i) * 24 / 576)
    bad = _mtg().remove_columns(["image_2_part_mask"])
    with pytest.raises(DataError, match=r"missing column.*image_2_part_mask"):
        materialise_released(tmp_path / "x", _positives(), mtg=bad)


def _write_fpr(folder):
    (folder / "imgs").mkdir(parents=True)
    rows = {"train": [], "gallery": []}
    for name, sp in (("a", "birdA"), ("b", "birdA"), ("c", "birdB")):
        for kind, n in (("train", 2), ("gallery", 3)):
            for j in range(n):
                p = f"imgs/{name}_{kind}{j}.png"
                _img(len(p) + j).save(folder / p)
                rows[kind].append({"name": name, "species": sp, "file_path": p,
                                   "ref_path": f"imgs/{name}_train0.png"})
    for k, r in rows.items():
        pd.DataFrame(r).to_csv(folder / f"{k}_data.csv", index=False)
    gen = pd.DataFrame(rows["gallery"][:2]).assign(method="dreambooth")
    gen.to_csv(folder / "generated_data.csv", index=False)


def test_fpr_csvs(tmp_path):
    f = tmp_path / "fpr"
    _write_fpr(f)
    t = load_fpr(f)
    assert set(t) == {"train", "gallery", "generated"} and len(t["gallery"]) == 9
    assert (t["generated"].method == "dreambooth").all()
    root = materialise_released(tmp_path / "o", _positives(), fpr=f)
    d = load_nearid(root)
    assert len(d.fpr_train) == 6 and d.image(d.fpr_gallery.file_path[0]).size == (S, S)
    g = pd.read_csv(f / "gallery_data.csv")
    g.loc[0, "file_path"] = "imgs/a_train0.png"             # a reference leaking into the gallery
    g.to_csv(f / "gallery_data.csv", index=False)
    with pytest.raises(DataError, match="also references"):
        load_fpr(f)
    g.drop(columns=["species"]).to_csv(f / "gallery_data.csv", index=False)
    with pytest.raises(DataError, match=r"gallery_data.csv: missing column.*species"):
        load_fpr(f)


def test_dreambenchpp_layout(tmp_path):
    r = tmp_path / "db"
    (r / "images").mkdir(parents=True)
    (r / "gen").mkdir()
    (r / "ratings").mkdir()
    for s in ("dog", "cup"):
        _img(len(s)).save(r / "images" / f"{s}.png")
        _img(len(s) + 1).save(r / "gen" / f"{s}_0.png")
    pd.DataFrame({"subject": ["dog", "cup"], "image": ["images/dog.png", "images/cup.png"],
                  "caption": ["a dog", "a cup"], "category": ["animal", "object"]}).to_csv(
        r / "captions.csv", index=False)
    for rater, sc in (("gpt", [3, 4]), ("human", [2.5, 4])):
        pd.DataFrame({"subject": ["dog", "cup"], "image": ["gen/dog_0.png", "gen/cup_0.png"],
                      "score": sc}).to_csv(r / "ratings" / f"dreambooth_lora_{rater}.csv", index=False)
    db = load_dreambenchpp(r)
    assert len(db.subjects) == 2 and len(db.ratings) == 4
    assert set(db.ratings.method) == {"dreambooth_lora"} and set(db.ratings.rater) == {"gpt", "human"}
    assert db.ratings.score.tolist() == [3.0, 4.0, 2.5, 4.0]
    pd.DataFrame({"subject": ["dog"], "image": ["gen/dog_0.png"], "score": ["n/a"]}).to_csv(
        r / "ratings" / "x_gpt.csv", index=False)
    with pytest.raises(DataError, match=r"ratings/x_gpt.csv, row 0, field 'score'"):
        load_dreambenchpp(r)
