"""Sharded token store: exact round trips, skipped duplicates, disk budget, several writers, and
recovery after a kill (between data and index, a torn index line, a real SIGKILL)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from nearid_lib.features.shards import CODECS, ShardedTokenStore, decode_tokens, encode_tokens, record_bytes

N, D = 6, 20


def _grid(i: int, n: int = N, d: int = D) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + i)
    return torch.randn(n, d, generator=g) * (1 + i % 3)


def _keys(ids, variant="full"):
    return [(f"img/{i}.png", variant) for i in ids]


@pytest.mark.parametrize("dtype", list(CODECS))
def test_codec_round_trip(dtype):
    x = torch.stack([_grid(i) for i in range(4)])
    x[0, 0, 0] = 50.0                                   # an outlier: only its own token's scale grows
    raw = encode_tokens(x, dtype)
    assert raw.dtype == torch.uint8 and raw.shape == (4, record_bytes(N, D, dtype))
    y = decode_tokens(raw, N, D, dtype)
    if dtype == "float32":
        assert torch.equal(x, y)
    elif dtype in ("float16", "bfloat16"):
        assert torch.equal(y, x.to(getattr(torch, dtype)).float())
    else:
        amax = x.abs().amax(-1, keepdim=True)
        # int8: half a quantisation step of the token's own scale; fp8 e4m3: 3 mantissa bits
        bound = amax / 254 if dtype == "int8" else x.abs() / 16 + amax / 448 * 2 ** -6
        assert torch.all((y - x).abs() <= bound * 1.001 + 1e-7)
        # scales are per token: the outlier's neighbours are stored as if it were not there
        assert torch.equal(decode_tokens(encode_tokens(x[:, 1:], dtype), N - 1, D, dtype), y[:, 1:])


def test_put_get_across_shards_and_reopen(tmp_path):
    st = ShardedTokenStore(tmp_path, N, D, "float32", key="k", shard_records=3)
    x = torch.stack([_grid(i) for i in range(8)])
    assert st.put(_keys(range(8)), x) == 8
    assert len(list(tmp_path.glob("*.bin"))) == 3          # 3 + 3 + 2 records
    order = [7, 0, 3, 3, 5]
    assert torch.equal(st.get(_keys(order)), x[order])
    # present and repeated keys are skipped, new ones written
    assert st.put(_keys([1, 8, 8]), torch.stack([_grid(99), _grid(8), _grid(8)])) == 1
    assert torch.equal(st.get(_keys([1])), x[[1]])           # not overwritten by the second put
    ro = ShardedTokenStore.open(tmp_path)
    assert len(ro) == 9 and torch.equal(ro.get(_keys([8, 2])), torch.stack([_grid(8), x[2]]))
    with pytest.raises(PermissionError):
        ro.put(_keys([9]), _grid(9)[None])
    with pytest.raises(KeyError, match="img/10.png"):
        ro.get(_keys([10]))
    with pytest.raises(ValueError, match="another store"):
        ShardedTokenStore(tmp_path, N, D, "int8", key="k")


def test_variants_are_separate_keys(tmp_path):
    st = ShardedTokenStore(tmp_path, N, D, "float32")
    st.put([("a.png", "full"), ("a.png", "fg")], torch.stack([_grid(0), _grid(1)]))
    assert torch.equal(st.get([("a.png", "fg"), ("a.png", "full")]), torch.stack([_grid(1), _grid(0)]))
    assert list(st.has([("a.png", "fg"), ("b.png", "fg")])) == [True, False]


def test_disk_budget_stops_writing(tmp_path):
    rb = record_bytes(N, D, "int8")
    st = ShardedTokenStore(tmp_path, N, D, "int8", max_bytes=int(2.5 * rb))
    assert st.put(_keys(range(5)), torch.stack([_grid(i) for i in range(5)])) == 2
    assert st.room() == 0 and len(st) == 2 and st.bytes_on_disk == 2 * rb
    assert sum(p.stat().st_size for p in tmp_path.glob("*.bin")) == 2 * rb


def test_two_writers_share_one_store(tmp_path):
    a = ShardedTokenStore(tmp_path, N, D, "float32", writer="rank0")
    b = ShardedTokenStore(tmp_path, N, D, "float32", writer="rank1")
    a.put(_keys([0, 1]), torch.stack([_grid(0), _grid(1)]))
    b.put(_keys([2]), _grid(2)[None])
    assert ("img/2.png", "full") not in a
    a.refresh()
    assert torch.equal(a.get(_keys([2, 0])), torch.stack([_grid(2), _grid(0)]))


def test_kill_between_data_and_index_is_repaired(tmp_path, monkeypatch):
    st = ShardedTokenStore(tmp_path, N, D, "float32", shard_records=10)
    st.put(_keys([0, 1]), torch.stack([_grid(0), _grid(1)]))

    def killed(*a, **k):
        raise KeyboardInterrupt("killed after the data write")

    monkeypatch.setattr(ShardedTokenStore, "_commit", killed)
    with pytest.raises(KeyboardInterrupt):
        st.put(_keys([2, 3]), torch.stack([_grid(2), _grid(3)]))
    monkeypatch.undo()
    rb = record_bytes(N, D, "float32")
    assert (tmp_path / "w0-00000.bin").stat().st_size == 4 * rb      # orphan records on disk
    st2 = ShardedTokenStore(tmp_path, N, D, "float32", shard_records=10)
    assert len(st2) == 2 and (tmp_path / "w0-00000.bin").stat().st_size == 2 * rb
    # a torn index line (killed while appending it) is dropped, too
    with open(tmp_path / "w0-00000.idx", "a") as fh:
        fh.write("img/9.png\tfu")
    st3 = ShardedTokenStore(tmp_path, N, D, "float32", shard_records=10)
    assert st3.put(_keys([3, 2]), torch.stack([_grid(3), _grid(2)])) == 2
    ro = ShardedTokenStore.open(tmp_path)
    assert len(ro) == 4
    assert torch.equal(ro.get(_keys([0, 1, 2, 3])), torch.stack([_grid(i) for i in range(4)]))


_WRITER = """
import sys, torch
sys.path.insert(0, {repo!r})
from nearid_lib.features.shards import ShardedTokenStore
st = ShardedTokenStore({root!r}, {n}, {d}, "float32", shard_records=7)
i = len(st)
while True:
    g = torch.Generator().manual_seed(1000 + i)
    st.put([(f"img/{{i}}.png", "full")], (torch.randn({n}, {d}, generator=g) * (1 + i % 3))[None])
    i += 1
    if i == 5:
        print("ready", flush=True)
"""


def test_sigkill_mid_write_resumes(tmp_path):
    repo = str(Path(__file__).resolve().parents[1])
    code = _WRITER.format(repo=repo, root=str(tmp_path), n=N, d=D)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    st = ShardedTokenStore(tmp_path, N, D, "float32", shard_records=7)
    n = len(st)
    assert n >= 5
    ids = list(range(n))
    assert torch.equal(st.get(_keys(ids)), torch.stack([_grid(i) for i in ids]))   # every committed grid exact
    assert st.put(_keys([n]), _grid(n)[None]) == 1                                # and writing resumes
    assert torch.equal(ShardedTokenStore.open(tmp_path).get(_keys([n, 0])), torch.stack([_grid(n), _grid(0)]))


def _create_stores(root, rounds, barrier, writer):
    for k in range(rounds):
        barrier.wait()                    # every process creates store k at the same moment
        ShardedTokenStore(Path(root) / f"s{k}", 4, 8, "int8", key="k", writer=writer)


def test_ranks_create_one_store_at_the_same_moment(tmp_path):
    """The ranks of a launch open the training store together: each writes meta.json through its own
    temporary file (a shared ``meta.tmp`` let one rank rename the other's file away: FileNotFoundError,
    seen in CI under torchrun)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    n, rounds = 4, 40
    barrier = ctx.Barrier(n, timeout=20)   # a process that died breaks it: the others fail, never hang
    procs = [ctx.Process(target=_create_stores, args=(tmp_path, rounds, barrier, f"w{i}")) for i in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(90)
    assert [p.exitcode for p in procs] == [0] * n
    for k in range(rounds):
        assert ShardedTokenStore.open(tmp_path / f"s{k}").key == "k"
    assert not list(tmp_path.rglob("*.tmp*"))
