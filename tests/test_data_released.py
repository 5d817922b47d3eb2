"""The released NearID data in its *published* schemas (``Aleksandar/NearID`` in today's layout and
the earlier one, the nine ``Aleksandar/NearID-<source>`` repos, ``abdo-eldesokey/mtg-dataset``),
read through a local hub mirror exactly as ``PROFILE=paper`` reads it.

The fixtures are written by :mod:`tools.paper_fixtures.nearid` in the cards' schemas (checked
column by column against the authors' cards below); error cases edit single rows of them. Today's
card ships a foreground mask per view, which curation uses; a box masker stands in for CLIPSeg where
a view has none (the earlier card: every view); the real CLIPSeg masker is tested in
``test_masks.py`` and ``test_released_parallel.py``."""
from __future__ import annotations

import io
import json

import datasets
import numpy as np
import pandas as pd
import pytest
from PIL import Image, ImageDraw

from nearid_lib import hub
from nearid_lib.data import load_nearid
from nearid_lib.data.released import (RELEASED_SOURCES, TABLE5_TRAIN_SOURCES, assign_splits, distractor_features,
                                      materialise_released, mtg_oracle, positive_features, positives_layout,
                                      read_split_files)
from nearid_lib.data.released_masks import LazyMasker, clean_mask
from nearid_lib.data.released_schema import EARLIER, TODAY
from nearid_lib.data.schema import DataError
from nearid_lib.data.splits import RULE_NOTE
from tools.paper_fixtures.nearid import fixture_splits, write_authors_release, write_nearid_datasets

# The positives' columns as the authors publish them, copied by hand from their repository:
# today's card (make_positives_card() of scripts/upload_nearid_datasets.py at 1a2cc71, which says
# the live card must match the parquet columns exactly) and the earlier one (560b774, no masks, no split).
CARD_TODAY = {"id": "int64", "category": "string", "category_description": "string", "images1": "Image",
              "images2": "Image", "images3": "Image", "masks1": "Image", "masks2": "Image", "masks3": "Image",
              "n_images": "int64", "objaverse_id": "string", "dino_01": "float64", "dino_02": "float64",
              "dino_12": "float64", "aesthetics1": "float64", "aesthetics2": "float64", "aesthetics3": "float64",
              "size1": "[int64]", "size2": "[int64]", "size3": "[int64]", "prompts1": "string", "prompts2": "string",
              "prompts3": "string", "filenames1": "string", "filenames2": "string", "filenames3": "string",
              "quality": "string", "id_safe": "bool", "split": "string"}
CARD_EARLIER = {"id": "int64", "category": "string", "category_description": "string", "img1": "Image",
                "img2": "Image", "img3": "Image", "n_images": "int64", "objaverse_id": "string",
                "prompts1": "string", "prompts2": "string", "prompts3": "string", "quality": "string"}


def _kind(f):
    if isinstance(f, (datasets.Sequence, datasets.List)):
        return f"[{f.feature.dtype}]"
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
def mirror_earlier(tmp_path_factory):
    """The positives in the earlier card's layout (``img1..3``, no masks), with the ``split`` column."""
    d = tmp_path_factory.mktemp("hub_earlier")
    write_nearid_datasets(d, n_ids=18, layout=EARLIER)
    return d


@pytest.fixture(scope="module")
def mirror_nosplit(tmp_path_factory):
    """The earlier card without the ``split`` column (the split then comes from files or the rule)."""
    d = tmp_path_factory.mktemp("hub_nosplit")
    write_nearid_datasets(d, n_ids=18, split_column=False, layout=EARLIER)
    return d


@pytest.fixture
def hub_env(mirror, monkeypatch):
    monkeypatch.setenv("NEARID_HUB_DIR", str(mirror))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return mirror


def _load(repo):
    return hub.load_hub_dataset(repo)


def _load_from(mirror, repo, monkeypatch):
    monkeypatch.setenv("NEARID_HUB_DIR", str(mirror))
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


def test_fixture_schema_is_the_published_one(hub_env, mirror_earlier, tmp_path, monkeypatch):
    assert {c: _kind(f) for c, f in positive_features(TODAY).items()} == CARD_TODAY
    assert list(positive_features(TODAY)) == list(CARD_TODAY)            # the card's column order too
    assert {c: _kind(f) for c, f in positive_features(EARLIER).items()} == CARD_EARLIER
    assert TODAY.commit.startswith("1a2cc71") and EARLIER.commit.startswith("560b774")
    dist = {c: _kind(f) for c, f in distractor_features().items()}
    assert {f"nimg{k}" for k in (1, 2, 3)} <= set(dist) and "id" in dist
    assert not any("mask" in c or c == "split" for c in dist)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))
    pos = _load("Aleksandar/NearID")
    assert list(pos) == ["train"]                         # one split, as published
    assert {c: _kind(f) for c, f in pos["train"].features.items()} == CARD_TODAY
    assert "1a2cc71" in (hub_env / "Aleksandar" / "NearID" / "README.md").read_text()
    early = _load_from(mirror_earlier, "Aleksandar/NearID", monkeypatch)["train"]
    assert {c: _kind(f) for c, f in early.features.items()} == {**CARD_EARLIER, "split": "string"}
    monkeypatch.setenv("NEARID_HUB_DIR", str(hub_env))
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


def test_both_layouts_are_recognised_by_their_columns():
    assert positives_layout(list(CARD_TODAY)) is TODAY
    assert positives_layout(list(CARD_EARLIER)) is EARLIER
    assert positives_layout([*CARD_EARLIER, "split", "my_extra"]) is EARLIER      # extra columns are kept
    assert positives_layout([c for c in CARD_TODAY if c not in ("dino_01", "id_safe")]) is TODAY
    # neither: the error names what the repository has and what each layout expects
    cols = [c for c in CARD_TODAY if c != "masks2"]
    with pytest.raises(DataError) as err:
        positives_layout(cols, "org/positives")
    msg = str(err.value)
    assert "org/positives: matches no published layout" in msg and "images+masks lacks ['masks2']" in msg
    assert "img lacks ['img1', 'img2', 'img3']" in msg and "'images1'" in msg and "1a2cc71" in msg
    with pytest.raises(DataError, match="matches both published layouts"):
        positives_layout([*CARD_TODAY, "img1", "img2", "img3"])


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


@pytest.mark.parametrize("layout", ["today", "earlier"])
def test_roundtrip_published_schema(layout, mirror, mirror_earlier, tmp_path, monkeypatch):
    monkeypatch.setenv("NEARID_HUB_DIR", str(mirror if layout == "today" else mirror_earlier))
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
    n_views = int(d.identities.n_views.sum())
    man = json.loads((root / "manifest.json").read_text())
    # where every view's mask came from: today's card masks each view, the earlier one none
    want = "released" if layout == "today" else "clipseg"
    assert masker.calls == (0 if layout == "today" else n_views)
    assert man["masks"]["source"] == {"released": n_views if want == "released" else 0,
                                      "clipseg": n_views if want == "clipseg" else 0}
    assert man["masks"]["model"] == (None if layout == "today" else "box-masker-v1")
    assert man["positives_layout"]["name"] == ("images+masks" if layout == "today" else "img")
    srcs = [d.positives[f"mask_source{k}"].tolist() for k in (1, 2, 3)]
    assert sorted({x for col in srcs for x in col}) == sorted({want, ""})
    # every non-image column of the release kept, as published, row for row
    extra = pd.read_csv(root / "released_columns.csv", keep_default_na=False, dtype=str)
    img_cols = [c for c, f in raw.features.items() if isinstance(f, datasets.Image)]
    assert list(extra.columns) == [c for c in raw.column_names if c not in img_cols]
    assert extra["id"].tolist() == [str(v) for v in raw["id"]]
    if layout == "today":
        assert extra["size1"].iloc[0] == "[64, 64]" and set(extra["id_safe"]) == {"True", "False"}
    assert man["split"]["source"] == "split column"
    assert man["counts"]["identities"] == {"train": 12, "val": 2, "test": 4}
    assert man["provenance"] == {}
    assert set(d.mtg.split) == {"train", "test"}
    # a second call with the same inputs is a no-op (nothing recomputed)
    calls = masker.calls
    materialise_released(tmp_path / "nearid", pos, dists, _load("abdo-eldesokey/mtg-dataset"),
                         masker=masker, n_val=2, n_test=4)
    assert masker.calls == calls


def test_resume_after_interruption(mirror_earlier, tmp_path, monkeypatch):
    monkeypatch.setenv("NEARID_HUB_DIR", str(mirror_earlier))          # every view through the masker
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
    one = _edited(pos, lambda c: (c["images2"].__setitem__(0, None), c["n_images"].__setitem__(0, 1)))
    with pytest.raises(DataError, match=rf"row 0 \(id {ids[0]}\), field 'images2': identity has fewer than two views"):
        run(p=one, sub="e")
    # a truncated PNG, a truncated mask
    def trunc(c, col="images1"):
        c[col][4] = {"bytes": c[col][4]["bytes"][:40], "path": None}
    with pytest.raises(DataError, match=rf"row 4 \(id {ids[4]}\), field 'images1'"):
        run(p=_edited(pos, trunc), sub="f")
    with pytest.raises(DataError, match=rf"row 4 \(id {ids[4]}\), field 'masks1'"):
        run(p=_edited(pos, lambda c: trunc(c, "masks1")), sub="f2")
    # a view whose distractor is missing
    gap = _edited(flux, lambda c: c["nimg1"].__setitem__(7, None))
    with pytest.raises(DataError, match=rf"NearID-Flux, row 7 \(id {ids[7]}\), field 'nimg1': view 1 .* no distractor"):
        run(f=gap, sub="g")
    # a mask model that returns nothing for a view (one without a released mask)
    class Empty(BoxMasker):
        def __call__(self, images, prompts):
            return [np.zeros((im.size[1], im.size[0]), bool) for im in images]
    nomask = _edited(pos, lambda c: c["masks1"].__setitem__(0, None))
    with pytest.raises(DataError, match=r"field 'images1': the mask model returned a mask"):
        materialise_released(tmp_path / "h", nomask, {"Flux": flux}, masker=Empty(), n_val=2, n_test=4)
    # no masker at all while a view has no released mask: an error before any work, counting them
    with pytest.raises(DataError, match=r"1 of \d+ views have no released object mask"):
        materialise_released(tmp_path / "i", nomask, {"Flux": flux}, n_val=2, n_test=4)


def test_grayscale_and_rgba_views_are_converted(hub_env, tmp_path):
    pos = _load("Aleksandar/NearID")["train"]

    def png(mode, size=64):
        b = io.BytesIO()
        Image.new(mode, (size, size), 128 if mode == "L" else (10, 20, 30, 255)).save(b, format="PNG")
        return {"bytes": b.getvalue(), "path": None}

    def recolour(c):
        c["images1"][0], c["images2"][0] = png("L"), png("RGBA")
        c["masks1"][0], c["masks2"][0] = png("L"), png("L")
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


# --------------------------------------------------------------------------- released masks
def _png_l(arr) -> dict:
    b = io.BytesIO()
    Image.fromarray(np.asarray(arr, dtype=np.uint8), "L").save(b, format="PNG")
    return {"bytes": b.getvalue(), "path": None}


def _blur_reference(grey):
    """OpenCV's GaussianBlur(5x5, sigma 0) on uint8 written out pixel by pixel: the 2-D binomial
    weights [1,4,6,4,1] x [1,4,6,4,1] / 256, reflect-101 border, rounded half up."""
    h, w = grey.shape
    k = np.array([1, 4, 6, 4, 1])

    def refl(i, n):
        return -i if i < 0 else (2 * (n - 1) - i if i >= n else i)

    out = np.zeros_like(grey)
    for y in range(h):
        for x in range(w):
            acc = sum(int(k[a]) * int(k[b]) * int(grey[refl(y + a - 2, h), refl(x + b - 2, w)])
                      for a in range(5) for b in range(5))
            out[y, x] = (acc + 128) // 256
    return out


def test_authors_mask_rule_by_hand():
    from nearid_lib.data.released_masks import _blur_binomial

    rng = np.random.default_rng(0)
    g = rng.integers(0, 256, (9, 11)).astype(np.uint8)
    assert (_blur_binomial(g) == _blur_reference(g)).all()       # exact, integers throughout
    m = np.zeros((40, 40), np.uint8)
    m[10:30, 8:28] = 255                                          # the object (20 x 20)
    m[18:21, 15:18] = 0                                           # a 3 x 3 hole in it
    m[38, 20] = 200                                               # a stray speck
    m[0:3, 37:40] = 255                                           # a small blob in the corner
    out = clean_mask(m)
    # by hand: the blur reaches 255 * 5/16 one pixel outside a straight edge and 255 * 1/16 = 15.9
    # two pixels out (both > 10), 255 * 25/256 diagonally one out, 255 * 5/256 = 5 at offsets (1, 2):
    # the object grows to rows 8..31 x columns 6..29 less three pixels at each corner; the hole is
    # filled; the speck and the blob (opened away / not the largest component) are gone
    want = np.zeros((40, 40), bool)
    want[8:32, 6:30] = True
    for r, c, dr, dc in ((8, 6, 1, 1), (8, 29, 1, -1), (31, 6, -1, 1), (31, 29, -1, -1)):
        for a, b in ((0, 0), (0, 1), (1, 0)):
            want[r + a * dr, c + b * dc] = False
    assert (out == want).all()
    # the binary rule keeps everything > 0 as it is
    from nearid_lib.data.released_masks import binarize_released
    assert (binarize_released(m, "binary") == (m > 0)).all()
    # an object touching the image border is not eroded there (OpenCV's morphology border)
    e = np.zeros((20, 20), np.uint8)
    e[:, :10] = 255
    assert clean_mask(e)[:, :10].all()
    assert not clean_mask(np.zeros((8, 8), np.uint8)).any()


def test_released_masks_used_and_clipseg_only_where_a_view_has_none(hub_env, tmp_path):
    pos = _load("Aleksandar/NearID")["train"]
    raw = _edited(pos, lambda c: None)
    # row 0 view 2: no mask cell; row 3 view 1: an empty mask (all zero)
    size = Image.open(io.BytesIO(raw.cast_column("images1", datasets.Image(decode=False))[3]["images1"]["bytes"])).size
    edit = _edited(pos, lambda c: (c["masks2"].__setitem__(0, None),
                                   c["masks1"].__setitem__(3, _png_l(np.zeros(size[::-1])))))
    masker = BoxMasker()
    root = materialise_released(tmp_path / "m", edit, {}, masker=masker, n_val=2, n_test=4)
    d = load_nearid(root)
    man = json.loads((root / "manifest.json").read_text())["masks"]
    n = int(d.identities.n_views.sum())
    assert masker.calls == 2
    assert man["source"] == {"released": n - 2, "clipseg": 2} and man["model"] == "box-masker-v1"
    assert man["clipseg_reasons"] == {"no released mask": 1, "released mask empty after the rule": 1}
    p = d.positives
    assert p.mask_source2.iloc[0] == "clipseg" and p.mask_source1.iloc[3] == "clipseg"
    assert p.mask_source1.iloc[0] == "released"
    # a released view's foreground is the authors' rule of its mask: the specks gone, the shape kept
    cell = pos.cast_column("masks1", datasets.Image(decode=False))[0]["masks1"]["bytes"]
    grey = np.asarray(Image.open(io.BytesIO(cell)).convert("L"))
    assert ((grey > 0) & (grey < 255)).sum() == 3                        # the fixture's three specks
    written = np.asarray(Image.open(d.path(p.mask1.iloc[0]))) > 127
    assert (written == clean_mask(grey)).all() and not (written & (grey == 200)).any()
    # the binary rule keeps the specks
    root_b = materialise_released(tmp_path / "b", pos, {}, n_val=2, n_test=4, mask_rule="binary")
    wb = np.asarray(Image.open(load_nearid(root_b).path(p.mask1.iloc[0]))) > 127
    assert (wb == (grey > 0)).all()
    assert json.loads((root_b / "manifest.json").read_text())["masks"]["rule"] == "binary"
    # the FG-only image the bench reads: the view with everything outside the released mask black
    from nearid_lib.features.variants import apply_variant
    fg = np.asarray(apply_variant(d.image(p.img1.iloc[0]), d.mask(p.mask1.iloc[0]), "fg"))
    assert (fg[~written] == 0).all() and (fg[written] == np.asarray(d.image(p.img1.iloc[0]))[written]).all()
    # the rule "clipseg" ignores the release's masks
    m2 = BoxMasker()
    root_c = materialise_released(tmp_path / "c", pos, {}, masker=m2, n_val=2, n_test=4, mask_rule="clipseg")
    assert m2.calls == n and json.loads((root_c / "manifest.json").read_text())["masks"]["source"]["clipseg"] == n
    with pytest.raises(DataError, match="released_masks='other'"):
        materialise_released(tmp_path / "x", pos, {}, masker=m2, mask_rule="other")


def test_every_view_masked_by_the_release_never_loads_clipseg(hub_env, tmp_path, monkeypatch):
    """The paper path (``load_released_from_hub``) with today's card: no CLIPSeg in the mirror, and
    none needed; the masker is lazy, so the model is never built."""
    from nearid_lib.config import get_profile
    from nearid_lib.data.released import load_released_from_hub

    assert not (hub_env / "CIDAS").exists()
    cfg = get_profile("paper", {"world.nearid_sources": "Flux", "world.mtg_repo": "", "device": "cpu"})
    root = load_released_from_hub(cfg, tmp_path / "n", progress=False)
    man = json.loads((root / "manifest.json").read_text())
    assert man["masks"]["source"]["clipseg"] == 0 and man["masks"]["model"] is None
    assert "CIDAS/clipseg-rd64-refined" not in hub.reads()
    built = []
    lazy = LazyMasker(lambda: built.append(1) or BoxMasker(), "lazy-box")
    assert lazy.fingerprint == "lazy-box" and not lazy.loaded
    materialise_released(tmp_path / "l", _load("Aleksandar/NearID"), {}, masker=lazy, n_val=2, n_test=4)
    assert built == [] and not lazy.loaded
    assert len(lazy([Image.new("RGB", (8, 8))], ["x"])) == 1 and built == [1] and lazy.loaded


# --------------------------------------------------------------------------- MTG oracle
def test_mtg_oracle_is_the_papers_formula():
    obj = np.zeros((6, 6), bool)
    obj[1:3, 0:5] = True                                 # |Ωo| = 10
    part = np.zeros((6, 6), bool)
    part[1, 0:3] = True                                  # 3 part pixels inside the object
    part[4, 4] = True                                    # 1 part pixel outside it
    # 1 - |Ωp| / |Ωo| = 1 - 4 / 10; (the intersection rule would give 1 - 3 / 10)
    assert mtg_oracle(obj, part) == pytest.approx(0.6)
    big = np.ones((6, 6), bool)                          # |Ωp| = 36 > |Ωo|: the formula as is, negative
    assert mtg_oracle(obj, big) == pytest.approx(1 - 36 / 10)
    assert mtg_oracle(obj, np.zeros_like(obj)) == 1.0
    with pytest.raises(ValueError, match="empty"):
        mtg_oracle(np.zeros_like(obj), part)


def test_mtg_masks_at_gt0_and_part_outside_counted(hub_env, tmp_path):
    mtg = _load("abdo-eldesokey/mtg-dataset")["test"]
    ob = np.asarray(Image.open(io.BytesIO(mtg.cast_column("image_1_object_mask", datasets.Image(decode=False))
                                          [0]["image_1_object_mask"]["bytes"])).convert("L"))
    h, w = ob.shape

    def edit(c):
        obj = np.zeros((h, w), np.uint8)
        obj[10:20, 10:20] = 1                            # value 1: an object under the >= 128 rule would vanish
        part = np.zeros((h, w), np.uint8)
        part[10:12, 10:20] = 255
        part[30:32, 30:35] = 255                         # 10 part pixels outside the object
        c["image_1_object_mask"][0], c["image_1_part_mask"][0] = _png_l(obj), _png_l(part)
    ds = datasets.DatasetDict({"test": _edited(mtg, edit)})
    root = materialise_released(tmp_path / "mtg", mtg=ds)
    table = pd.read_csv(root / "mtg.csv")
    assert table.oracle_1.iloc[0] == pytest.approx(1 - 30 / 100)
    assert (np.asarray(Image.open(root / table.image_1_object_mask.iloc[0])) > 127).sum() == 100
    rec = json.loads((root / "manifest.json").read_text())["mtg_oracle"]
    assert rec["part_outside_object"]["n"] == 1 and rec["negative_oracle"]["n"] == 0
    assert rec["part_outside_object"]["first"][0].endswith("/1")
