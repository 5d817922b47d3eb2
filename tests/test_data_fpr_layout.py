"""The FPR CSV layout: round trips, overlaps, missing files / columns / cells, generated images."""
from __future__ import annotations

import pandas as pd
import pytest
from PIL import Image

from nearid_lib.fpr import (FPRLayoutError, check_disjoint, load_fpr_split, read_fpr_table, read_generated,
                            write_fpr_table)


def _img(path, color):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), color).save(path)
    return path


def _layout(tmp_path, overlap=False):
    rows_t, rows_g = [], []
    for i, name in enumerate(["a", "b"]):
        for k in range(2):
            _img(tmp_path / "img" / f"{name}_r{k}.png", (i * 80, k * 40, 0))
            rows_t.append({"name": name, "species": "s", "file_path": f"img/{name}_r{k}.png",
                           "ref_path": f"img/{name}_r0.png"})
        for k in range(3):
            _img(tmp_path / "img" / f"{name}_g{k}.png", (i * 80, k * 40, 200))
            rows_g.append({"name": name, "species": "s", "file_path": f"img/{name}_g{k}.png",
                           "ref_path": f"img/{name}_r0.png"})
    if overlap:
        rows_g.append(dict(rows_t[1]))
    write_fpr_table(pd.DataFrame(rows_t), tmp_path / "train_data.csv", "train")
    write_fpr_table(pd.DataFrame(rows_g), tmp_path / "gallery_data.csv", "gallery")
    return tmp_path


def test_roundtrip_and_absolute_paths(tmp_path):
    sp = load_fpr_split(_layout(tmp_path))
    assert len(sp.train) == 4 and len(sp.gallery) == 6
    assert all(p.startswith(str(tmp_path)) for p in sp.gallery.file_path)


def test_overlap_is_an_error_naming_files_and_rows(tmp_path):
    with pytest.raises(FPRLayoutError, match=r"overlap.*train_data.csv.*line\(s\) 3.*gallery_data.csv.*line\(s\) 8"):
        load_fpr_split(_layout(tmp_path, overlap=True))


def test_missing_file_and_column_and_empty_cell(tmp_path):
    _layout(tmp_path)
    (tmp_path / "img" / "b_g1.png").unlink()
    with pytest.raises(FPRLayoutError, match=r"gallery_data.csv.*'file_path'.*line\(s\) 6.*b_g1.png"):
        read_fpr_table(tmp_path / "gallery_data.csv", "gallery")
    df = pd.read_csv(tmp_path / "train_data.csv").drop(columns=["species"])
    df.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(FPRLayoutError, match=r"bad.csv: missing column\(s\) \['species'\]"):
        read_fpr_table(tmp_path / "bad.csv", "train")
    df = pd.read_csv(tmp_path / "train_data.csv", keep_default_na=False)
    df.loc[2, "name"] = ""
    df.to_csv(tmp_path / "bad2.csv", index=False)
    with pytest.raises(FPRLayoutError, match=r"bad2.csv: empty 'name' on line\(s\) 4"):
        read_fpr_table(tmp_path / "bad2.csv", "train")


def test_generated_needs_method_and_reads_folders(tmp_path):
    sp = load_fpr_split(_layout(tmp_path))
    gen = tmp_path / "mymethod"
    _img(gen / "a__0.png", (1, 2, 3))
    _img(gen / "b" / "x.png", (4, 5, 6))
    df = read_generated(gen, train=sp.train)
    assert sorted(df.name) == ["a", "b"] and set(df.method) == {"mymethod"}
    assert df.ref_path.iloc[0].endswith("a_r0.png")
    _img(gen / "zzz__0.png", (0, 0, 0))
    with pytest.raises(FPRLayoutError, match="'zzz'.*not in the reference table"):
        read_generated(gen, train=sp.train)
    pd.DataFrame([{"name": "a", "species": "s", "file_path": "img/a_g0.png", "ref_path": "img/a_r0.png"}]
                 ).to_csv(tmp_path / "g.csv", index=False)
    with pytest.raises(FPRLayoutError, match=r"missing column\(s\).*method"):
        read_fpr_table(tmp_path / "g.csv", "generated")


def test_check_disjoint_requires_gallery_for_every_reference_identity():
    t = pd.DataFrame({"name": ["a", "c"], "species": "s", "file_path": ["1", "2"], "ref_path": "1"})
    g = pd.DataFrame({"name": ["a"], "species": "s", "file_path": ["3"], "ref_path": "1"})
    with pytest.raises(FPRLayoutError, match=r"\['c'\] have no image"):
        check_disjoint(t, g)
