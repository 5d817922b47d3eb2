"""The FPR paper's galleries from the published layouts (CUB-200-2011 tarball, WildlifeReID-10k
metadata.csv, the Stanford Cars hub dataset through the hub mirror) on the dry-run fixtures; bad
input is an error naming file, line and field; an absent download is a skip with its reason."""
from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
from PIL import Image

pytest.importorskip("datasets")

from nearid_lib.config import get_profile  # noqa: E402
from nearid_lib.data import DataError  # noqa: E402
from nearid_lib.data.eval_datasets import load_fpr  # noqa: E402
from tools.paper_fixtures import SIZE_OVERRIDES  # noqa: E402
from nearid_lib.generate.personalize import METHODS, method_key  # noqa: E402
from tools.paper_fixtures.fpr import (CARS_CLASS_NAMES, GENERATED_METHODS, write_cars_dataset,  # noqa: E402
                                   write_fpr_downloads)
from nearid_lib.fpr import FPRLayoutError, load_fpr_split  # noqa: E402
from nearid_lib.fpr import experiments as X  # noqa: E402
from nearid_lib.fpr.datasets import CARS_MODELS, CUB_GROUPS, build_cub_split, build_wildlife_split  # noqa: E402
from nearid_lib.fpr.downloads import (CARS_LABELS, DATASET_KEYS, build_paper_galleries, collect_generated,  # noqa: E402
                                      read_cars_test, read_cub_metadata, read_wildlife_metadata)
from nearid_lib.hub import HubError  # noqa: E402

OVR = {k: v for k, v in SIZE_OVERRIDES.items() if k.startswith("retrieval.")}


@pytest.fixture(scope="module")
def downloads(tmp_path_factory):
    d = tmp_path_factory.mktemp("downloads")
    write_fpr_downloads(d)
    return d


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = tmp_path_factory.mktemp("hub")
    write_cars_dataset(h)
    return h


def _paper():
    return get_profile("paper", dict(OVR))


def test_cub_tarball_layout(downloads):
    meta = read_cub_metadata(downloads / "CUB_200_2011")
    assert len(meta) == 15 * 5 and meta.class_id.nunique() == 15       # the albatross / yellowthroat left out
    assert meta.file_path.map(lambda p: Image.open(p).size == (40, 40)).all()
    out = build_cub_split(meta, n_gallery=3, n_ref=(1, 2))
    assert {g: set(t.name) for g, (t, _) in out.items()} == {g: set(n) for g, n in CUB_GROUPS.items()}


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_cub_errors_name_file_line_field(downloads, tmp_path):
    cub = _copy(downloads / "CUB_200_2011", tmp_path / "c1")
    lines = (cub / "images.txt").read_text().splitlines()
    (cub / "images.txt").write_text("\n".join(["x " + lines[0].split(" ", 1)[1]] + lines[1:]))
    with pytest.raises(FPRLayoutError, match=r"images.txt: line 1: field 'img_id' is not an integer"):
        read_cub_metadata(cub)
    cub = _copy(downloads / "CUB_200_2011", tmp_path / "c2")
    (cub / "classes.txt").write_text((cub / "classes.txt").read_text().replace("113.Baird_Sparrow", "113.Song_Sparrow"))
    with pytest.raises(FPRLayoutError, match=r"classes.txt: class id 113 is 'Song_Sparrow', expected 'Baird_Sparrow'"):
        read_cub_metadata(cub)
    cub = _copy(downloads / "CUB_200_2011", tmp_path / "c3")
    victim = next((cub / "images").rglob("Baird_Sparrow_0001_*.jpg"))
    victim.unlink()
    with pytest.raises(FPRLayoutError, match=r"images.txt: image id \d+: file '113.Baird_Sparrow/Baird_Sparrow_0001"):
        read_cub_metadata(cub)


def test_wildlife_metadata_layout_and_errors(downloads, tmp_path):
    wl = downloads / "WildlifeReID-10k"
    meta = read_wildlife_metadata(wl)
    assert {"identity", "path", "species", "dataset", "file_path"} <= set(meta.columns)
    out = build_wildlife_split(meta, ids_per_species=2, n_gallery=3, n_ref=(1, 2))
    for sp, (tr, ga) in out.items():
        assert set(tr.name) == {n for n in meta[meta.species == sp].identity.unique() if not n.endswith("_002")}
        assert (ga.groupby("name").size() == 3).all()
    raw = pd.read_csv(wl / "metadata.csv", dtype=str, keep_default_na=False)
    bad = tmp_path / "w1"
    shutil.copytree(wl, bad)
    raw.drop(columns=["dataset"]).to_csv(bad / "metadata.csv", index=False)
    with pytest.raises(FPRLayoutError, match=r"metadata.csv: missing column\(s\) \['dataset'\]"):
        read_wildlife_metadata(bad)
    raw2 = raw.copy()
    raw2.loc[3, "identity"] = ""
    raw2.to_csv(bad / "metadata.csv", index=False)
    with pytest.raises(FPRLayoutError, match=r"metadata.csv: line 5: empty field 'identity'"):
        read_wildlife_metadata(bad)
    raw3 = raw.copy()
    raw3.loc[0, "path"] = "images/nowhere.jpg"
    raw3.to_csv(bad / "metadata.csv", index=False)
    with pytest.raises(FPRLayoutError, match=r"metadata.csv: line 2: field 'path' names a missing image"):
        read_wildlife_metadata(bad)


def test_cars_from_the_hub_mirror(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("NEARID_HUB_DIR", str(hub))
    cars = read_cars_test(tmp_path / "cars")
    assert sorted(cars.label.unique()) == sorted(CARS_LABELS) and (cars.groupby("label").size() == 5).all()
    # selection by the authors' label ids; names from the dataset's own class label = CARS_MODELS
    names = cars.drop_duplicates("label").set_index("label").class_name
    assert [names[lab] for lab in CARS_LABELS] == list(CARS_MODELS)
    assert [CARS_CLASS_NAMES[lab] for lab in CARS_LABELS] == list(CARS_MODELS)
    assert all(Image.open(p).size == (40, 40) for p in cars.file_path)
    again = read_cars_test(tmp_path / "cars")               # images written once, same table
    pd.testing.assert_frame_equal(cars, again)
    monkeypatch.setenv("NEARID_HUB_DIR", str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(HubError, match="hf download Donghyun99/Stanford-Cars --repo-type dataset"):
        read_cars_test(tmp_path / "cars2")


def test_build_paper_galleries(downloads, hub, tmp_path, monkeypatch):
    monkeypatch.setenv("NEARID_HUB_DIR", str(hub))
    res = build_paper_galleries(_paper(), downloads=downloads, out=tmp_path / "fpr")
    assert set(res.folders) == set(DATASET_KEYS) and not res.skipped and not res.no_generated
    for key, folder in res.folders.items():
        sp = load_fpr_split(folder)                       # validated: columns, files, disjointness
        assert (sp.gallery.groupby("name").size() == 3).all()
        gen = pd.read_csv(folder / "generated_data.csv")
        # the user's folders, named as the paper's tables spell the methods, each with its source
        assert set(gen.method) == {"Emu2", "IP Adapter"} == {METHODS[method_key(m)].name for m in GENERATED_METHODS}
        assert set(gen.name) <= set(sp.train.name) and gen.source.str.startswith("user folder").all()
    # the same run is deterministic: gallery tables identical when rebuilt
    res2 = build_paper_galleries(_paper(), downloads=downloads, out=tmp_path / "fpr_again")
    for key in DATASET_KEYS:
        a = pd.read_csv(res.folders[key] / "gallery_data.csv")
        b = pd.read_csv(res2.folders[key] / "gallery_data.csv")
        if key == "stanford_cars":                         # images extracted under each output folder
            a["file_path"] = a.file_path.str.replace(str(tmp_path / "fpr"), "")
            b["file_path"] = b.file_path.str.replace(str(tmp_path / "fpr_again"), "")
            a["ref_path"], b["ref_path"] = a.file_path, b.file_path
        pd.testing.assert_frame_equal(a[["name", "file_path"]], b[["name", "file_path"]])


def test_absent_downloads_are_skipped_with_reasons(tmp_path, monkeypatch):
    (tmp_path / "hub").mkdir()
    (tmp_path / "dl").mkdir()
    monkeypatch.setenv("NEARID_HUB_DIR", str(tmp_path / "hub"))
    res = build_paper_galleries(_paper(), downloads=tmp_path / "dl", out=tmp_path / "fpr")
    assert not res.folders and set(res.skipped) == set(DATASET_KEYS)
    assert "CUB_200_2011.tgz" in res.skipped["cub_wren"] and str(tmp_path / "dl") in res.skipped["cub_wren"]
    assert "wildlifedatasets/wildlifereid-10k" in res.skipped["zebra"]
    assert "hf download Donghyun99/Stanford-Cars" in res.skipped["stanford_cars"]
    monkeypatch.setenv("NEARID_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("NEARID_DOWNLOADS", str(tmp_path / "dl"))
    split, gen, _ = X.prepare_data(_paper())
    assert len(split.train) == 0 and len(gen) == 0
    specs = [X.EncoderSpec("clip-vit-b32")]
    why = X.skip_reasons(split, gen, specs)
    for t in ("11_fpr_oracle", "11_fpr_generated", "11_fpr_gallery_sampling", "11_fpr_bg_removal",
              "11_fpr_cub_wren", "11_fpr_stanford_cars", "11_fpr_leopard"):
        assert why[t].strip(), t
    assert "CUB_200_2011" in why["11_fpr_oracle"]
    none = [X.EncoderSpec("miewid", available=False, note="needs remote code")]
    assert "needs remote code" in X.skip_reasons(split, gen, none)["11_fpr_oracle"]


def test_galleries_without_generated_images(downloads, tmp_path, monkeypatch):
    dl = tmp_path / "dl"
    shutil.copytree(downloads / "CUB_200_2011", dl / "CUB_200_2011")
    (tmp_path / "hub").mkdir()
    monkeypatch.setenv("NEARID_HUB_DIR", str(tmp_path / "hub"))
    monkeypatch.setenv("NEARID_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("NEARID_DOWNLOADS", str(dl))
    split, gen, _ = X.prepare_data(_paper())
    assert split.train.dataset.nunique() == 3 and len(gen) == 0
    why = X.skip_reasons(split, gen, [X.EncoderSpec("clip-vit-b32")])
    assert "11_fpr_oracle" not in why and "11_fpr_bg_removal" not in why       # the galleries are there
    assert "fpr_generated/<method>/cub_tern/<identity>" in why["11_fpr_cub_tern"]
    assert "no generated images" in why["11_fpr_generated"]
    # the generation step names the weights it lacks and how to fetch them
    assert "hf download stabilityai/stable-diffusion-3-medium-diffusers" in why["11_fpr_cub_tern"]


def test_generated_identity_not_in_references(downloads, tmp_path):
    meta = read_cub_metadata(downloads / "CUB_200_2011")
    tr, _ = build_cub_split(meta, n_gallery=3, n_ref=(1, 2))["wren"]
    g = tmp_path / "gen" / "MyMethod" / "cub_wren"
    (g / "Bewick_Wren").mkdir(parents=True)
    (g / "Winter_Wren").mkdir(parents=True)
    for d in ("Bewick_Wren", "Winter_Wren"):
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(g / d / "0.png")
    with pytest.raises(FPRLayoutError, match="identity 'Winter_Wren'.*not in the reference table"):
        collect_generated(tmp_path / "gen", "cub_wren", tr)
    shutil.rmtree(g / "Winter_Wren")
    got = collect_generated(tmp_path / "gen", "cub_wren", tr)
    assert got.method.tolist() == ["MyMethod"] and got.name.tolist() == ["Bewick_Wren"]
    assert collect_generated(tmp_path / "gen", "cub_tern", tr) is None


def test_specialised_encoders_load_through_the_mirror(tmp_path, monkeypatch):
    from tools.paper_fixtures.fpr import _save_bioclip
    from nearid_lib.models import load_encoder
    from nearid_lib.models.specialised import open_clip_source

    hub = tmp_path / "hub"
    _save_bioclip(hub / "imageomics" / "bioclip-2")
    monkeypatch.setenv("NEARID_HUB_DIR", str(hub))
    assert open_clip_source("hf-hub:imageomics/bioclip-2") == f"local-dir:{hub.resolve()}/imageomics/bioclip-2"
    assert open_clip_source("ViT-B-32") == "ViT-B-32"
    m, _ = load_encoder("bioclip2")
    e = m.embed([Image.fromarray(np.full((40, 40, 3), 90, np.uint8))])
    assert e.shape == (1, 16) and np.isfinite(e.numpy()).all()
    # MiewID: the authors' msv2 under "miewid" (the paper's row), msv3 an extra row of its own
    with pytest.raises(HubError, match="conservationxlabs/miewid-msv2"):
        load_encoder("miewid", allow_remote_code=True)
    with pytest.raises(HubError, match="conservationxlabs/miewid-msv3"):
        load_encoder("miewid-msv3", allow_remote_code=True)
    monkeypatch.delenv("NEARID_HUB_DIR")
    assert open_clip_source("hf-hub:imageomics/bioclip-2") == "hf-hub:imageomics/bioclip-2"


def test_nearid_in_paper_falls_back_to_the_released_weights(tmp_path):
    specs = {s.name: s for s in X.encoder_specs(_paper(), checkpoint_root=tmp_path)}
    assert specs["nearid"].available and specs["nearid"].kwargs["checkpoint"] == "Aleksandar/nearid-siglip2"
    assert not specs["miewid"].available and "allow_remote_code" in specs["miewid"].note
    mini = {s.name: s for s in X.encoder_specs(get_profile("mini"), checkpoint_root=tmp_path)}
    assert not mini["nearid"].available                  # mini: only the head notebook 03 trained


# --------------------------------------------------------------------------- FPR CSV folders
def _img(seed, size=32):
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (size, size, 3), dtype=np.uint8))


def _write_fpr(folder):
    (folder / "imgs").mkdir(parents=True)
    rows = {"train": [], "gallery": []}
    for name, sp in (("a", "birdA"), ("b", "birdA"), ("c", "birdB")):
        for kind, n in (("train", 2), ("gallery", 3)):
            for j in range(n):
                p = f"imgs/{name}_{kind}{j}.png"
                _img(len(p) + j).save(folder / p)
                rows[kind].append({"name": name, "species": sp, "file_path": p, "ref_path": f"imgs/{name}_train0.png"})
    for k, r in rows.items():
        pd.DataFrame(r).to_csv(folder / f"{k}_data.csv", index=False)
    pd.DataFrame(rows["gallery"][:2]).assign(method="dreambooth").to_csv(folder / "generated_data.csv", index=False)


def test_fpr_csvs(tmp_path):
    """The FPR CSV folders (train / gallery / generated): read with absolute paths, a reference
    leaking into the gallery and a missing column are errors naming the file and field."""
    f = tmp_path / "fpr"
    _write_fpr(f)
    t = load_fpr(f)
    assert set(t) == {"train", "gallery", "generated"} and len(t["gallery"]) == 9 and len(t["train"]) == 6
    assert (t["generated"].method == "dreambooth").all()
    assert all(Image.open(p).size == (32, 32) for p in t["gallery"].file_path)
    sp = load_fpr_split(f)                                   # the protocol's own reader agrees
    assert len(sp.train) == 6 and len(sp.gallery) == 9
    assert t["gallery"].file_path.tolist() == sp.gallery.file_path.tolist()
    g = pd.read_csv(f / "gallery_data.csv")
    g.loc[0, "file_path"] = "imgs/a_train0.png"             # a reference leaking into the gallery
    g.to_csv(f / "gallery_data.csv", index=False)
    with pytest.raises(DataError, match=r"dataset FPR: reference/gallery overlap.*train_data.csv \(line\(s\) 2\)"):
        load_fpr(f)
    with pytest.raises(FPRLayoutError, match=r"reference/gallery overlap.*train_data.csv \(line\(s\) 2\)"):
        load_fpr_split(f)
    g.drop(columns=["species"]).to_csv(f / "gallery_data.csv", index=False)
    with pytest.raises(DataError, match=r"gallery_data.csv: missing column.*species"):
        load_fpr(f)
    with pytest.raises(FPRLayoutError, match=r"gallery_data.csv: missing column\(s\) \['species'\]"):
        load_fpr_split(f)
    f2 = tmp_path / "fpr2"                                  # one reader, two callers' conventions
    _write_fpr(f2)
    tr = pd.read_csv(f2 / "train_data.csv").assign(note="01")
    tr.to_csv(f2 / "train_data.csv", index=False)
    assert load_fpr(f2)["train"].note.tolist() == ["01"] * 6                 # as written
    assert load_fpr_split(f2).train.note.tolist() == [1] * 6                 # metadata as numbers
    tr.loc[1, "ref_path"] = ""
    tr.to_csv(f2 / "train_data.csv", index=False)
    with pytest.raises(DataError, match=r"dataset FPR: .*train_data.csv: empty 'ref_path' on line\(s\) 3"):
        load_fpr(f2)
