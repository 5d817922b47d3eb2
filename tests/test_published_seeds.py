"""Notebook 03 publishes every training seed of the NearID head: the own seed in the folder that
``load_encoder("nearid", checkpoint=...)`` reads, the others under ``seeds/seed<k>``."""
from __future__ import annotations

import json

import pytest

from nearid_lib.models.published import SEEDS_FILE, publish_seeds, published_seeds, seed_dir


def _run(tmp_path, seed):
    d = tmp_path / "runs" / f"r{seed}"
    (d / "resume" / "step_0000001").mkdir(parents=True)
    (d / "head.safetensors").write_bytes(bytes([seed]) * 8)
    (d / "config.json").write_text(json.dumps({"seed": seed}))
    (d / "units_test.csv").write_text("unit\n")
    return d


def test_publish_and_read_back_every_seed(tmp_path):
    runs = {s: _run(tmp_path, s) for s in (2, 0, 1)}
    ck = tmp_path / "checkpoints" / "nearid"
    (ck / "stale").mkdir(parents=True)
    assert publish_seeds(runs, 0, ck) == ck
    assert not (ck / "stale").exists() and not (ck / "resume").exists() and not (ck / "units_test.csv").exists()
    assert (ck / "head.safetensors").read_bytes() == bytes([0]) * 8
    assert (seed_dir(ck, 2) / "head.safetensors").read_bytes() == bytes([2]) * 8
    assert json.loads((ck / SEEDS_FILE).read_text()) == {"seed": 0, "seeds": [0, 1, 2]}
    assert published_seeds(ck) == {0: ck, 1: seed_dir(ck, 1), 2: seed_dir(ck, 2)}
    assert list(published_seeds(ck)) == [0, 1, 2]
    # a listed seed whose folder is gone is named
    import shutil
    shutil.rmtree(seed_dir(ck, 1))
    with pytest.raises(FileNotFoundError, match="seed 1 is listed"):
        published_seeds(ck)
    with pytest.raises(KeyError, match="own seed 5"):
        publish_seeds(runs, 5, ck)


def test_a_head_published_before_seeds_is_its_own_seed(tmp_path):
    d = _run(tmp_path, 3)
    assert published_seeds(d) == {3: d}
    assert published_seeds(tmp_path / "absent") == {0: tmp_path / "absent"}
