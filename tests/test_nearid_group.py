"""One pass for many heads (``nearid_lib.nearid.group``): heads trained together on their shared batch
stream end exactly where each would alone, resume per head, and the stream key groups exactly the
configurations that read the same batches."""
from __future__ import annotations

import json

import pytest
import torch

from nearid_lib.config import get_profile
from nearid_lib.nearid.group import groups_of, stream_key
from nearid_lib.nearid.train import train_group, train_head

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def world(train_world):
    return train_world[1:]


@pytest.fixture(scope="module")
def encoder(tiny_lite0):
    return tiny_lite0


def _cfg(**kw):
    base = {"train.max_steps": 4, "train.checkpoint_every": 2, "head.token_dropout": 0.1, "train.token_crop": 0.5}
    return get_profile("smoke", overrides={**base, **kw})


# three objectives of one batch stream (Table 8 / Table 3 rows) and one InfoNCE head (another stream)
GROUP = [{}, {"train.alpha": 1.0}, {"train.loss": "nearid_cohesion", "train.beta": 0.2, "train.lr": 3e-4},
         {"train.loss": "siglip", "train.alpha": 1.0}]


def test_stream_key_groups_what_reads_the_same_batches():
    cfgs = [_cfg(**o) for o in GROUP] + [_cfg(**{"train.loss": "infonce"}), _cfg(**{"train.loss": "infonce_rneg"}),
                                        _cfg(**{"train.use_mtg": False}), _cfg(**{"train.mask_p_anchor": 0.3}),
                                        get_profile("smoke", overrides={"train.max_steps": 4, "train.checkpoint_every": 2,
                                                                        "head.token_dropout": 0.1,
                                                                        "train.token_crop": 0.5, "seed": 1})]
    assert groups_of(cfgs) == [[0, 1, 2, 3], [4, 5], [6], [7], [8]]
    # the head's own settings never split a group
    assert stream_key(_cfg(**{"head.num_heads": 2, "head.token_dropout": 0.3})) == stream_key(_cfg())


def test_heads_trained_together_equal_heads_trained_alone(world, encoder, tmp_path):
    data, cache = world
    cfgs = [_cfg(**o) for o in GROUP]
    together = train_group(cfgs, data, encoder, out_dirs=[tmp_path / f"g{i}" for i in range(len(cfgs))],
                           progress=False, cache_root=cache)
    for i, c in enumerate(cfgs):
        alone = train_head(c, data, encoder, out_dir=tmp_path / f"a{i}", progress=False, cache_root=cache,
                           eval_split=None)
        sa, sg = alone.head.state_dict(), together[i].head.state_dict()
        # the same operations on the same inputs in the same order (CPU, one thread): exactly equal
        for k in sa:
            assert torch.equal(sa[k], sg[k]), (i, k)
        assert [h["loss"] for h in alone.history] == [h["loss"] for h in together[i].history]
    # the heads really differ (the comparison is not vacuous)
    assert not torch.equal(together[0].head.state_dict()["probe"], together[2].head.state_dict()["probe"])
    # a finished group member is a finished run for train_head: it resumes at the last step
    again = train_head(cfgs[1], data, encoder, out_dir=tmp_path / "g1", progress=False, cache_root=cache,
                       eval_split=None)
    assert again.resumed_from == 4 and (tmp_path / "g1" / "head.safetensors").exists()
    assert torch.equal(again.head.state_dict()["probe"], together[1].head.state_dict()["probe"])


def test_a_killed_group_resumes_per_head(world, encoder, tmp_path):
    data, cache = world
    cfgs = [_cfg(**o) for o in GROUP[:3]]
    dirs = [tmp_path / f"h{i}" for i in range(3)]
    straight = train_group(cfgs, data, encoder, out_dirs=[tmp_path / f"s{i}" for i in range(3)], progress=False,
                           cache_root=cache)
    train_group(cfgs, data, encoder, out_dirs=dirs, stop_after=2, progress=False, cache_root=cache)      # "killed"
    # one head had got further alone (a finished run): the group resumes each head where it stands
    train_head(cfgs[2], data, encoder, out_dir=dirs[2], progress=False, cache_root=cache, eval_split=None)
    resumed = train_group(cfgs, data, encoder, out_dirs=dirs, progress=False, cache_root=cache)
    assert [r.resumed_from for r in resumed] == [2, 2, 4]
    for a, b in zip(straight, resumed):
        for k, v in a.head.state_dict().items():
            assert torch.equal(v, b.head.state_dict()[k]), k
    with pytest.raises(ValueError, match="different batch streams"):
        train_group([_cfg(), _cfg(**{"train.loss": "infonce"})], data, encoder, progress=False, cache_root=cache)


def test_validation_lives_in_the_one_loop(world, encoder, tmp_path):
    """Validation runs per head inside the group exactly as for the head alone (every
    ``train.eval_every`` steps and once at the end, the last one saved as ``final_eval``), and
    ``eval_every``, a head-only setting, keeps heads of different cadence in one group."""
    data, cache = world
    cfgs = [_cfg(**{"train.eval_every": 2}), _cfg(**{"train.alpha": 1.0, "train.eval_every": 0})]
    together = train_group(cfgs, data, encoder, out_dirs=[tmp_path / "g0", tmp_path / "g1"], progress=False,
                           cache_root=cache, eval_split="val")
    assert [e["step"] for e in together[0].evals] == [2, 4] and [e["step"] for e in together[1].evals] == [4]
    js = lambda x: json.dumps(x, sort_keys=True, default=str)     # noqa: E731  (NaN-safe, as the files store it)
    for i, c in enumerate(cfgs):
        alone = train_head(c, data, encoder, out_dir=tmp_path / f"a{i}", progress=False, cache_root=cache)
        assert js(alone.evals) == js(together[i].evals), i
        meta = json.loads((tmp_path / f"g{i}" / "head_config.json").read_text())
        assert js(meta["final_eval"]) == js(together[i].evals[-1]) and meta["step"] == 4
        hist = json.loads((tmp_path / f"g{i}" / "history.json").read_text())
        assert hist["group_size"] == 2 and [h["step"] for h in hist["history"]] == [1, 2, 3, 4]
        assert js(hist["evals"]) == js(together[i].evals)
    # the validation is real: the split's rows name the split and carry its metrics
    assert {"step", "split", "nearid_ssr"} <= set(together[0].evals[-1]) and together[0].evals[-1]["split"] == "val"


def test_a_launch_trains_one_configuration(monkeypatch):
    """Under a multi-process launch a group of several heads fails at once, before any data or
    backbone is touched (the sweep runs groups in processes of one GPU each)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match="a multi-process launch trains one configuration, got 2"):
        train_group([_cfg(), _cfg(**{"train.alpha": 1.0})], None, None)
    with pytest.raises(ValueError, match="2 configurations but 1 out_dirs"):
        train_group([_cfg(), _cfg()], None, None, out_dirs=[None])


def test_a_state_of_another_configuration_is_deleted(world, encoder, tmp_path):
    """A head's folder holding the resume state of another configuration is never resumed from: the
    state is deleted and the head trains from scratch (as a straight run), in a group as alone."""
    data, cache = world
    cfgs = [_cfg(), _cfg(**{"train.alpha": 1.0})]
    train_group([_cfg(**{"train.lr": 5e-3}), cfgs[1]], data, encoder, out_dirs=[tmp_path / "h0", tmp_path / "h1"],
                stop_after=2, progress=False, cache_root=cache)
    straight = train_head(cfgs[0], data, encoder, progress=False, cache_root=cache, eval_split=None)
    res = train_group(cfgs, data, encoder, out_dirs=[tmp_path / "h0", tmp_path / "h1"], progress=False,
                      cache_root=cache)
    assert [r.resumed_from for r in res] == [0, 2]
    for k, v in straight.head.state_dict().items():
        assert torch.equal(v, res[0].head.state_dict()[k]), k
