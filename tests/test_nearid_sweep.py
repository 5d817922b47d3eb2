"""Reused runs are keyed by configuration, data and the training code (never a stale result),
and a sweep trains every row at every seed with the row's overrides on top of the recipe."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
import torch

from nearid_lib.config import get_profile, with_overrides
from nearid_lib.models import load_encoder
from nearid_lib.nearid import checkpoints as ck
from nearid_lib.nearid import sweep as sw
from nearid_lib.nearid.ablations import alpha_rows, main_row

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def world(smoke_world, tmp_path_factory):
    """The session's smoke world (the training overrides leave its world fingerprint as it is; runs
    and caches go to the module's own folder, nothing into the world)."""
    cfg = get_profile("smoke", overrides={"train.max_steps": 2, "train.checkpoint_every": 1})
    tmp = tmp_path_factory.mktemp("sweep")
    torch.manual_seed(0)
    return cfg, smoke_world, tmp


def test_run_key_follows_config_data_and_code(world, monkeypatch, tmp_path):
    cfg, data, _ = world
    k = ck.run_key(cfg, data)
    assert ck.run_key(cfg, data) == k
    assert ck.run_key(with_overrides(cfg, {"train.alpha": 0.25}), data) != k        # config
    monkeypatch.setattr(ck, "closure_fingerprint", lambda *roots: "edited")          # training code
    assert ck.run_key(cfg, data) != k
    monkeypatch.undo()
    copy = tmp_path / "copy"                                                         # data
    copy.mkdir()
    man = json.loads((data.root / "manifest.json").read_text())
    man["edited"] = True
    (copy / "manifest.json").write_text(json.dumps(man))
    assert ck.run_key(cfg, type("D", (), {"root": copy})()) != k


def test_training_code_names_real_modules():
    assert ck.training_code()              # raises on a root that is not a module


def test_finished_run_is_reused_only_under_its_key(world, monkeypatch):
    cfg, data, tmp = world
    enc = load_encoder("efficientnet-lite0", tiny=True)[0]
    kw = dict(run_root=tmp / "runs", cache_root=tmp / "cache", variants=("full",))
    first = sw.train_and_score(cfg, data, enc, **kw)
    again = sw.train_and_score(cfg, data, enc, **kw)
    assert not first.reused and again.reused
    assert json.dumps(again.scores, sort_keys=True) == json.dumps(first.scores, sort_keys=True)   # NaN-safe
    monkeypatch.setattr(ck, "closure_fingerprint", lambda *roots: "edited")
    edited = sw.train_and_score(cfg, data, enc, **kw)
    assert not edited.reused and edited.key != first.key


def test_run_rows_applies_overrides_on_the_recipe_and_every_seed(world, monkeypatch):
    cfg, data, tmp = world
    cfg = with_overrides(cfg, {"train.lr": 7e-4})          # a caller's recipe change must survive
    seen = []

    def fake(c, data, encoder, label="", progress=False, **kw):
        seen.append((c.seed, c.train.alpha, c.train.lr))
        sc = {"nearid_ssr": 0.0, "nearid_pa": 0.0, "mtg_mo": 0.0, "mtg_ssr": 0.0}
        return sw.RunResult(f"k{len(seen)}", c.seed, label, tmp, 1.0, 2, 0.0, False, {"test": sc}, {}, None)

    monkeypatch.setattr(sw, "train_and_score", fake)
    rows = [main_row(cfg), *[r for r in alpha_rows(cfg) if r.key != "nearid"][:1]]
    res = sw.run_rows(cfg, data, None, rows, seeds=[3, 4], progress=False)
    assert [s for s, _, _ in seen] == [3, 4, 3, 4]
    assert all(lr == 7e-4 for _, _, lr in seen)
    assert {a for _, a, _ in seen[2:]} == {float(cfg.eval.alphas[0])}
    assert res.summary()["n_seeds"].tolist() == [2, 2]


def test_rerun_in_a_fresh_folder_is_bit_identical(world):
    """Reruns reproduce: the same configuration trained from scratch twice (new folders, no reuse)
    gives the same per-identity outcomes and the same head weights, bit for bit."""
    from safetensors.torch import load_file
    cfg, data, tmp = world
    enc = load_encoder("efficientnet-lite0", tiny=True)[0]
    runs = [sw.train_and_score(cfg, data, enc, run_root=tmp / f"rerun{i}", cache_root=tmp / "cache",
                               variants=("full",), reuse=False) for i in range(2)]
    assert json.dumps(runs[0].scores, sort_keys=True) == json.dumps(runs[1].scores, sort_keys=True)
    assert runs[0].units["full"].equals(runs[1].units["full"])
    w = [load_file(next(p for p in r.directory.rglob("*.safetensors"))) for r in runs]
    assert w[0].keys() == w[1].keys() and all(torch.equal(w[0][k], w[1][k]) for k in w[0])


def test_worker_processes_train_the_same_runs_as_the_main_process(world, tmp_path):
    """run_rows with ``runtime.workers = 2`` trains the missing runs in spawned processes; every run
    equals the one the main process trains (scores and weights, the same run folder: the runtime
    section is no part of a run's key), and the main process then reads them as reused."""
    from safetensors.torch import load_file

    from nearid_lib.models import load_backbone

    cfg, data, _ = world
    cfg = with_overrides(cfg, {"backbone.tiny": False})        # tiny inits are not seeded: real weights
    enc = load_backbone(cfg)[0]
    rows = [main_row(cfg), alpha_rows(cfg)[0]]
    kw = dict(cache_root=tmp_path / "cache", variants=("full",), progress=False)
    serial = sw.run_rows(cfg, data, enc, rows, seeds=[0], workers=1, run_root=tmp_path / "serial", **kw)
    par = sw.run_rows(with_overrides(cfg, {"runtime.workers": 2}), data, enc, rows, seeds=[0],
                      run_root=tmp_path / "par", **kw)
    for r in rows:
        a, b = serial.runs[r.key][0], par.runs[r.key][0]
        assert not a.reused and b.reused            # b was trained by a worker, then read
        assert a.directory.name == b.directory.name
        assert json.dumps(a.scores, sort_keys=True) == json.dumps(b.scores, sort_keys=True)
        wa = {k: v for f in sorted(a.directory.glob("*.safetensors")) for k, v in load_file(f).items()}
        wb = {k: v for f in sorted(b.directory.glob("*.safetensors")) for k, v in load_file(f).items()}
        assert wa and wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_one_gpu_per_sweep_worker(monkeypatch):
    """Sweep workers are dealt the visible GPUs round-robin, each seeing only its own."""
    import queue

    assert sw.worker_devices(3, visible="", count=0) == [None, None, None]
    assert sw.worker_devices(4, visible="", count=2) == ["0", "1", "0", "1"]
    # the parent's own restriction is respected (physical ids, not 0..n-1)
    assert sw.worker_devices(3, visible="2,5,7", count=3) == ["2", "5", "7"]
    assert sw.worker_devices(2, visible="2,5,7", count=2) == ["2", "5"]
    q = queue.Queue()
    for d in ("5", None):
        q.put(d)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5,7")
    sw._pin_device(q)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    sw._pin_device(q)                      # no GPU dealt: the environment is left alone
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"


def test_cli_training_is_reused_by_the_notebook_run(smoke_world, tmp_path, monkeypatch):
    """``python -m nearid_lib.nearid.train`` (e.g. under accelerate launch) trains into the run folder
    of its configuration, so notebook 03's ``train_and_score`` of the same configuration reuses it."""
    from nearid_lib.nearid import train as tr

    monkeypatch.setenv("NEARID_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("NEARID_CACHE", str(tmp_path / "cache"))
    over = {"train.max_steps": "2", "train.batch_size": "4"}
    argv = ["--profile", "smoke", "--data", str(smoke_world.root)] + [x for k, v in over.items() for x in ("--set", f"{k}={v}")]
    assert tr.main(argv) == 0
    cfg = get_profile("smoke", over)
    d = sw.run_dir(cfg, smoke_world)
    assert d.parent.name == "head_runs" and d.is_relative_to(tmp_path / "out")
    head = (d / "head.safetensors").read_bytes()
    calls = []
    real = sw.train_head

    def spy(*a, **k):
        calls.append(k.get("resume"))
        return real(*a, **k)

    monkeypatch.setattr(sw, "train_head", spy)
    res = sw.train_and_score(cfg, smoke_world)
    assert res.directory == d and res.steps == 2 and not res.reused
    assert calls == [True]                             # resumed at its last step: nothing retrained
    assert (d / "head.safetensors").read_bytes() == head


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_worker_processes_take_whole_batch_streams(world, monkeypatch, tmp_path, device):
    """On GPUs, with more worker processes than batch streams, each stream is still one task (one
    pass over the token store): a stream split over processes would read the store once per part.
    On the CPU (compute, not reads, is the cost) each stream is split so that every core has work."""
    from concurrent.futures import Future

    cfg, data, _ = world
    cfg = with_overrides(cfg, {"backbone.tiny": False})        # real backbones train in workers
    configs = [replace(with_overrides(cfg, {"train.alpha": a}), seed=s) for s in (0, 1) for a in (0.25, 0.5, 1.0)]
    tasks, pools = [], []

    class Pool:                             # records the tasks instead of spawning processes
        def __init__(self, n):
            pools.append(n)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, fn, cfgs, *args):
            tasks.append([(c.seed, c.train.alpha) for c in cfgs])
            f = Future()
            f.set_result([])
            return f

    monkeypatch.setattr(sw, "_worker_pool", Pool)
    configs = [with_overrides(c, {"device": device}) for c in configs]
    monkeypatch.setattr(sw, "resolve_device", lambda d: torch.device(d))     # no GPU needed to plan
    n = sw.train_grouped(configs, data, None, workers=8, run_root=tmp_path / "runs")
    if device == "cuda":
        assert n == 6 and pools == [2]
        assert tasks == [[(0, 0.25), (0, 0.5), (0, 1.0)], [(1, 0.25), (1, 0.5), (1, 1.0)]]
    else:
        assert n == 6 and pools == [6]
        assert sorted(tasks) == [[(0, a)] for a in (0.25, 0.5, 1.0)] + [[(1, a)] for a in (0.25, 0.5, 1.0)]
