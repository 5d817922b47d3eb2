"""Notebook 01's materialisation over several processes (``nearid_lib.data.curate_step``): the
ranks of a launch are played by threads sharing a barrier (the same calls a ``torchrun`` rank makes,
with ``barrier=state.wait_for_everyone``). What must hold: every byte written is the same for 1, 2
or 3 processes and after a restart with another number of processes, because the object masker
always sees the same blocks of identities."""
from __future__ import annotations

import hashlib
import threading

import numpy as np
import pytest

from nearid_lib.data.schema import DataError

from nearid_lib import hub
from nearid_lib.data import load_nearid
from nearid_lib.data.curate_step import io_workers_per_rank
from nearid_lib.data.released import RELEASED_SOURCES, materialise_released
from nearid_lib.data.released_identities import identity_blocks, progress_records
from nearid_lib.data.released_schema import EARLIER
from tools.paper_fixtures.nearid import write_nearid_datasets

N_IDS = 37          # 3 blocks of 16: the last one short


class BlockMasker:
    """A mask that depends on the *whole call* (the mean brightness of every image of the call
    shifts the box), so a call with other neighbours would write other bytes; records each call."""
    fingerprint = "block-masker-v1"

    def __init__(self, die_after: int | None = None):
        self.calls: list[tuple] = []
        self.die_after = die_after
        self.lock = threading.Lock()

    def __call__(self, images, prompts):
        with self.lock:
            if self.die_after is not None and len(self.calls) >= self.die_after:
                raise KeyboardInterrupt
            self.calls.append(tuple(hashlib.sha1(im.tobytes()).hexdigest()[:8] for im in images))
        shift = int(np.mean([np.asarray(im).mean() for im in images])) % 3
        out = []
        for im in images:
            w, h = im.size
            m = np.zeros((h, w), bool)
            m[h // 4 + shift: 3 * h // 4, w // 4: 3 * w // 4] = True
            out.append(m)
        return out


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    d = tmp_path_factory.mktemp("hub")
    # the earlier card (no released masks): every view goes through the masker, the case to test
    write_nearid_datasets(d, n_ids=N_IDS, layout=EARLIER)
    return d


@pytest.fixture(scope="module")
def inputs(mirror):
    """The mirror's positives and three distractor repos, loaded once for the module (the mirror's
    environment stays set while its tests run)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NEARID_HUB_DIR", str(mirror))
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        pos = hub.load_hub_dataset("Aleksandar/NearID")
        dists = {s: hub.load_hub_dataset(f"Aleksandar/NearID-{s}") for s in RELEASED_SOURCES[:3]}
        yield pos, dists


@pytest.fixture(scope="module")
def one_process(inputs, tmp_path_factory):
    """The one-process materialisation every launch below is compared with: ``(root, masker)``."""
    pos, dists = inputs
    root = tmp_path_factory.mktemp("one_process") / "w1"
    masker = BlockMasker()
    materialise_released(root, pos, dists, masker=masker)
    return root, masker


def _digest(root):
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "_progress" not in p.parts}


def _launch(root, pos, dists, masker, world):
    """``world`` ranks as threads: each calls materialise_released with its shard and the barrier."""
    barrier = threading.Barrier(world)
    errors: list[BaseException] = []

    def rank(r):
        try:
            materialise_released(root, pos, dists, masker=masker, shard=(r, world), barrier=barrier.wait,
                                 io_workers=2)
        except BaseException as err:          # noqa: BLE001 - reported below
            errors.append(err)
            barrier.abort()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def test_blocks_are_dealt_round_robin_and_cover_every_row_once():
    assert [list(b) for b in identity_blocks(5, 2)] == [[0, 1], [2, 3], [4]]
    assert [list(b) for b in identity_blocks(5, 2, rank=1, world=2)] == [[2, 3]]
    for world in (1, 2, 3, 7):
        rows = sorted(i for r in range(world) for b in identity_blocks(N_IDS, 16, r, world) for i in b)
        assert rows == list(range(N_IDS))
    with pytest.raises(ValueError, match="rank"):
        identity_blocks(5, 2, rank=2, world=2)
    assert io_workers_per_rank(8, cores=64) == 8 and io_workers_per_rank(8, cores=4) == 1


def test_same_bytes_for_one_two_and_three_processes(inputs, one_process, tmp_path):
    pos, dists = inputs
    w1, one = one_process
    ref = _digest(w1)
    assert len(one.calls) == 3 and [len(c) for c in one.calls][:2] == [
        sum(int(n) for n in pos["train"]["n_images"][s:s + 16]) for s in (0, 16)]
    for world in (2, 3):
        m = BlockMasker()
        _launch(tmp_path / f"w{world}", pos, dists, m, world)
        assert _digest(tmp_path / f"w{world}") == ref, world
        assert sorted(m.calls) == sorted(one.calls)          # the masker saw the same blocks
    d = load_nearid(tmp_path / "w2", check_images=True)
    assert len(d.identities) == N_IDS and d.identities.source_row.astype(int).tolist() == list(range(N_IDS))


def test_restart_with_another_number_of_processes_resumes(inputs, one_process, tmp_path):
    pos, dists = inputs
    # 3 ranks, killed after the first block: one block logged, the manifest never written
    # the killed rank's error, or rank 0's, told on disk that a rank failed (it waits on disk, not in a barrier)
    with pytest.raises((KeyboardInterrupt, threading.BrokenBarrierError, DataError)):
        _launch(tmp_path / "w", pos, dists, BlockMasker(die_after=1), 3)
    assert not (tmp_path / "w" / "manifest.json").exists()
    done = len(progress_records(tmp_path / "w" / "_progress"))
    assert 0 < done < N_IDS
    again = BlockMasker()
    _launch(tmp_path / "w", pos, dists, again, 2)
    assert len(again.calls) == 2                               # only the unfinished blocks
    assert _digest(tmp_path / "w") == _digest(one_process[0])


def test_curate_step_two_processes_equal_one(mirror, tmp_path, monkeypatch, capsys):
    """The launch itself: ``torchrun`` with two CPU ranks (gloo barrier) runs the paper profile's
    materialisation with the real (tiny random-init) CLIPSeg masker of the mirror, and writes the
    same bytes as one plain process (the same entry point called in this process)."""
    import json
    import os
    import subprocess
    import sys

    from nearid_lib.data import curate_step
    from tools.tiny_models.clipseg import save_tiny_clipseg

    save_tiny_clipseg(mirror / "CIDAS" / "clipseg-rd64-refined")
    py = sys.executable
    over = "world.nearid_sources=Flux,Qwen; world.mtg_repo=; world.n_val_ids=2; world.n_test_ids=4; device=cpu"
    argv = ["--profile", "paper", "--io-workers", "2"]
    roots = {}
    for world in (1, 2):
        env = {"NEARID_HUB_DIR": str(mirror), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
               "NEARID_DATA": str(tmp_path / f"d{world}"), "NEARID_SET": over, "CUDA_VISIBLE_DEVICES": "",
               "NEARID_ALLOW_CPU": "1"}
        if world == 1:
            # as in a fresh process: no hub reads on record (the manifest lists the reads of the run)
            hub.clear_reads()
            with monkeypatch.context() as mp:
                for k, v in env.items():
                    mp.setenv(k, v)
                capsys.readouterr()
                assert curate_step.main(argv) == 0
            hub.clear_reads()
            stdout = capsys.readouterr().out
        else:
            out = subprocess.run([os.path.join(os.path.dirname(py), "torchrun"), "--standalone", "--nproc_per_node",
                                  "2", "-m", "nearid_lib.data.curate_step", *argv], env={**os.environ, **env},
                                 capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, out.stderr[-3000:]
            stdout = out.stdout
        rep = json.loads(stdout[stdout.index("{"):])
        assert rep["processes"] == world and rep["identities_written"] == N_IDS
        roots[world] = tmp_path / f"d{world}" / "paper" / "nearid"
    assert _digest(roots[1]) == _digest(roots[2])
    logs = sorted(p.name for p in (roots[2] / "_progress").glob("identities*.jsonl"))
    assert logs == ["identities-r0.jsonl", "identities-r1.jsonl"]


def test_rank_0_waits_for_the_other_ranks_records_on_disk_not_in_a_collective(tmp_path, capsys):
    """After the writes no barrier: rank 0 polls the progress folder (a file-system wait) until every
    identity's record is there, saying how many are missing now and then."""
    import json

    from nearid_lib.data.released import await_records

    prog = tmp_path / "_progress"
    prog.mkdir()
    now = [0.0]
    polls = []

    def sleep(s):
        polls.append(s)
        now[0] += s
        # another rank's record arrives after the third poll
        if len(polls) == 3:
            (prog / "identities_rank1.jsonl").write_text(json.dumps({"id": 7}) + "\n")

    (prog / "identities_rank0.jsonl").write_text(json.dumps({"id": 5}) + "\n")
    recs = await_records(prog, ["5", "7"], poll_s=10, say_every_s=20, clock=lambda: now[0], sleep=sleep)
    assert set(recs) >= {"5", "7"} and polls == [10, 10, 10]
    assert "waits for 1 identities of the other ranks" in capsys.readouterr().out


def test_rank_0_stops_waiting_when_another_rank_failed(tmp_path):
    from nearid_lib.data.released import await_records
    from nearid_lib.data.schema import DataError

    prog = tmp_path / "_progress"
    prog.mkdir()
    (prog / "failed_rank2").write_text("KeyboardInterrupt: killed")
    with pytest.raises(DataError, match="rank2 failed"):
        await_records(prog, ["5"], poll_s=0.01, sleep=lambda s: None)
