"""Generation and the VLM judge over 2 CPU processes (``torchrun --standalone``, gloo) give what one
process gives: the same distractor files byte for byte, the same judge answers and scores; each
process writes its own manifest / answers file, and a run cut short resumes per shard. The one-process
runs (and the merge passes, one process by design) call the same entry points in the test's own
process: only the launches start interpreters."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from nearid_lib.generate import runner
from nearid_lib.generate.items import items_from_dataset, shard_items
from nearid_lib.judge.cli import main as judge_main

TORCHRUN = Path(sys.executable).with_name("torchrun")
ENV = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", NEARID_THREADS="1",
           GLOO_SOCKET_IFNAME="lo")   # loopback only: gloo pairs on one host (flaky without it)


def _launch(module: str, args: list[str], timeout: int = 300) -> str:
    """``torchrun --nproc_per_node 2 -m module args``; its standard output."""
    cmd = [str(TORCHRUN), "--standalone", "--nproc_per_node", "2", "-m", module, *args]
    res = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}")
    return res.stdout


def _one_process(main, args: list[str], capsys) -> str:
    """An entry point's ``main(args)`` in this process (not under a launch); what it printed."""
    capsys.readouterr()
    main(args)
    return capsys.readouterr().out


def _outputs(root: Path, source: str) -> dict[str, bytes]:
    d = root / "distractors"
    out = {p.name: p.read_bytes() for p in (d / source).glob("*.png")}
    out["table"] = (d / f"{source}.csv").read_bytes()
    out["quality"] = (d / f"{source}.work" / "quality_report.csv").read_bytes()
    return out


def _manifest_ids(root: Path, source: str, rank: int) -> list[str]:
    f = root / "distractors" / f"{source}.work" / f"manifest_rank{rank}.jsonl"
    return [json.loads(line)["id"] for line in f.read_text().splitlines() if line.strip()]


def _records(stdout: str) -> dict[int, dict]:
    """The JSON summaries a command printed, by rank (each rank's completion record)."""
    return {s["rank"]: s for s in (json.loads(x) for x in stdout.splitlines() if x.startswith("{"))}


def test_generation_two_processes_equals_one(smoke_world, tmp_path, capsys):
    src = smoke_world.root
    roots = {k: Path(shutil.copytree(src, tmp_path / k)) for k in ("one", "two")}
    cmd = ["--profile", "smoke", "--source", "mp", "--backend", "procedural", "--no-progress"]
    _one_process(runner.main, [*cmd, "--root", str(roots["one"])], capsys)
    out = _launch("nearid_lib.generate.runner", [*cmd, "--root", str(roots["two"])])
    # no rank waits for another: rank 0 reports its own part, and the table is a separate pass
    assert list(_records(out)) == [0] and "--merge-only" in out
    assert not (roots["two"] / "distractors" / "mp.csv").exists()
    out = _one_process(runner.main, [*cmd, "--root", str(roots["two"]), "--merge-only"], capsys)
    # the merge pass reports both ranks' completion records
    assert [(s["rank"], s["world_size"]) for s in _records(out).values()] == [(0, 2), (1, 2)]
    one, two = _outputs(roots["one"], "mp"), _outputs(roots["two"], "mp")
    items = items_from_dataset(roots["two"])
    assert len(one) == len(items) + 2 and one.keys() == two.keys()
    assert all(one[k] == two[k] for k in one)
    # each process wrote the block split_between_processes gave it (= shard_items)
    for r in (0, 1):
        assert _manifest_ids(roots["two"], "mp", r) == [it.item_id for it in shard_items(items, r, 2)]

    # a run cut short on rank 1 (10 items recorded, the 11th line torn by the kill) resumes per
    # shard: rank 1 redoes only its missing items and the result is byte-identical again
    wd = roots["two"] / "distractors" / "mp.work"
    lines = (wd / "manifest_rank1.jsonl").read_text().splitlines()
    (wd / "manifest_rank1.jsonl").write_text("\n".join(lines[:10]) + "\n" + lines[10][:25])
    for line in lines[10:]:
        (roots["two"] / json.loads(line)["path"]).unlink()
    (roots["two"] / "distractors" / "mp.csv").unlink()
    _launch("nearid_lib.generate.runner", [*cmd, "--root", str(roots["two"])])
    summ = _records(_one_process(runner.main, [*cmd, "--root", str(roots["two"]), "--merge-only"], capsys))
    assert summ[0]["n_new_ok"] == 0 and summ[1]["n_new_ok"] == len(lines) - 10
    assert _outputs(roots["two"], "mp") == one


def test_judge_two_processes_equals_one(smoke_world, tmp_path, capsys):
    pos = pd.read_csv(smoke_world.root / "positives.csv", dtype=str, keep_default_na=False)
    rows = []
    for r in pos.head(3).itertuples():
        rows += [{"img_a": r.img1, "img_b": r.img2}, {"img_a": r.img2, "img_b": r.img1}]
    pd.DataFrame(rows[:5]).to_csv(tmp_path / "pairs.csv", index=False)
    cmd = ["--pairs", str(tmp_path / "pairs.csv"), "--root",
           str(smoke_world.root), "--judge", "tiny", "--max-new-tokens", "8", "--batch-size", "2"]
    _one_process(judge_main, [*cmd, "--out", str(tmp_path / "one.csv")], capsys)
    _launch("nearid_lib.judge", [*cmd, "--out", str(tmp_path / "two.csv")])
    one = pd.read_csv(tmp_path / "one.csv", keep_default_na=False)
    two = pd.read_csv(tmp_path / "two.csv", keep_default_na=False)
    assert len(two) == 5 and list(two.columns[-4:]) == ["similarity", "status", "answer", "hit_limit"]
    pd.testing.assert_frame_equal(one, two)      # answers, statuses, scores and budget flags
    # whole batches of 2 were dealt: rank 0 judged pairs 0-3, rank 1 pair 4
    ans = tmp_path / "two.csv.answers"
    n = {r: len((ans / f"answers_rank{r}.jsonl").read_text().splitlines()) for r in (0, 1)}
    assert n == {0: 4, 1: 1}
    # the same command again judges nothing (every answer is on disk) and writes the same table
    (tmp_path / "two.csv").unlink()
    _launch("nearid_lib.judge", [*cmd, "--out", str(tmp_path / "two.csv")])
    assert {r: len((ans / f"answers_rank{r}.jsonl").read_text().splitlines()) for r in (0, 1)} == n
    pd.testing.assert_frame_equal(one, pd.read_csv(tmp_path / "two.csv", keep_default_na=False))


def test_exit_entry_flushes_and_skips_teardown_only_inside_a_launch(tmp_path):
    """``launch.exit_entry``: the entry point's return code, its printed output kept, and inside a
    launch (WORLD_SIZE > 1) no interpreter teardown (an ``atexit`` handler does not run)."""
    script = tmp_path / "entry.py"
    script.write_text("import atexit\nfrom nearid_lib.runtime.launch import exit_entry\n"
                      "atexit.register(lambda: print('teardown ran'))\n"
                      "def main():\n    print('work done', end='')\n    return 3\n"
                      "exit_entry(main)\n")
    for world, teardown in (("2", False), ("1", True)):
        res = subprocess.run([sys.executable, str(script)], env={**ENV, "WORLD_SIZE": world}, capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 3 and res.stdout.startswith("work done")
        assert ("teardown ran" in res.stdout) == teardown
