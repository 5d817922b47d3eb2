"""The paper profile's data path, end to end, on small fixture files in the released schemas.

Released NearID positives (a ``datasets.Dataset`` saved to disk, with a ``split`` column),
row-aligned distractor datasets of two sources and an MTG dataset are materialised into the NearID
schema; then the same calls notebooks 03 and 04 make run on it: ``train_head`` (cached tokens,
role-aware masking, MTG rank-only rows) and the bench (``load_bench_encoders`` ->
``evaluate_encoder`` -> ``table1``, :mod:`nearid_lib.nearid`). Only the backbone is a tiny random-init config of the real class.
"""
from __future__ import annotations

import datasets
import numpy as np
import pytest
import torch
from PIL import Image

from nearid_lib.config import get_profile
from nearid_lib.data import load_nearid
from nearid_lib.data.released import materialise_released
from nearid_lib.models import load_encoder
from nearid_lib.nearid.embedder import image_groups
from nearid_lib.nearid.evaluate import evaluate_encoder, source_groups
from nearid_lib.nearid.scorers import load_bench_encoders
from nearid_lib.nearid.tables import table1
from nearid_lib.nearid.train import train_head

S = 64
SPLITS = ["train"] * 8 + ["validation"] * 2 + ["test"] * 4   # HF split names, mapped to train/val/test


def _img(seed):
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (S, S, 3), dtype=np.uint8))


def _mask(box=(16, 16, 48, 48)):
    m = np.zeros((S, S), np.uint8)
    m[box[1]:box[3], box[0]:box[2]] = 255
    return Image.fromarray(m, "L")


def _feats(cols):
    return datasets.Features({c: datasets.Value("string") if c in ("id", "split", "description", "category")
                              else datasets.Image() for c in cols})


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("released")
    n = len(SPLITS)
    third = [i % 2 == 0 for i in range(n)]
    pos = {"id": [f"obj{i}" for i in range(n)], "split": SPLITS,
           "description": [f"a small thing {i}" for i in range(n)]}
    for k in (1, 2, 3):
        pos[f"img{k}"] = [_img(10 * i + k) if (k < 3 or third[i]) else None for i in range(n)]
        pos[f"mask{k}"] = [_mask() if (k < 3 or third[i]) else None for i in range(n)]
    datasets.Dataset.from_dict(pos, features=_feats(pos)).save_to_disk(str(tmp / "NearID"))
    dists = {}
    for s, off in (("SDXL", 1000), ("Flux", 2000)):
        d = {"id": pos["id"]}
        for k in (1, 2, 3):
            d[f"nimg{k}"] = [_img(off + 10 * i + k) if (k < 3 or third[i]) else None for i in range(n)]
        datasets.Dataset.from_dict(d, features=_feats(d)).save_to_disk(str(tmp / f"NearID-{s}"))
        dists[s] = str(tmp / f"NearID-{s}")
    m = {"id": [f"p{i}" for i in range(6)], "split": ["train"] * 3 + ["test"] * 3,
         "category": ["mug"] * 6}
    for k in (1, 2):
        m[f"image_{k}_original"] = [_img(5000 + 2 * i + k) for i in range(6)]
        m[f"image_{k}_inpainted"] = [_img(6000 + 2 * i + k) for i in range(6)]
        m[f"image_{k}_object_mask"] = [_mask((8, 8, 56, 56)) for _ in range(6)]
        m[f"image_{k}_part_mask"] = [_mask((8, 8, 8 + 4 * (i + k), 56)) for i in range(6)]
    datasets.Dataset.from_dict(m, features=_feats(m)).save_to_disk(str(tmp / "mtg"))
    # where the smoke profile looks for its data when NEARID_DATA=tmp/data
    root = materialise_released(tmp / "data" / "smoke" / "nearid", str(tmp / "NearID"), dists,
                                mtg=str(tmp / "mtg"), train_sources=["SDXL"], profile="smoke")
    return tmp, load_nearid(root, check_images=True)


def test_released_fixtures_train_and_evaluate_like_notebooks_03_04(released, monkeypatch):
    tmp, data = released
    monkeypatch.setenv("NEARID_CACHE", str(tmp / "cache"))
    monkeypatch.setenv("NEARID_OUT", str(tmp / "out"))
    assert data.sources == ["SDXL", "Flux"] and data.train_sources == ["SDXL"]
    assert (data.positives.split == "test").sum() == 4 and (data.positives.split == "val").sum() == 2
    assert (data.mtg.split == "train").sum() == 3
    cfg = get_profile("smoke", **{"world.source": "released", "train.max_steps": 3, "train.batch_size": 4,
                                  "eval.dbpp_standin": False, "eval.vlm_judge": None})
    torch.manual_seed(0)
    backbone = load_encoder(cfg.backbone.name, tiny=True, image_size=S)[0]
    ckpt = tmp / "out" / "checkpoints" / "nearid"
    res = train_head(cfg, data, backbone, out_dir=ckpt, progress=False, eval_split=None)
    assert len(res.history) == 3 and all(np.isfinite(h["loss"]) for h in res.history)
    # MTG rows of the released MTG dataset reached training (rank-only rows carry its oracles)
    assert (ckpt / "head.safetensors").exists()

    encoders = load_bench_encoders(cfg, data, checkpoint=ckpt)
    assert {b.name for b in encoders} >= {"nearid"}
    for b in encoders:
        if b.kind == "embedding":
            b.embedder.build(image_groups(data, splits=("test",)), ("full", "fg"))
    results = [evaluate_encoder(b, data, "test", ("full", "fg")) for b in encoders]
    groups = source_groups(data.sources, data.train_sources)
    t1 = table1(results, groups, "smoke")
    assert set(t1["row"]) >= {"NearID (Ours)"}
    # 4 test identities, two sources, 2 or 3 views: the trial count is exact (per source: 2 trials
    # for a 2-view identity, 6 for a 3-view one)
    per_source = 2 * (2 * 2 + 2 * 6)
    nearid_row = t1[t1["row"] == "NearID (Ours)"].iloc[0]
    assert int(nearid_row["n_trials"]) == per_source
    assert 0 <= nearid_row["nearid_ssr"] <= 100 and 0 <= nearid_row["nearid_pa"] <= 100
    assert int(nearid_row["n_mtg_pairs"]) == 3 and np.isfinite(nearid_row["mtg_pa"])


def test_nearid_notebooks_run_unchanged_on_released_schema(released, tmp_path):
    """The paper profile's notebooks, unchanged, on released-schema data: only the environment says
    where the data is and that it is released (``NEARID_SET``), exactly as a paper run would."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pandas as pd

    tmp, _ = released
    repo = Path(__file__).resolve().parents[1]
    venv = Path(sys.executable).parent.parent
    env = dict(os.environ, NEARID_DATA=str(tmp / "data"), NEARID_CACHE=str(tmp_path / "cache"),
               NEARID_OUT=str(tmp_path / "out"), NEARID_FIGURES=str(tmp_path / "figs"),
               NEARID_SET="world.source=released; eval.dbpp_standin=false", HF_HUB_OFFLINE="1")
    for nb in ("03_train_nearid", "04_eval_nearid_bench", "05_loss_ablation", "06_alpha_beta_sweep",
               "07_data_ablation", "08_embedding_figures"):
        out = tmp_path / "nb" / f"{nb}.ipynb"
        run = subprocess.run(["bash", str(repo / "scripts" / "run_notebook.sh"), str(venv),
                              str(repo / "notebooks" / f"{nb}.py"), str(out), "smoke"],
                             cwd=repo, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, f"{nb} failed on released-schema data:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
        assert out.exists()
    t1 = pd.read_csv(tmp_path / "figs" / "tables" / "04_table1_main.csv")
    assert "NearID (Ours)" in set(t1["row"]) and set(t1["profile"]) == {"smoke"}
    assert t1["sources_pooled"].str.contains("SDXL").all() and t1["sources_pooled"].str.contains("Flux").all()
    # the procedural DB++ stand-in is off for released data: no procedural column is filled
    assert "dbpp_mh_procedural" not in t1 or t1["dbpp_mh_procedural"].isna().all()
    figs = tmp_path / "figs"
    t3 = pd.read_csv(figs / "tables" / "05_table3_loss_ablation.csv")
    assert {"InfoNCE (sym., 1-pos)", "LNearID (Ours)"} <= set(t3["row"])
    assert len(pd.read_csv(figs / "tables" / "06_table8_alpha.csv")) == len(get_profile("smoke").eval.alphas)
    assert "NearID only" in set(pd.read_csv(figs / "tables" / "07_table6_data_ablation.csv")["row"])
    assert (figs / "08_fig5_kernel_pca.png").stat().st_size > 0
