"""ID-Sim in the paper profile (``idsim.source = "released"``): the public benchmarks in their
published layouts (DreamBench++ publishers' folders, the Subjects2k hub dataset), the metrics
against slow obvious references, and the stated reasons for what is not produced."""
from __future__ import annotations

import json
import shutil
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
import torch

from nearid_lib import hub
from nearid_lib.config import get_profile
from nearid_lib.data.eval_datasets import load_dreambenchpp
from nearid_lib.data.schema import DataError
from tools.paper_fixtures.idsim import (DBPP_FIXTURE_METHODS, DBPP_FIXTURE_SUBJECTS, N_PROMPTS, write_dreambenchpp,
                                     write_subjects2k)
from nearid_lib.idsim import public_eval as PB
from nearid_lib.data.eval_datasets import SUBJECTS2K_COLUMNS, load_subjects2k
from nearid_lib.idsim import released as R
from nearid_lib.imageio import load_images
from nearid_lib.data.eval_datasets import dbpp_mean_ratings
from nearid_lib.nearid.dbpp import dbpp_for_profile


@pytest.fixture(scope="module")
def dbpp_root(tmp_path_factory):
    return write_dreambenchpp(tmp_path_factory.mktemp("dl") / "dreambenchpp", seed=0)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    d = tmp_path_factory.mktemp("hub")
    write_subjects2k(d / "chaenayo" / "Subjects2k", n_pairs=12, seed=0)
    return d


@pytest.fixture
def in_mirror(mirror, monkeypatch, tmp_path):
    import datasets

    monkeypatch.setenv(hub.HUB_DIR_ENV, str(mirror))
    # datasets caches a local dataset folder under its name alone (not its path or files): every
    # test reads through a cache of its own, so no other Subjects2k folder's rows leak in
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    return mirror


class MeanColour:
    """A stand-in encoder: the pooled embedding is the normalised mean RGB (+1 so it is never 0),
    the 4 "patch tokens" are the quadrants' mean RGB."""

    name, weights = "mean-colour", "none"

    def _arr(self, images):
        return [np.asarray(im, dtype=np.float64) / 255.0 + 1.0 for im in load_images(list(images))]

    def embed(self, images, batch_size=32):
        v = torch.tensor(np.stack([a.mean((0, 1)) for a in self._arr(images)]))
        return torch.nn.functional.normalize(v, dim=-1)

    def encode(self, images, batch_size=32):
        toks = []
        for a in self._arr(images):
            h, w = a.shape[0] // 2, a.shape[1] // 2
            toks.append([a[:h, :w].mean((0, 1)), a[:h, w:].mean((0, 1)), a[h:, :w].mean((0, 1)), a[h:, w:].mean((0, 1))])
        return type("Out", (), {"tokens": torch.tensor(np.array(toks)), "pooled": None})()


# ----------------------------------------------------------------------------- DreamBench++
def test_dreambenchpp_publishers_layout(dbpp_root):
    db = load_dreambenchpp(dbpp_root)
    assert len(db.subjects) == len(DBPP_FIXTURE_SUBJECTS)
    assert set(db.subjects.subject) == {"live_subject_animal_00_dog", "live_subject_animal_01_grey_cat",
                                        "object_00_backpack", "object_01_red_mug"}
    assert all(len(p) == 9 for p in db.subjects.prompts)
    n = len(DBPP_FIXTURE_SUBJECTS) * len(DBPP_FIXTURE_METHODS) * N_PROMPTS
    hum = db.ratings[db.ratings.rater == "human"]
    assert set(hum.group) == {"group1", "group2"} and len(hum) == 2 * n
    assert len(db.ratings[db.ratings.rater == "gpt"]) == n
    assert set(db.ratings.method) == set(DBPP_FIXTURE_METHODS)
    row = hum.iloc[0]
    assert row.image.endswith(f"tgt_image/{row.subject}/{row.prompt_index}_0.jpg")
    assert db.subjects.set_index("subject").image[row.subject] == row.reference
    # the scores are the merged files' values
    f = dbpp_root / "data_human_rating" / "merged_data" / row.group / f"{row.method}-cp.json"
    assert json.loads(f.read_text())[f"{row.subject}-{row.prompt_index}"] == row.score


def test_dreambenchpp_raw_human_files(dbpp_root, tmp_path):
    """The raw per-rater files (``raw_data/<group>/*-<method>.json`` = {key: [cp, pf]}) are read like
    the release's merge_data.py reads them: cp = value[0]."""
    r = tmp_path / "db"
    shutil.copytree(dbpp_root, r)
    merged = r / "data_human_rating" / "merged_data"
    for g in ("group1", "group2"):
        raw = r / "data_human_rating" / "raw_data" / g
        raw.mkdir(parents=True)
        for m in DBPP_FIXTURE_METHODS:
            cp = json.loads((merged / g / f"{m}-cp.json").read_text())
            pf = json.loads((merged / g / f"{m}-pf.json").read_text())
            (raw / f"rater7-{m}.json").write_text(json.dumps({k: [cp[k], pf[k]] for k in cp}))
    a, b = load_dreambenchpp(dbpp_root), load_dreambenchpp(r)
    cols = ["method", "group", "subject", "prompt_index", "score"]
    pd.testing.assert_frame_equal(a.ratings[a.ratings.rater == "human"][cols].reset_index(drop=True),
                                  b.ratings[b.ratings.rater == "human"][cols].reset_index(drop=True))


def _copy(dbpp_root, tmp_path):
    r = tmp_path / "db"
    shutil.copytree(dbpp_root, r)
    return r


def test_dreambenchpp_bad_inputs_name_file_key_field(dbpp_root, tmp_path):
    r = _copy(dbpp_root, tmp_path)
    f = r / "data_human_rating" / "merged_data" / "group1" / "emu2-cp.json"
    d = json.loads(f.read_text())
    key = sorted(d)[0]
    f.write_text(json.dumps({**d, key: "n/a"}))
    with pytest.raises(DataError, match=rf"merged_data/group1/emu2-cp.json, key '{key}'.*score 'n/a' is not a number"):
        load_dreambenchpp(r)
    f.write_text(json.dumps({**d, key: 7}))
    with pytest.raises(DataError, match=r"emu2-cp.json, key .*outside the release's 0-4 scale"):
        load_dreambenchpp(r)
    f.write_text(json.dumps({**d, "object_99_ghost-0": 3}))
    with pytest.raises(DataError, match=r"emu2-cp.json, key 'object_99_ghost-0', field 'collection_id'"):
        load_dreambenchpp(r)
    f.write_text(json.dumps({**d, "no_prompt_index": 3}))
    with pytest.raises(DataError, match=r"emu2-cp.json: key 'no_prompt_index' is not"):
        load_dreambenchpp(r)
    f.write_text(json.dumps(d))
    (r / "samples" / "emu2_gs3_step50_seed42_torch_bfloat16" / "tgt_image" / "object_00_backpack" / "1_0.jpg").unlink()
    with pytest.raises(DataError, match=r"key 'object_00_backpack-1', field 'image': generated image .*1_0.jpg not found"):
        load_dreambenchpp(r)
    assert len(load_dreambenchpp(r, check_files=False).ratings)
    (r / "data" / "captions" / "object" / "00.txt").write_text("\n")
    with pytest.raises(DataError, match=r"data/captions/object/00.txt, line 1: empty subject name"):
        load_dreambenchpp(r)
    shutil.rmtree(r / "data" / "captions")
    with pytest.raises(DataError, match=r"folder .*data/captions missing"):
        load_dreambenchpp(r)
    with pytest.raises(DataError, match=r"does not exist"):
        load_dreambenchpp(tmp_path / "nowhere")


def test_dreambenchpp_needs_human_ratings(dbpp_root, tmp_path):
    r = _copy(dbpp_root, tmp_path)
    shutil.rmtree(r / "data_human_rating")
    with pytest.raises(DataError, match=r"no human ratings in .*data_human_rating"):
        load_dreambenchpp(r)


def test_dbpp_mean_ratings_against_a_loop(dbpp_root):
    db = load_dreambenchpp(dbpp_root)
    mr = dbpp_mean_ratings(db)
    hum = db.ratings[db.ratings.rater == "human"]
    assert len(mr) == len(DBPP_FIXTURE_SUBJECTS) * len(DBPP_FIXTURE_METHODS) * N_PROMPTS
    for r in mr.itertuples():
        vals = [x.score for x in hum.itertuples() if (x.method, x.subject, x.prompt_index) ==
                (r.method, r.subject, r.prompt_index)]
        assert r.rating == pytest.approx(sum(vals) / len(vals)) and r.n_raters == len(vals) == 2
    assert len(dbpp_mean_ratings(db, max_rows=5)) == 5


# ----------------------------------------------------------------------------- Subjects2k
def test_subjects2k_published_schema(in_mirror):
    ds = load_subjects2k("chaenayo/Subjects2k")
    assert tuple(ds.column_names) == SUBJECTS2K_COLUMNS
    assert len(ds) == 12 and 0 < sum(ds["binary_label"]) < 12
    assert all(lab == int(a >= 0.8) for lab, a in zip(ds["binary_label"], ds["human_agreement"]))
    assert all(len(v) == n for v, n in zip(ds["human_votes"], ds["num_human_votes"]))
    assert ds[0]["reference_image"].size == (48, 48)
    assert len(load_subjects2k("chaenayo/Subjects2k", max_pairs=5)) == 5
    assert hub.reads()["chaenayo/Subjects2k"]["source"] == "mirror"


def test_subjects2k_bad_rows_and_missing_repo(in_mirror, tmp_path, monkeypatch):
    import datasets

    src = in_mirror / "chaenayo" / "Subjects2k"
    bad = tmp_path / "hub" / "chaenayo" / "Subjects2k"
    shutil.copytree(src, bad)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets-bad")
    pq = bad / "data" / "train-00000-of-00001.parquet"
    ds = datasets.Dataset.from_parquet(str(pq))
    ds.map(lambda r, i: {"binary_label": 2 if i == 3 else r["binary_label"]}, with_indices=True,
           features=ds.features).to_parquet(str(pq))
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(tmp_path / "hub"))
    pid = ds[3]["pair_id"]
    with pytest.raises(DataError, match=rf"row 3 \(pair_id '{pid}'\), field 'binary_label': 2 is not 0 or 1"):
        load_subjects2k("chaenayo/Subjects2k")
    ds.remove_columns("gpt_score").to_parquet(str(pq))
    (bad / "README.md").write_text("# Subjects2k\n")          # a card without the features, like the parquet
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets-bad2")
    with pytest.raises(DataError, match=r"missing field\(s\) \['gpt_score'\]"):
        load_subjects2k("chaenayo/Subjects2k")
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(tmp_path / "empty"))
    with pytest.raises(hub.HubError, match=r"hf download chaenayo/Subjects2k --repo-type dataset"):
        load_subjects2k("chaenayo/Subjects2k")


# ----------------------------------------------------------------------------- metrics vs slow references
def _slow_ap(s, y):
    """AP = mean over positives of the precision at its score threshold (ties: all tied rows count)."""
    pos = [i for i in range(len(y)) if y[i]]
    return sum(sum(y[j] for j in range(len(s)) if s[j] >= s[i]) / sum(1 for j in range(len(s)) if s[j] >= s[i])
               for i in pos) / len(pos)


def _slow_auc(s, y):
    pos = [s[i] for i in range(len(y)) if y[i]]
    neg = [s[i] for i in range(len(y)) if not y[i]]
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def _ranks(x):
    order = sorted(range(len(x)), key=lambda i: x[i])
    r = [0.0] * len(x)
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def _slow_spearman(a, b):
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    return num / (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5


def _slow_kendall_b(a, b):
    c = d = ta = tb = 0
    for i, j in combinations(range(len(a)), 2):
        da, db_ = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
        if da == 0 and db_ == 0:
            continue
        if da == 0:
            ta += 1
        elif db_ == 0:
            tb += 1
        elif da == db_:
            c += 1
        else:
            d += 1
    return (c - d) / ((c + d + ta) * (c + d + tb)) ** 0.5


def _cos(u, v):
    return float(np.dot(u, v) / np.linalg.norm(u) / np.linalg.norm(v))


def test_pair_scores_pooled_and_patch_against_numpy(in_mirror):
    ds = load_subjects2k("chaenayo/Subjects2k")
    enc = MeanColour()
    a, b = ds["reference_image"], ds["test_image"]
    s = R.pair_scores(enc, a, b, batch_size=5)
    ref = [_cos(np.asarray(x, float).mean((0, 1)) / 255 + 1, np.asarray(y, float).mean((0, 1)) / 255 + 1)
           for x, y in zip(a, b)]
    np.testing.assert_allclose(s, ref, rtol=1e-9)

    def patch_vec(im):
        t = enc.encode([im]).tokens[0].numpy()
        m = (t / np.linalg.norm(t, axis=1, keepdims=True)).mean(0)
        return m / np.linalg.norm(m)

    sp = R.pair_scores(enc, a, b, batch_size=4, kind="patch")
    np.testing.assert_allclose(sp, [float(patch_vec(x) @ patch_vec(y)) for x, y in zip(a, b)], rtol=1e-9)
    with pytest.raises(ValueError, match="kind must be"):
        R.pair_scores(enc, a[:1], b[:1], kind="cls")
    with pytest.raises(ValueError, match="1 first images vs 2 second"):
        R.pair_scores(enc, a[:1], b[:2])


def test_subjects2k_metrics_and_gpt_row_against_slow_references(in_mirror):
    ds = load_subjects2k("chaenayo/Subjects2k")
    res, s = R.subjects2k_metrics(MeanColour(), ds, batch_size=5)
    y = list(ds["binary_label"])
    assert res["n_pairs"] == len(ds)
    assert res["subjects2k_ap"] == pytest.approx(_slow_ap(list(s), y))
    assert res["subjects2k_auc"] == pytest.approx(_slow_auc(list(s), y))
    g = R.subjects2k_gpt_metrics(ds)
    gs = [float(v) for v in ds["gpt_score"]]
    assert g["subjects2k_ap"] == pytest.approx(_slow_ap(gs, y))
    assert g["subjects2k_auc"] == pytest.approx(_slow_auc(gs, y))
    # one class only: no metric rather than a NaN
    assert "subjects2k_ap" not in PB._binary_metrics(np.array([0.1, 0.2]), np.array([1, 1]))


def test_dbpp_metrics_and_gpt_row_against_slow_references(dbpp_root):
    db = load_dreambenchpp(dbpp_root)
    pairs = dbpp_mean_ratings(db)
    res, s = R.dbpp_metrics(MeanColour(), pairs, batch_size=7)
    r = pairs.rating.tolist()
    assert res["n_pairs"] == len(pairs) and res["n_subjects"] == len(DBPP_FIXTURE_SUBJECTS)
    assert res["dreambench_spearman"] == pytest.approx(_slow_spearman(list(s), r))
    assert res["dreambench_kendall"] == pytest.approx(_slow_kendall_b(list(s), r))
    g = R.dbpp_gpt_metrics(db, pairs)
    gpt = db.ratings[db.ratings.rater == "gpt"].set_index(["method", "subject", "prompt_index"]).score
    gs = [float(gpt[(p.method, p.subject, p.prompt_index)]) for p in pairs.itertuples()]
    assert g["n_pairs"] == len(pairs)
    assert g["dreambench_spearman"] == pytest.approx(_slow_spearman(gs, r))
    # pairs GPT did not rate are left out, and under 3 rated pairs there is no value
    db2 = type(db)(db.subjects, db.ratings[(db.ratings.rater == "human") | (db.ratings.prompt_index == 0)
                                           & (db.ratings.method == "emu2") & db.ratings.subject.str.startswith("object")])
    g2 = R.dbpp_gpt_metrics(db2, pairs)
    assert g2["n_pairs"] == 2 and "dreambench_spearman" not in g2


class CountingJudge:
    """Answers similarity = mean brightness of image B (parsable) except every third pair (unreadable)."""

    name = "counting"

    def score_pairs(self, a, b):
        from nearid_lib.judge import JudgeScores

        answers = []
        for i, im in enumerate(b):
            v = float(np.asarray(im, float).mean() / 255)
            answers.append("no idea" if i % 3 == 2 else json.dumps({"same_instance": 1, "confidence": 1,
                                                                   "similarity": round(v, 6)}))
        return JudgeScores.from_answers(answers, key="similarity", hi=1.0)


def test_judge_metrics_cap_and_coverage(in_mirror, dbpp_root):
    ds = load_subjects2k("chaenayo/Subjects2k")
    pairs = dbpp_mean_ratings(load_dreambenchpp(dbpp_root))
    res, per = R.judge_metrics(CountingJudge(), ds, pairs, max_pairs=9, batch_size=4)
    assert res["n_subjects2k"] == 9 and res["n_dreambench"] == 9 and len(per) == 18
    assert set(per.benchmark) == {"Subjects2k", "DreamBench++"}
    # every third answer of each batch is unreadable: NaN, counted as not covered
    assert res["coverage"] == pytest.approx(np.isfinite(per.similarity).mean()) and res["coverage"] < 1
    d = per[per.benchmark == "DreamBench++"].similarity.to_numpy(float)
    ok = np.isfinite(d)
    assert res["dreambench_spearman"] == pytest.approx(
        _slow_spearman(list(d[ok]), list(pairs.rating.iloc[:9].to_numpy()[ok])))


# ----------------------------------------------------------------------------- reasons
def test_paper_profile_scores_released_not_world():
    cfg = get_profile("paper")
    assert cfg.idsim.source == "released"
    assert get_profile("mini").idsim.source == "world" and get_profile("smoke").idsim.source == "world"
    assert {"dinov3-vitl16", "clip-vit-l14"} <= set(cfg.idsim.frozen_rows)


def test_missing_benchmarks_give_reasons_not_crashes(tmp_path, monkeypatch):
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(tmp_path / "hub"))
    monkeypatch.setenv("NEARID_DOWNLOADS", str(tmp_path / "dl"))
    cfg = get_profile("paper", **{"idsim.mllm_judge": None})
    sc = R.score_released(cfg, log=lambda m: None)
    assert not sc.any_benchmark and not sc.results
    assert "hf download chaenayo/Subjects2k --repo-type dataset" in sc.missing["Subjects2k"]
    assert "yuangpeng/dreambench_plus" in sc.missing["DreamBench++"]
    why = R.not_scored(cfg, sc)
    for b in ("PODS", "DeepFashion2", "AerialCattle", "PetFace", "CUTE"):
        assert why[f"benchmark {b}"]
    assert "not in the hub mirror" in why["ID-Sim (released checkpoint)"]
    assert "not public" in why["ID-Sim (trained here)"]
    skips = R.world_only_tables(cfg)
    assert {"09_idsim_persam", "09_idsim_data_ablation", "09_idsim_loss"} <= set(skips)
    assert "claims_09_idsim" not in skips          # judged from the released model (idsim.claims.RELEASED_CLAIMS)
    assert all(v.strip() for v in skips.values())
    assert "not published" in R.SENSITIVITY_REASON


def test_broken_dreambenchpp_is_a_reason(tmp_path, dbpp_root, monkeypatch):
    r = tmp_path / "dl" / "dreambenchpp"
    shutil.copytree(dbpp_root, r)
    f = r / "data_gpt_rating" / "concept_preservation_full" / "emu2.json"
    f.write_text(json.dumps({"object_00_backpack-0": "five"}))
    monkeypatch.setenv("NEARID_DOWNLOADS", str(tmp_path / "dl"))
    monkeypatch.setenv(hub.HUB_DIR_ENV, str(tmp_path / "hub"))
    s2k, db, pairs, missing = R.load_benchmarks(get_profile("paper"))
    assert s2k is None and db is None and pairs is None
    assert "concept_preservation_full/emu2.json, key 'object_00_backpack-0'" in missing["DreamBench++"]
    scorer, why = dbpp_for_profile(get_profile("paper"))
    assert scorer is None and "cannot be read" in why
    f.unlink()
    scorer, why = dbpp_for_profile(get_profile("paper"))
    assert callable(scorer) and why is None


def test_tables_from_scores():
    sc = R.ReleasedScores(results={"dinov3-vitl16": {"subjects2k_ap": 0.3, "dreambench_spearman": 0.5},
                                   "dinov2-large": {"subjects2k_ap": 0.2}},
                          labels={"dinov3-vitl16": "d3", "dinov2-large": "d2"},
                          patch={"subjects2k_ap": 0.25, "dreambench_spearman": 0.4}, patch_label="p",
                          gpt={"subjects2k_ap": 0.29}, n_s2k=10, n_dbpp=20, n_dbpp_subjects=3)
    t = R.released_table(sc, "paper")
    assert set(t.model) == {"DINOv3", "dinov2-large"} and t.value.notna().all()
    assert t.set_index(["model", "metric_id"]).n[("DINOv3", "dreambench_spearman")] == 20
    m = R.released_mllm_table(sc, "paper")
    assert m.set_index("scorer").row["gpt_annotations"] == "MLLM* (GPT-4o)"
    assert m.set_index("scorer").subjects2k_ap["gpt_annotations"] == 0.29
    p = R.released_patch_table(sc, "paper")
    assert p.dataset.tolist() == ["S2k", "DB++"] and "ours" not in p.columns
    assert R.released_patch_table(R.ReleasedScores(), "paper") is None
