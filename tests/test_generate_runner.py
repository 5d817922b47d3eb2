"""Runner: kill-and-resume equality, sharding, order-independent seeds, quality counts, bad inputs; under a
launch no rank waits for another, and a separate pass merges what every rank recorded.

Runs the real diffusers inpainting code path (tiny random-weight SD pipeline, 64 px) offline."""
from __future__ import annotations

import json
import random
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from nearid_lib.generate.base import FillBackend, FillInputError, get_backend
from nearid_lib.generate.quality import QualityFilter
from nearid_lib.generate import runner
from nearid_lib.generate.items import (item_seed, items_from_dataset, load_manifest_records, load_shard_records,
                                       shard_items)
from nearid_lib.generate.merge import merge_source
from nearid_lib.generate.runner import generate_source
from nearid_lib.runtime.seeding import derive_seed

torch.set_num_threads(1)
N_VIEWS = {"a0": 2, "a1": 3, "a2": 2, "b0": 3, "b1": 2}   # 12 items


def _make_root(root: Path, size: int = 64) -> Path:
    rng = np.random.default_rng(0)
    ids, pos = [], []
    for n, (iid, nv) in enumerate(N_VIEWS.items()):
        split = "train" if n < 3 else "test"
        ids.append({"id": iid, "split": split, "class_name": "mug" if n % 2 else "toy car",
                    "description": "a red ceramic mug" if n == 1 else "", "n_views": nv})
        row = {"id": iid, "split": split}
        for k in (1, 2, 3):
            if k > nv:
                row[f"img{k}"] = row[f"mask{k}"] = ""
                continue
            img = (rng.random((size, size, 3)) * 255).astype(np.uint8)
            m = np.zeros((size, size), np.uint8)
            y, x = rng.integers(4, size // 2, 2)
            m[y:y + size // 3, x:x + size // 3] = 255
            (root / "pos").mkdir(parents=True, exist_ok=True)
            (root / "mask").mkdir(parents=True, exist_ok=True)
            Image.fromarray(img).save(root / f"pos/{iid}_{k}.png")
            Image.fromarray(m, "L").save(root / f"mask/{iid}_{k}.png")
            row[f"img{k}"], row[f"mask{k}"] = f"pos/{iid}_{k}.png", f"mask/{iid}_{k}.png"
        pos.append(row)
    pd.DataFrame(ids).to_csv(root / "identities.csv", index=False)
    pd.DataFrame(pos).to_csv(root / "positives.csv", index=False)
    return root


@pytest.fixture(scope="module")
def backend():
    # composite=True keeps the background exact, so the quality filter accepts the outputs of
    # random weights (their in-mask change is large, their drift zero).
    return get_backend("tiny_sd", composite=True, num_inference_steps=2)


@pytest.fixture()
def root(tmp_path):
    return _make_root(tmp_path / "ds")


def _files(root: Path, source: str) -> dict[str, bytes]:
    d = root / "distractors"
    out = {str(p.relative_to(root)): p.read_bytes() for p in (d / source).glob("*.png")}
    out[f"distractors/{source}.csv"] = (d / f"{source}.csv").read_bytes()
    return out


def test_items_and_row_aligned_table(root, backend):
    items = items_from_dataset(root, seed=0)
    assert len(items) == sum(N_VIEWS.values())
    assert {it.item_id for it in items} == {f"{i}/{k}" for i, n in N_VIEWS.items()
                                            for k in range(1, n + 1)}
    generate_source(backend, items, root, "tiny", seed=0, shard=(0, 1), batch_size=3,
                    quality=QualityFilter(), progress=False)
    table, report = merge_source(root, "tiny", items)
    pos = pd.read_csv(root / "positives.csv", dtype=str, keep_default_na=False)
    assert list(table.columns) == ["id", "split", "nimg1", "nimg2", "nimg3"]
    assert list(table.id) == list(pos.id) and list(table.split) == list(pos.split)
    for k in (1, 2, 3):  # a distractor exactly where a view exists
        assert list(table[f"nimg{k}"] != "") == list(pos[f"img{k}"] != "")
    on_disk = pd.read_csv(root / "distractors/tiny.csv", dtype=str, keep_default_na=False)
    pd.testing.assert_frame_equal(on_disk, table)
    for rel in table.nimg1:
        with Image.open(root / rel) as im:
            assert im.mode == "RGB" and im.size == (64, 64)
    assert int(report.n_ok[0]) == len(items) and int(report.n_rejected[0]) == 0


def test_kill_and_resume_is_byte_identical(tmp_path, backend):
    ref = _make_root(tmp_path / "ref")
    run = _make_root(tmp_path / "run")
    kw = dict(seed=3, shard=(0, 1), batch_size=2, quality=QualityFilter(), progress=False)
    generate_source(backend, items_from_dataset(ref, seed=3), ref, "src", **kw)
    merge_source(ref, "src")

    calls = []

    def killer(item_id, rec):
        calls.append(item_id)
        if len(calls) == 5:
            raise KeyboardInterrupt  # the job is killed after 5 finished items

    items = items_from_dataset(run, seed=3)
    with pytest.raises(KeyboardInterrupt):
        generate_source(backend, items, run, "src", on_item=killer, **kw)
    assert len(load_manifest_records(run, "src")) == 5
    with pytest.raises(RuntimeError, match="not done yet"):
        merge_source(run, "src")
    summary = generate_source(backend, items, run, "src", **kw)   # the same command again
    assert summary["n_skipped"] == 5 and summary["n_new_ok"] == len(items) - 5
    merge_source(run, "src")
    a, b = _files(ref, "src"), _files(run, "src")
    assert a.keys() == b.keys() and len(a) == len(items) + 1
    assert all(a[k] == b[k] for k in a)
    # the manifests too (no timestamps, records in item order)
    assert ((ref / "distractors/src.work/manifest_rank0.jsonl").read_bytes()
            == (run / "distractors/src.work/manifest_rank0.jsonl").read_bytes())


@pytest.mark.parametrize("world", [1, 2, 3])
def test_sharding_every_item_exactly_once(tmp_path, backend, world):
    root = _make_root(tmp_path / f"w{world}")
    items = items_from_dataset(root, seed=0)
    shares = [shard_items(items, r, world) for r in range(world)]
    ids = [it.item_id for s in shares for it in s]
    assert sorted(ids) == sorted(it.item_id for it in items) and len(set(ids)) == len(ids)
    for r in range(world):   # ranks run one after the other, in-process
        s = generate_source(backend, items, root, "sh", seed=0, shard=(r, world),
                            batch_size=2, progress=False)
        assert s["n_shard"] == len(shares[r])
    recs = load_manifest_records(root, "sh")
    assert sorted(rec["id"] for _, rec in recs) == sorted(it.item_id for it in items)
    assert len({f for f, _ in recs}) == world            # one manifest per rank
    table, _ = merge_source(root, "sh")
    if world == 3:  # byte-identical to the single-rank result of the same seed
        one = _make_root(tmp_path / "one")
        generate_source(backend, items_from_dataset(one), one, "sh", seed=0, shard=(0, 1),
                        batch_size=2, progress=False)
        merge_source(one, "sh")
        assert _files(one, "sh") == _files(root, "sh")


def test_duplicate_work_is_detected(root, backend):
    items = items_from_dataset(root)
    generate_source(backend, items, root, "dup", shard=(0, 1), progress=False)
    wd = root / "distractors/dup.work"
    line = (wd / "manifest_rank0.jsonl").read_text().splitlines()[0]
    (wd / "manifest_rank1.jsonl").write_text(line + "\n")
    with pytest.raises(RuntimeError, match="more than once"):
        merge_source(root, "dup")


def test_item_seeds_do_not_depend_on_order(tmp_path, backend):
    a = _make_root(tmp_path / "a")
    b = _make_root(tmp_path / "b")
    items = items_from_dataset(a, seed=7)
    generate_source(backend, items, a, "o", seed=7, shard=(0, 1), batch_size=1, progress=False)
    shuffled = items_from_dataset(b, seed=7)
    random.Random(1).shuffle(shuffled)
    generate_source(backend, shuffled, b, "o", seed=7, shard=(0, 1), batch_size=1, progress=False)
    merge_source(a, "o")
    merge_source(b, "o")
    assert _files(a, "o") == _files(b, "o")
    # the output of one item is the backend's fill with derive_seed(item_id, base=seed)
    it = items[4]
    rec = {r["id"]: r for _, r in load_manifest_records(a, "o")}[it.item_id]
    assert rec["seed"] == derive_seed(it.item_id, base=7) == item_seed(it.item_id, 7)
    direct = backend.fill(Image.open(a / it.image).convert("RGB"), Image.open(a / it.mask),
                          it.prompt, derive_seed(it.item_id, base=7))
    assert np.array_equal(np.asarray(direct), np.asarray(Image.open(a / rec["path"])))


class _Scripted(FillBackend):
    """A deterministic test generator: per identity, copy the image (unchanged), invert it all
    (drift) or invert only the mask (good). On retries (seed != attempt-0 seed) always good."""

    name = "scripted"

    def __init__(self, plan, seed):
        self.plan, self.seed = plan, seed

    def fill(self, image, mask, prompt, seed, **settings):  # pragma: no cover - batch used
        raise AssertionError

    def fill_batch(self, requests):
        outs = []
        for r in requests:
            a = np.asarray(r.image)
            m = np.asarray(r.mask) >= 128
            mode = self.plan[r.item_id.split("/")[0]]
            if r.seed != item_seed(r.item_id, self.seed):
                mode = "good"
            if mode == "unchanged":
                out = a.copy()
            elif mode == "drift":
                out = 255 - a
            else:
                out = a.copy()
                out[m] = 255 - a[m]
            outs.append(Image.fromarray(out))
        return outs


@pytest.mark.parametrize("retries", [0, 1])
def test_quality_filter_counts(root, retries):
    plan = {"a0": "unchanged", "a1": "drift", "a2": "good", "b0": "good", "b1": "unchanged"}
    items = items_from_dataset(root)
    generate_source(_Scripted(plan, 0), items, root, "q", seed=0, shard=(0, 1), batch_size=4,
                    quality=QualityFilter(0.02, 0.08), retries=retries, progress=False)
    table, report = merge_source(root, "q", profile="smoke")
    n_unch = N_VIEWS["a0"] + N_VIEWS["b1"]
    n_drift = N_VIEWS["a1"]
    r = report.iloc[0]
    assert r.profile == "smoke" and r.backend == "scripted" and r.n_items == len(items)
    if retries == 0:
        assert (r.n_rejected_unchanged, r.n_rejected_drift) == (n_unch, n_drift)
        assert r.n_ok == len(items) - n_unch - n_drift and r.n_retried == 0
        # rejected items are empty cells in the row-aligned table, recorded in the manifest
        row = table.set_index("id").loc["a1"]
        assert (row.nimg1, row.nimg2, row.nimg3) == ("", "", "")
        assert table.set_index("id").loc["a2"].nimg1 != ""
        recs = {rec["id"]: rec for _, rec in load_manifest_records(root, "q")}
        assert recs["a0/1"]["status"] == "rejected" and recs["a0/1"]["reason"] == "unchanged"
        assert not (root / "distractors/q/a0_1.png").exists()
    else:
        assert r.n_rejected == 0 and r.n_ok == len(items) and r.n_retried == n_unch + n_drift


def test_bad_inputs_clear_errors_nothing_written(tmp_path, backend):
    cases = {
        "size": lambda r: Image.new("L", (32, 32), 255).save(r / "mask/a1_2.png"),
        "empty": lambda r: Image.new("L", (64, 64), 0).save(r / "mask/b0_3.png"),
        "mode": lambda r: Image.new("RGBA", (64, 64)).save(r / "pos/a2_1.png"),
        "missing": lambda r: (r / "pos/b1_2.png").unlink(),
    }
    expect = {"size": ("a1/2", "mask2", "size"), "empty": ("b0/3", "mask3", "empty"),
              "mode": ("a2/1", "img1", "RGBA"), "missing": ("b1/2", "img2", "cannot be read")}
    for name, breaker in cases.items():
        root = _make_root(tmp_path / name)
        breaker(root)
        items = items_from_dataset(root)
        with pytest.raises(FillInputError) as ei:
            generate_source(backend, items, root, "bad", shard=(0, 1), progress=False)
        msg = str(ei.value)
        for part in expect[name]:
            assert part in msg, (name, msg)
        assert not (root / "distractors").exists(), name   # nothing half-written
    # a row whose mask cell is empty while its image is set
    root = _make_root(tmp_path / "cell")
    pos = pd.read_csv(root / "positives.csv", dtype=str, keep_default_na=False)
    pos.loc[1, "mask3"] = ""
    pos.to_csv(root / "positives.csv", index=False)
    with pytest.raises(FillInputError, match=r"row 3 \(id 'a1'\).*'mask3'"):
        items_from_dataset(root)


def test_world_sources_regenerate_identically_in_worker_processes(smoke_world, tmp_path):
    """regenerate_world_sources (notebook 02): one source per spawned process gives the same bytes
    as the serial run, and both reproduce the world's own distractors pixel for pixel (the session's
    smoke world, read only: the regenerated sources go to ``tmp_path``)."""
    from nearid_lib.config import get_profile, with_overrides
    from nearid_lib.data.world_sources import regenerate_world_sources

    cfg = get_profile("smoke")
    world = smoke_world.root
    items = [it for it in items_from_dataset(world, seed=cfg.seed) if it.split == "test"]
    sources = ["sharp", "soft_hr"]      # the plain look and a generator look, resampled
    regenerate_world_sources(cfg, world, tmp_path / "serial", sources, items, workers=1)
    # the default: the profile's runtime.workers (NEARID_WORKERS sets it)
    regenerate_world_sources(with_overrides(cfg, {"runtime.workers": 2}), world, tmp_path / "par", sources, items)
    for s in sources:
        serial = {p.name: p.read_bytes() for p in (tmp_path / "serial" / "distractors" / s).glob("*.png")}
        par = {p.name: p.read_bytes() for p in (tmp_path / "par" / "distractors" / s).glob("*.png")}
        assert len(serial) == len(items) and serial == par
        table = merge_source(tmp_path / "par", s, items, profile="smoke", backend="procedural",
                             input_root=world)[0]
        ref = pd.read_csv(world / "distractors" / f"{s}.csv", dtype=str, keep_default_na=False)
        n = 0
        for k in (1, 2, 3):
            for a, b in zip(table[f"nimg{k}"], ref[f"nimg{k}"]):
                if a and b:
                    n += 1
                    assert np.array_equal(np.asarray(Image.open(tmp_path / "par" / a)),
                                          np.asarray(Image.open(world / b)))
        assert n == len(items)


class _LaunchedRank:
    """One rank of a 2-process launch as the runner sees it (accelerate's ``PartialState``): its block
    of the items, and a barrier that fails the test -- no rank may wait for another's generation."""

    def __init__(self, rank: int, world: int = 2):
        self.process_index, self.num_processes, self.device = rank, world, "cpu"
        self.is_main_process = rank == 0

    @contextmanager
    def split_between_processes(self, ordered):
        yield shard_items(ordered, self.process_index, self.num_processes)

    def wait_for_everyone(self):
        raise AssertionError(f"rank {self.process_index} met a barrier after its generation")


def test_a_launch_never_waits_and_a_separate_pass_merges(tmp_path, monkeypatch, capsys):
    """Under a launch each rank generates its block, writes its completion record and returns
    without a barrier or a gather (after a resume the ranks' shares can differ by hours); rank 0
    reports only its own part. ``--merge-only`` then reads every rank's record and manifest from disk
    and writes the table a one-process run writes."""
    import accelerate.utils

    def no_gather(*a, **k):
        raise AssertionError("the runner gathered over the ranks after their generation")

    monkeypatch.setattr(accelerate.utils, "gather_object", no_gather)
    one, two = _make_root(tmp_path / "one"), _make_root(tmp_path / "two")
    cli = ["--profile", "smoke", "--source", "lp", "--backend", "procedural", "--no-progress"]
    runner.main([*cli, "--root", str(one)])                      # no launch: generate, then merge
    capsys.readouterr()

    monkeypatch.setattr(runner, "launched_state", lambda: _LaunchedRank(1))
    s1 = runner.main([*cli, "--root", str(two)])
    assert (s1["rank"], s1["world_size"]) == (1, 2) and capsys.readouterr().out == ""   # not rank 0: silent
    # rank 0 is still working: the merge pass says so instead of writing a partial table
    with pytest.raises(RuntimeError, match="not done yet"):
        runner.main([*cli, "--root", str(two), "--merge-only"])
    assert [json.loads(x)["rank"] for x in capsys.readouterr().out.splitlines() if x.startswith("{")] == [1]
    monkeypatch.setattr(runner, "launched_state", lambda: _LaunchedRank(0))
    runner.main([*cli, "--root", str(two)])
    out = capsys.readouterr().out
    printed = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(p["rank"], p["world_size"]) for p in printed] == [(0, 2)]        # its own part only
    assert "--merge-only" in out and not (two / "distractors/lp.csv").exists()

    monkeypatch.setattr(runner, "launched_state", lambda: None)
    res = runner.main([*cli, "--root", str(two), "--merge-only"])
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [(p["rank"], p["world_size"]) for p in printed] == [(0, 2), (1, 2)]
    assert [r["rank"] for r in res["records"]] == [0, 1]
    items = items_from_dataset(one)
    assert sum(p["n_shard"] for p in printed) == len(items)
    assert _files(one, "lp") == _files(two, "lp")
    assert ((one / "distractors/lp.work/quality_report.csv").read_bytes()
            == (two / "distractors/lp.work/quality_report.csv").read_bytes())
    # the merge pass reads what every rank wrote: one process, never under a launch
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit, match="one process"):
        runner.main([*cli, "--root", str(two), "--merge-only"])


def test_shard_records_report_the_latest_run(root):
    """A rerun with fewer processes leaves the earlier run's higher ranks out of the report."""
    items, backend = items_from_dataset(root), get_backend("procedural")
    for r in range(3):
        generate_source(backend, items, root, "rec", shard=(r, 3), progress=False)
    assert [(r["rank"], r["world_size"]) for r in load_shard_records(root, "rec")] == [(0, 3), (1, 3), (2, 3)]
    for r in range(2):
        generate_source(backend, items, root, "rec", shard=(r, 2), progress=False)
    recs = load_shard_records(root, "rec")
    assert [(r["rank"], r["world_size"], r["n_new_ok"]) for r in recs] == [(0, 2, 0), (1, 2, 0)]
