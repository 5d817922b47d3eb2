"""Generation and the VLM judge over 2 CPU processes (``torchrun --standalone``, gloo) give what one
process gives: the same distractor files byte for byte, the same judge answers and scores; each
process writes its own manifest / answers file, and a run cut short resumes per shard."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from nearid_lib.generate.items import items_from_dataset, shard_items

TORCHRUN = Path(sys.executable).with_name("torchrun")
ENV = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", NEARID_THREADS="1",
           GLOO_SOCKET_IFNAME="lo")   # loopback only: gloo pairs on one host (flaky without it)


def _run(cmd: list[str], two: bool, timeout: int = 300) -> subprocess.CompletedProcess:
    launch = [str(TORCHRUN), "--standalone", "--nproc_per_node", "2"] if two else [sys.executable]
    res = subprocess.run([*launch, *cmd], env=ENV, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        pytest.fail(f"{' '.join(launch + cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}")
    return res


def _outputs(root: Path, source: str) -> dict[str, bytes]:
    d = root / "distractors"
    out = {p.name: p.read_bytes() for p in (d / source).glob("*.png")}
    out["table"] = (d / f"{source}.csv").read_bytes()
    out["quality"] = (d / f"{source}.work" / "quality_report.csv").read_bytes()
    return out


def _manifest_ids(root: Path, source: str, rank: int) -> list[str]:
    f = root / "distractors" / f"{source}.work" / f"manifest_rank{rank}.jsonl"
    return [json.loads(line)["id"] for line in f.read_text().splitlines() if line.strip()]


def _records(res: subprocess.CompletedProcess) -> dict[int, dict]:
    """The JSON summaries a command printed, by rank (each rank's completion record)."""
    return {s["rank"]: s for s in (json.loads(x) for x in res.stdout.splitlines() if x.startswith("{"))}


def test_generation_two_processes_equals_one(smoke_world, tmp_path):
    src = smoke_world.root
    roots = {k: Path(shutil.copytree(src, tmp_path / k)) for k in ("one", "two")}
    cmd = ["-m", "nearid_lib.generate.runner", "--profile", "smoke", "--source", "mp",
           "--backend", "procedural", "--no-progress"]
    _run([*cmd, "--root", str(roots["one"])], two=False)
    res = _run([*cmd, "--root", str(roots["two"])], two=True)
    # no rank waits for another: rank 0 reports its own part, and the table is a separate pass
    assert list(_records(res)) == [0] and "--merge-only" in res.stdout
    assert not (roots["two"] / "distractors" / "mp.csv").exists()
    res = _run([*cmd, "--root", str(roots["two"]), "--merge-only"], two=False)
    # the merge pass reports both ranks' completion records
    assert [(s["rank"], s["world_size"]) for s in _records(res).values()] == [(0, 2), (1, 2)]
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
    _run([*cmd, "--root", str(roots["two"])], two=True)
    summ = _records(_run([*cmd, "--root", str(roots["two"]), "--merge-only"], two=False))
    assert summ[0]["n_new_ok"] == 0 and summ[1]["n_new_ok"] == len(lines) - 10
    assert _outputs(roots["two"], "mp") == one


def test_judge_two_processes_equals_one(smoke_world, tmp_path):
    pos = pd.read_csv(smoke_world.root / "positives.csv", dtype=str, keep_default_na=False)
    rows = []
    for r in pos.head(3).itertuples():
        rows += [{"img_a": r.img1, "img_b": r.img2}, {"img_a": r.img2, "img_b": r.img1}]
    pd.DataFrame(rows[:5]).to_csv(tmp_path / "pairs.csv", index=False)
    cmd = ["-m", "nearid_lib.judge", "--pairs", str(tmp_path / "pairs.csv"), "--root",
           str(smoke_world.root), "--judge", "tiny", "--max-new-tokens", "8", "--batch-size", "2"]
    _run([*cmd, "--out", str(tmp_path / "one.csv")], two=False)
    _run([*cmd, "--out", str(tmp_path / "two.csv")], two=True)
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
    _run([*cmd, "--out", str(tmp_path / "two.csv")], two=True)
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
