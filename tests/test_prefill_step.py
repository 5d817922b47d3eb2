"""The paper profile's token-store prefill (``nearid_lib.nearid.prefill_step``): every grid that
training and evaluation read is encoded once, by exactly one rank, with images decoded by DataLoader
workers; a training afterwards only reads. Run on the smoke world with the int8 store the paper
profile uses (``train.token_store=int8``) and the tiny backbone."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from nearid_lib.config import get_profile, with_overrides
from nearid_lib.models import load_encoder
from nearid_lib.nearid.prefill_step import main, prefill_items
from nearid_lib.features.stream import VARIANTS, StreamFeatures, open_train_store
from nearid_lib.nearid.prefill_step import eval_items, train_items
from nearid_lib.nearid.train import train_head


@pytest.fixture(scope="module")
def backbone():
    torch.manual_seed(0)
    return load_encoder("efficientnet-lite0", tiny=True)[0]


def _cfg():
    return with_overrides(get_profile("smoke"), {"train.token_store": "int8"})


def test_items_cover_training_and_evaluation_once(smoke_world):
    cfg = _cfg()
    items = prefill_items(smoke_world, cfg)
    rels = [r for r, _ in items]
    assert len(rels) == len(set(rels))
    assert set(train_items(smoke_world, cfg)) <= set(items)
    assert set(eval_items(smoke_world, ("val", "test"))) <= set(items)


def test_each_grid_by_exactly_one_rank_same_bytes_as_one_process(smoke_world, backbone, tmp_path):
    items = prefill_items(smoke_world, _cfg())[:40]
    one = StreamFeatures(backbone, smoke_world, open_train_store(backbone, smoke_world, tmp_path / "a", writer="w0"),
                         batch_size=8)
    assert one.prefill(items, progress=False) == 2 * len(items)
    # two ranks (one after the other here; torchrun below), the second with DataLoader workers
    n = 0
    for rank in (0, 1):
        feats = StreamFeatures(backbone, smoke_world,
                               open_train_store(backbone, smoke_world, tmp_path / "b", writer=f"rank{rank}"),
                               batch_size=8)
        k = feats.prefill(items, progress=False, rank=rank, world=2, workers=2 * rank)
        assert k == len(items)                      # 80 grids, 40 each: grid j belongs to rank j % 2
        n += k
    assert n == 2 * len(items)
    a = open_train_store(backbone, smoke_world, tmp_path / "a", writer="r")
    b = open_train_store(backbone, smoke_world, tmp_path / "b", writer="r")
    keys = [(r, v) for r, _ in items for v in VARIANTS]
    assert len(a) == len(b) == len(keys)
    # the same grids: a rank's batches hold other images than one process's, so the backbone's
    # floats may differ in the last bits (batch composition; tests/_tolerance.py) and a value on a
    # rounding edge may land one int8 step (the token's scale, max|x| / 127) away
    ga, gb = a.get(keys).numpy(), b.get(keys).numpy()
    step = np.abs(ga).max(axis=-1, keepdims=True) / 127
    assert np.all(np.abs(ga - gb) <= 1.01 * step + 1e-6)
    # a second prefill finds everything stored: nothing is encoded again
    again = StreamFeatures(backbone, smoke_world, b, batch_size=8)
    assert again.prefill(items, progress=False) == 0 and again.stats["forwards"] == 0


def test_training_after_the_prefill_only_reads(smoke_world, backbone, tmp_path):
    cfg = with_overrides(_cfg(), {"train.max_steps": 2, "train.eval_every": 0})
    feats = StreamFeatures(backbone, smoke_world, open_train_store(backbone, smoke_world, tmp_path, writer="rank0"),
                           batch_size=8)
    feats.prefill(prefill_items(smoke_world, cfg), progress=False)
    before = len(open_train_store(backbone, smoke_world, tmp_path, writer="x"))
    train_head(cfg, smoke_world, backbone, cache_root=tmp_path, progress=False, eval_split=None, final_eval=False)
    assert len(open_train_store(backbone, smoke_world, tmp_path, writer="y")) == before


def test_profiles_without_a_store_have_nothing_to_prefill(capsys):
    assert main(["--profile", "smoke"]) == 0
    assert "nothing to prefill" in capsys.readouterr().out


def test_torchrun_two_ranks(smoke_world, tmp_path):
    """The launch itself: two CPU ranks (gloo) fill the store the notebooks open, every grid once."""
    (tmp_path / "data" / "smoke").mkdir(parents=True)
    (tmp_path / "data" / "smoke" / "nearid").symlink_to(smoke_world.root)
    env = {**os.environ, "NEARID_DATA": str(tmp_path / "data"), "NEARID_CACHE": str(tmp_path / "cache"),
           "CUDA_VISIBLE_DEVICES": ""}
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", "-m", "nearid_lib.nearid.prefill_step",
                          "--profile", "smoke", "--set", "train.token_store=int8", "--set", "backbone.tiny=true",
                          "--workers", "0"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rep = json.loads(out.stdout[out.stdout.index("{"):])
    assert rep["processes"] == 2 and rep["stored_before"] == 0
    items = prefill_items(smoke_world, _cfg())
    assert rep["grids"] == 2 * len(items)
    shards = list((tmp_path / "cache" / "smoke" / "shards").iterdir())
    assert len(shards) == 1 and {p.name.split("-")[0] for p in shards[0].glob("rank*")} >= {"rank0", "rank1"}
