"""The released NearID data in its *published* schema (``Aleksandar/NearID`` + the nine
``Aleksandar/NearID-<source>`` repos + ``abdo-eldesokey/mtg-dataset``), read through a local hub
mirror exactly as ``PROFILE=paper`` reads it.

The fixtures are written by :mod:`nearid_lib.paper_fixtures.nearid` in the card's schema (checked column by
column against the authors' upload script below); error cases edit single rows of it. Masks come
from a box masker here (any ``masker(images, prompts)`` callable is accepted); the real CLIPSeg
masker is tested in ``test_masks.py`` and runs in ``make dryrun-paper``."""
from __future__ import annotations

import io
import json

import datasets
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from nearid_lib import hub
from nearid_lib.data import load_nearid
from nearid_lib.data.released import (RELEASED_SOURCES, TABLE5_TRAIN_SOURCES, assign_splits, distractor_features,
                                      materialise_released, positive_features, read_split_files)
from nearid_lib.data.schema import DataError
from nearid_lib.data.splits import RULE_NOTE
from nearid_lib.paper_fixtures.nearid import fixture_splits, write_authors_release, write_nearid_datasets

# The columns of the authors' upload script (scripts/upload_nearid_datasets.py of Gorluxor/NearID):
# positives and every distractor repo; no mask column. The positives also carry the official
# ``split`` column (the authors' guide), which the second fixture variant leaves out.
PUBLISHED_POSITIVES = {"id": "int64", "category": "string", "category_description": "string", "img1": "Image",
                       "img2": "Image", "img3": "Image", "n_images": "int64", "objaverse_id": "string",
                       "prompts1": "string", "prompts2": "string", "prompts3": "string", "quality": "string"}


def _kind(f):
    return "Image" if isinstance(f, datasets.Image) else f.dtype


class BoxMasker:
    """The centre half of the image: a deterministic stand-in for a segmentation model."""
    fingerprint = "box-masker-v1"

    def __init__(self):
        self.calls = 0

    def __call__(self, images, prompts):
        assert len(images) == len(prompts) and all(p.strip() for p in prompts)
        self.calls += len(images)
        out = []
        for im in images:
            m = np.zeros((im.size[1], im.size[0]), bool)
            m[im.size[1] // 4: 3 * im.size[1] // 4, im.size[0] // 4: 3 * im.size[0] // 4] = True
            out.append(m)
        return out


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    d = tmp_path_factory.mktemp("hub")
    write_nearid_datasets(d, n_ids=18)
    return d


@pytest.fixture(scope="module")
def mirror_nosplit(tmp_path_factory):
    """The positives without the ``split`` column (the variant the guide does not promise)."""
    d = tmp_path_factory.mktemp("hub_nosplit")
    write_nearid_datasets(d, n_ids=18, split_column=False)
    return d


@pytest.fixture
def hub_env(mirror, monkeypatch):
    monkeypatch.setenv("NEARID_HUB_DIR", str(mirror))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return mirror


def _load(repo):
    return hub.load_hub_dataset(repo)


def _edited(ds: datasets.Dataset, fn) -> datasets.Dataset:
    """A copy of a published-schema dataset with ``fn(columns_dict)`` applied (same features)."""
    raw = ds
    for c, f in ds.features.items():
        if isinstance(f, datasets.Image):
            raw = raw.cast_column(c, datasets.Image(decode=False))
    cols = raw.to_dict()                                   # images as {"bytes", "path"}
    fn(cols)
    return datasets.Dataset.from_dict(cols, features=ds.features)


def test_fixture_schema_is_the_published_one(hub_env, tmp_path, monkeypatch):
    assert {c: _kind(f) for c, f in positive_features().items()} == PUBLISHED_POSITIVES
    dist = {c: _kind(f) for c, f in distractor_features().items()}
    assert {f"nimg{k}" for k in (1, 2, 3)} <= set(dist) and "id" in dist
    assert not any("mask" in c or c == "split" for c in [*PUBLISHED_POSITIVES, *dist])
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))
    pos = _load("Aleksandar/NearID")
    assert list(pos) == ["train"]                         # one split, as published
    assert {c: _kind(f) for c, f in pos["train"].features.items()} == {**PUBLISHED_POSITIVES, "split": "string"}
    for s in RELEASED_SOURCES:
        # the distractors as the hub holds them: save_to_disk folders, several arrow shards, no parquet
        repo = hub_env / "Aleksandar" / f"NearID-{s}"
        assert (repo / "train" / "state.json").exists() and (repo / "train" / "dataset_info.json").exists()
        assert len(list((repo / "train").glob("data-0000*-of-00002.arrow"))) == 2
        assert not list(repo.rglob("*.parquet"))
        ds = _load(f"Aleksandar/NearID-{s}")["train"]
        assert set(ds.column_names) == set(dist)
        # memory-mapped from the mirror: nothing copied into the datasets cache
        assert all(str(repo) in f["filename"] for f in ds.cache_files)
    assert not (tmp_path / "hf_cache").exists() or not any((tmp_path / "hf_cache").rglob("*.arrow"))


def test_official_split_column_file_and_rule(hub_env, mirror_nosplit, tmp_path, monkeypatch):
    """The split, in the guide's order: the positives' column, else the split files (row
    positions), else our rule, flagged as not official; column and files must agree."""
    dl = tmp_path / "downloads"
    split_dir = write_authors_release(dl) / "splits"
    want = fixture_splits(18)
    pos = _load("Aleksandar/NearID")
    root = materialise_released(tmp_path / "col", pos, {}, masker=BoxMasker(), split_dir=split_dir)
    d = load_nearid(root)
    assert d.identities.split.tolist() == want
    man = json.loads((root / "manifest.json").read_text())["split"]
    assert man["source"] == "split column" and man["official"] and man["checked_against"] == str(split_dir)
    assert man["counts"] == {"train": 12, "val": 2, "test": 4} and len(man["sha256"]) == 64
    # the same partition read from the files alone (positives without the column): the same digest
    monkeypatch.setenv("NEARID_HUB_DIR", str(mirror_nosplit))
    nos = _load("Aleksandar/NearID")
    assert "split" not in nos["train"].column_names
    r2 = materialise_released(tmp_path / "files", nos, {}, masker=BoxMasker(), split_dir=split_dir)
    m2 = json.loads((r2 / "manifest.json").read_text())["split"]
    assert load_nearid(r2).identities.split.tolist() == want
    assert m2["source"] == "split files" and m2["official"] and m2["sha256"] == man["sha256"]
    assert set(m2["files_sha256"]) == {"train.json", "val.json", "test.json"}
    # neither: our rule, which keeps the two identities of one asset together (not the official split)
    r3 = materialise_released(tmp_path / "rule", nos, {}, masker=BoxMasker(), n_val=2, n_test=4)
    m3 = json.loads((r3 / "manifest.json").read_text())["split"]
    assert m3["source"] == "rule" and not m3["official"] and m3["note"] == RULE_NOTE
    assert load_nearid(r3).identities.split.tolist() != want
    # column and files that disagree: an error naming the row
    bad = split_dir.parent / "bad_splits"
    bad.mkdir()
    test = [i for i, v in enumerate(want) if v == "test"]
    train = [i for i, v in enumerate(want) if v == "train"]
    (bad / "val.json").write_text(json.dumps([i for i, v in enumerate(want) if v == "val"]))
    (bad / "test.json").write_text(json.dumps(test[:-1] + [train[0]]))
    (bad / "train.json").write_text(json.dumps(sorted(train[1:] + [test[-1]])))
    with pytest.raises(DataError, match=rf"row {min(train[0], test[-1])}, field 'split'"):
        materialise_released(tmp_path / "bad", pos, {}, masker=BoxMasker(), split_dir=bad)
    # an unknown value in the column names its row
    odd = _edited(pos["train"], lambda c: c["split"].__setitem__(3, "holdout"))
    with pytest.raises(DataError, match=r"row 3, field 'split': 'holdout'"):
        materialise_released(tmp_path / "odd", odd, {}, masker=BoxMasker())


def test_roundtrip_published_schema(hub_env, tmp_path):
    pos = _load("Aleksandar/NearID")
    dists = {s: _load(f"Aleksandar/NearID-{s}") for s in RELEASED_SOURCES}
    masker = BoxMasker()
    root = materialise_released(tmp_path / "nearid", pos, dists, _load("abdo-eldesokey/mtg-dataset"),
                                masker=masker, n_val=2, n_test=4)
    d = load_nearid(root, check_images=True)
    raw = pos["train"]
    n2 = sum(1 for n in raw["n_images"] if n == 2)
    assert 0 < n2 < len(raw)                                  # the fixture has 2- and 3-view identities
    # the official split of the positives' column, training sources of NearID Table 5
    assert d.identities.split.tolist() == fixture_splits(18)
    assert d.identities.split.value_counts().to_dict() == {"train": 12, "val": 2, "test": 4}
    assert d.sources == list(RELEASED_SOURCES) and d.train_sources == list(TABLE5_TRAIN_SOURCES)
    # category_description kept, n_images respected (2-view rows: empty img3 / nimg3)
    ids = d.identities.set_index("id")
    for row in raw.select_columns(["id", "category_description", "n_images"]):
        r = ids.loc[str(row["id"])]
        assert r.description == row["category_description"] and r.n_views == row["n_images"]
    p = d.positives.set_index("id")
    two = [str(r["id"]) for r in raw.select_columns(["id", "n_images"]) if r["n_images"] == 2]
    assert (p.loc[two, "img3"] == "").all() and (p.loc[two, "mask3"] == "").all()
    for s in RELEASED_SOURCES:
        t = d.distractors[s].set_index("id")
        assert (t.loc[two, "nimg3"] == "").all() and (t.drop(index=two)["nimg3"] != "").all()
    # distractors are resized to their view's size (Flux_1024 is larger in the release)
    a = d.positives.img1.iloc[0]
    b = d.distractors["Flux_1024"].nimg1.iloc[0]
    assert Image.open(d.path(a)).size == Image.open(d.path(b)).size
    assert masker.calls == int(d.identities.n_views.sum())
    man = json.loads((root / "manifest.json").read_text())
    assert man["split"]["source"] == "split column" and man["masks"]["model"] == "box-masker-v1"
    assert man["counts"]["identities"] == {"train": 12, "val": 2, "test": 4}
    assert man["provenance"] == {}
    assert set(d.mtg.split) == {"train", "test"}
    # a second call with the same inputs is a no-op (nothing recomputed)
    materialise_released(tmp_path / "nearid", pos, dists, _load("abdo-eldesokey/mtg-dataset"),
                         masker=masker, n_val=2, n_test=4)
    assert masker.calls == int(d.identities.n_views.sum())


def test_resume_after_interruption(hub_env, tmp_path):
    pos = _load("Aleksandar/NearID")
    dists = {"Flux": _load("Aleksandar/NearID-Flux")}

    class Dies(BoxMasker):
        def __call__(self, images, prompts):
            if self.calls >= 10:
                raise KeyboardInterrupt
            return super().__call__(images, prompts)

    with pytest.raises(KeyboardInterrupt):
        materialise_released(tmp_path / "n", pos, dists, masker=Dies(), n_val=2, n_test=4)
    assert not (tmp_path / "n" / "manifest.json").exists()
    again = BoxMasker()
    materialise_released(tmp_path / "n", pos, dists, masker=again, n_val=2, n_test=4)
    d = load_nearid(tmp_path / "n")
    assert 0 < again.calls < int(d.identities.n_views.sum())          # only the missing identities
    assert d.train_sources == ["Flux"]


def test_distractors_must_be_row_aligned(hub_env, tmp_path):
    """The split files' row positions apply to every distractor repo unchanged (the guide), so a
    repo in another row order is an error naming the first row whose id differs."""
    pos = _load("Aleksandar/NearID")
    flux = _load("Aleksandar/NearID-Flux")["train"]
    ids = pos["train"]["id"]
    shuffled = flux.select(list(reversed(range(len(flux)))))
    with pytest.raises(DataError, match=rf"NearID-Flux, row 0, field 'id': {ids[-1]} but Aleksandar/NearID row 0 "
                                        rf"has id {ids[0]}"):
        materialise_released(tmp_path / "b", pos, {"Flux": shuffled}, masker=BoxMasker())


def test_misaligned_and_bad_rows_name_repo_row_id_field(hub_env, tmp_path):
    pos = _load("Aleksandar/NearID")["train"]
    flux = _load("Aleksandar/NearID-Flux")["train"]
    ids = pos["id"]

    def run(p=pos, f=flux, sub="x"):
        return materialise_released(tmp_path / sub, p, {"Flux": f}, masker=BoxMasker(), n_val=2, n_test=4)

    # a distractor row with an id the positives do not have
    bad = _edited(flux, lambda c: c["id"].__setitem__(5, 999999))
    with pytest.raises(DataError, match=rf"NearID-Flux, row 5, field 'id': 999999 but Aleksandar/NearID row 5 "
                                        rf"has id {ids[5]}"):
        run(f=bad, sub="a")
    # a distractor repo one row short
    with pytest.raises(DataError, match=rf"NearID-Flux: {len(ids) - 1} rows, Aleksandar/NearID has {len(ids)}"):
        run(f=flux.select(range(len(flux) - 1)), sub="b")
    # duplicate ids in the positives
    dup = _edited(pos, lambda c: c["id"].__setitem__(2, ids[1]))
    with pytest.raises(DataError, match=rf"Aleksandar/NearID, row 2, field 'id': duplicate id {ids[1]}"):
        run(p=dup, sub="c")
    # n_images that disagrees with the images present
    three = next(i for i, n in enumerate(pos["n_images"]) if n == 3)
    wrong = _edited(pos, lambda c: c["n_images"].__setitem__(three, 2))
    with pytest.raises(DataError, match=rf"row {three} \(id {ids[three]}\), field 'n_images': 2 but 3"):
        run(p=wrong, sub="d")
    # an identity with one view
    one = _edited(pos, lambda c: (c["img2"].__setitem__(0, None), c["n_images"].__setitem__(0, 1)))
    with pytest.raises(DataError, match=rf"row 0 \(id {ids[0]}\), field 'img2': identity has fewer than two views"):
        run(p=one, sub="e")
    # a truncated PNG
    def trunc(c):
        c["img1"][4] = {"bytes": c["img1"][4]["bytes"][:40], "path": None}
    with pytest.raises(DataError, match=rf"row 4 \(id {ids[4]}\), field 'img1'"):
        run(p=_edited(pos, trunc), sub="f")
    # a view whose distractor is missing
    gap = _edited(flux, lambda c: c["nimg1"].__setitem__(7, None))
    with pytest.raises(DataError, match=rf"NearID-Flux, row 7 \(id {ids[7]}\), field 'nimg1': view 1 .* no distractor"):
        run(f=gap, sub="g")
    # a mask model that returns nothing for a view
    class Empty(BoxMasker):
        def __call__(self, images, prompts):
            return [np.zeros((im.size[1], im.size[0]), bool) for im in images]
    with pytest.raises(DataError, match=r"field 'img1': the mask model returned a mask"):
        materialise_released(tmp_path / "h", pos, {"Flux": flux}, masker=Empty(), n_val=2, n_test=4)
    # no masker at all: the release has no masks
    with pytest.raises(DataError, match="no object masks"):
        materialise_released(tmp_path / "i", pos, {"Flux": flux}, n_val=2, n_test=4)


def test_grayscale_and_rgba_views_are_converted(hub_env, tmp_path):
    pos = _load("Aleksandar/NearID")["train"]

    def png(mode, size=64):
        b = io.BytesIO()
        Image.new(mode, (size, size), 128 if mode == "L" else (10, 20, 30, 255)).save(b, format="PNG")
        return {"bytes": b.getvalue(), "path": None}

    def recolour(c):
        c["img1"][0], c["img2"][0] = png("L"), png("RGBA")
    root = materialise_released(tmp_path / "g", _edited(pos, recolour), {}, masker=BoxMasker(), n_val=2, n_test=4)
    d = load_nearid(root)
    first = d.positives.iloc[0]
    assert Image.open(d.path(first.img1)).mode == "RGB" and Image.open(d.path(first.img2)).mode == "RGB"


# --------------------------------------------------------------------------- the split rule
def _meta(rows):
    return pd.DataFrame(rows, columns=["id", "objaverse_id", "category_description"])


def test_assign_splits_hand_case():
    # groups: {1,2} share an asset; {3,4} share a description (case and spaces differ); 5, 6, 7 alone
    meta = _meta([(1, "a", "mug"), (2, "a", "cup"), (3, "b", "A  red Bowl"), (4, "c", "a red bowl"),
                  (5, "d", "vase"), (6, "e", "lamp"), (7, "f", "fork")])
    s = assign_splits(meta, n_val=1, n_test=2, seed=0)
    assert s.value_counts().to_dict() == {"train": 4, "test": 2, "val": 1}
    for a, b in ((0, 1), (2, 3)):
        assert s[a] == s[b]
    # deterministic, independent of row order
    perm = [6, 3, 0, 5, 1, 4, 2]
    s2 = assign_splits(meta.iloc[perm].reset_index(drop=True), 1, 2, seed=0)
    assert dict(zip(meta.id.iloc[perm], s2)) == dict(zip(meta.id, s))
    # another seed gives another (still valid) draw for some seed
    draws = {tuple(assign_splits(meta, 1, 2, seed=k)) for k in range(8)}
    assert len(draws) > 1
    with pytest.raises(DataError, match="could be placed"):
        assign_splits(_meta([(1, "a", "x"), (2, "a", "y"), (3, "a", "z")]), n_val=1, n_test=1)


def test_assign_splits_never_straddles_on_random_data():
    rng = np.random.default_rng(3)
    n = 400
    meta = _meta([(i, f"o{rng.integers(0, 300)}", f"d{rng.integers(0, 300)}") for i in range(n)])
    s = assign_splits(meta, n_val=20, n_test=50, seed=1)
    assert (s == "val").sum() == 20 and (s == "test").sum() == 50
    for col in ("objaverse_id", "category_description"):
        per = pd.DataFrame({"k": meta[col], "s": s}).groupby("k").s.nunique()
        assert (per == 1).all()


def test_authors_split_files(tmp_path, mirror_nosplit, monkeypatch):
    monkeypatch.setenv("NEARID_HUB_DIR", str(mirror_nosplit))
    (tmp_path / "val.json").write_text("[0, 1]")
    (tmp_path / "test.json").write_text('{"indices": [2, 3, 4]}')
    s, digests = read_split_files(tmp_path, 6)
    assert s.tolist() == ["val", "val", "test", "test", "test", "train"]
    assert set(digests) == {"val.json", "test.json"} and all(len(v) == 64 for v in digests.values())
    root = materialise_released(tmp_path / "n", _load("Aleksandar/NearID"), {}, masker=BoxMasker(),
                                split_dir=tmp_path)
    d = load_nearid(root)
    assert d.identities.split.tolist()[:6] == ["val", "val", "test", "test", "test", "train"]
    assert json.loads((root / "manifest.json").read_text())["split"]["files_sha256"] == digests
    for text, msg in (("[0, 0]", "already listed"), ("[9]", "outside the 6"), ("[true]", "not a row index"),
                      ("{", "not JSON"), ('{"rows": 1}', "list of row indices")):
        (tmp_path / "test.json").write_text(text)
        with pytest.raises(DataError, match=msg):
            read_split_files(tmp_path, 6)
    (tmp_path / "val.json").unlink()
    with pytest.raises(DataError, match="val.json missing"):
        read_split_files(tmp_path, 6)


def test_split_files_with_train_json_must_cover_every_row(tmp_path):
    (tmp_path / "val.json").write_text("[0]")
    (tmp_path / "test.json").write_text("[1, 2]")
    (tmp_path / "train.json").write_text("[3, 4]")
    with pytest.raises(DataError, match=r"1 of the 6 positives are in none of train/val/test.json \(first: row 5\)"):
        read_split_files(tmp_path, 6)
    (tmp_path / "train.json").write_text("[3, 4, 5]")
    s, digests = read_split_files(tmp_path, 6)
    assert s.tolist() == ["val", "test", "test", "train", "train", "train"] and len(digests) == 3
