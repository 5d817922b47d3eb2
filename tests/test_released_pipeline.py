"""The paper profile's data path, end to end, on the published schema.

The released NearID positives and two distractor repos (written by :mod:`tools.paper_fixtures.nearid`
in the dataset cards' schema: no masks, no split column) and the MTG dataset are read from a local
hub mirror through :mod:`nearid_lib.hub`, materialised (a box masker stands in for the segmentation
model), and the calls notebooks 03 and 04 make run on them: ``train_head`` (cached tokens,
role-aware masking, MTG rank-only rows) and the bench (``load_bench_encoders`` ->
``evaluate_encoder`` -> ``table1``). Only the backbone is a tiny random-init config of the real
class. Every notebook on this path runs in ``make dryrun-paper``.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from nearid_lib import hub
from nearid_lib.config import get_profile
from nearid_lib.data import load_nearid
from nearid_lib.data.released import materialise_released
from tools.paper_fixtures.nearid import write_nearid_datasets
from nearid_lib.models import load_encoder
from nearid_lib.data.groups import image_groups
from nearid_lib.nearid.evaluate import evaluate_encoder, source_groups
from nearid_lib.nearid.scorers import load_bench_encoders
from nearid_lib.nearid.tables import table1
from nearid_lib.nearid.train import train_head

S = 64


def _box_masker(images, prompts):
    out = []
    for im in images:
        m = np.zeros((im.size[1], im.size[0]), bool)
        m[16:48, 16:48] = True
        out.append(m)
    return out


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("released")
    write_nearid_datasets(tmp / "hub", n_ids=14)
    mp = pytest.MonkeyPatch()
    mp.setenv("NEARID_HUB_DIR", str(tmp / "hub"))
    try:
        pos = hub.load_hub_dataset("Aleksandar/NearID")
        dists = {s: hub.load_hub_dataset(f"Aleksandar/NearID-{s}") for s in ("SDXL", "Flux")}
        mtg = hub.load_hub_dataset("abdo-eldesokey/mtg-dataset")
    finally:
        mp.undo()
    root = materialise_released(tmp / "data" / "smoke" / "nearid", pos, dists, mtg, masker=_box_masker,
                                profile="smoke", n_val=2, n_test=4)
    return tmp, load_nearid(root, check_images=True)


def test_released_fixtures_train_and_evaluate_like_notebooks_03_04(released, monkeypatch):
    tmp, data = released
    monkeypatch.setenv("NEARID_CACHE", str(tmp / "cache"))
    monkeypatch.setenv("NEARID_OUT", str(tmp / "out"))
    # Table 5 trains on Flux (and Flux_1024, Qwen, Qwen_1328), never on SDXL
    assert data.sources == ["SDXL", "Flux"] and data.train_sources == ["Flux"]
    assert (data.positives.split == "test").sum() == 4 and (data.positives.split == "val").sum() == 2
    assert (data.mtg.split == "train").sum() == 6
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
    n = data.identities.loc[data.identities.split == "test", "n_views"].astype(int)
    assert set(n) == {2, 3}
    per_source = 2 * int((n * (n - 1)).sum())
    nearid_row = t1[t1["row"] == "NearID (Ours)"].iloc[0]
    assert int(nearid_row["n_trials"]) == per_source
    assert 0 <= nearid_row["nearid_ssr"] <= 100 and 0 <= nearid_row["nearid_pa"] <= 100
    assert int(nearid_row["n_mtg_pairs"]) == 6 and np.isfinite(nearid_row["mtg_pa"])
