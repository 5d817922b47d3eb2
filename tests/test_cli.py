"""The ``nearid`` command: every subcommand has --help and --profile, `score` and `rank` are thin
wrappers whose output equals the library's, bad input exits with status 2 and one line naming it,
and ``python -m nearid_lib`` is the same command."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nearid_lib.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh(fresh_clone, tmp_path, monkeypatch, smoke_world):
    """A fresh clone's folders in tmp, with the session's smoke world as data/smoke/nearid."""
    (tmp_path / "data" / "smoke").mkdir(parents=True)
    os.symlink(smoke_world.root, tmp_path / "data" / "smoke" / "nearid")
    monkeypatch.setenv("NEARID_THREADS", "1")
    return tmp_path


@pytest.mark.parametrize("command", ["score", "sim", "rank", "train", "report", "plan"])
def test_every_subcommand_has_help_and_profile(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: nearid {command}") and "--profile {smoke,mini,paper}" in out and "--set" in out


def test_python_dash_m_is_the_same_command():
    res = subprocess.run([sys.executable, "-m", "nearid_lib", "--help"], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert res.returncode == 0 and res.stdout.startswith("usage: nearid ")
    assert "{score,sim,rank,train,report,dbpp-mh,preflight}" in res.stdout


def test_score_a_callable_from_a_file(fresh, capsys):
    enc = fresh / "my_enc.py"
    enc.write_text("import numpy as np\n"
                   "def embed(images):\n"
                   "    return np.stack([np.histogram(np.asarray(im), bins=16, range=(0, 256))[0] + 1.0 "
                   "for im in images])\n")
    out_dir = fresh / "card"
    rc = main(["score", f"{enc}:embed", "--profile", "smoke", "--protocols", "nearid", "--no-baselines",
               "--name", "hist16", "--out", str(out_dir), "--set", "eval.fg_only=false",
               "--set", "eval.dbpp_standin=false"])
    assert rc == 0
    out = capsys.readouterr().out
    assert out.startswith("ScoreReport('hist16', profile='smoke')") and f"report card: {out_dir / 'report.md'}" in out
    table = pd.read_csv(out_dir / "tables" / "score_table.csv")
    mine = table[table.kind == "yours"]
    assert mine.row.tolist() == ["hist16"] and mine.nearid_ssr.between(0, 100).all()
    assert (table.kind == "frozen").sum() == 0          # --no-baselines


def test_rank_prints_and_writes_the_library_summary(fresh, smoke_world, capsys):
    from nearid_lib.fpr import rank_generator

    fpr = smoke_world.root / "fpr"
    gen = fresh / "gen.csv"
    gal = pd.read_csv(fpr / "gallery_data.csv")
    # a "generator" whose outputs are gallery images of the right identity (two per identity)
    g = gal.groupby("name", sort=False).head(2).assign(method="copy")
    for c in ("file_path", "ref_path", "mask_path"):
        g[c] = [str(smoke_world.root / p) for p in g[c]]
    g.to_csv(gen, index=False)
    rc = main(["rank", str(gen), str(fpr / "gallery_data.csv"), "--profile", "smoke", "--out", str(fresh / "s.csv"),
               "--batch-size", "3"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "copy" in out
    got = pd.read_csv(fresh / "s.csv")
    want = rank_generator(gen, fpr / "gallery_data.csv", "efficientnet-lite0", tiny=True, progress=False).summary
    assert got["map"].tolist() == pytest.approx(want["map"].tolist())     # --batch-size: memory, not results
    # the chance level, as `sim` prints its own: a random ranking of each query's gallery, by hand
    from nearid_lib.metrics import random_ranking_ap

    scope = gal.groupby("species").name
    chance = np.mean([random_ranking_ap(scope.size()[sp], int((gal[gal.species == sp].name == n).sum()))
                      for n, sp in zip(g.name, g.species)])
    assert got["map_chance"].tolist() == pytest.approx([chance], abs=1e-12)
    assert f"chance level: a random ranking of the same galleries scores mAP {chance:.4f};" in out
    assert (fresh / "s_per_query.csv").exists()


@pytest.mark.parametrize("argv, message", [
    (["score", "x", "--protocols", "nearidd", "--profile", "smoke"],
     "nearid score: error: protocols: unknown ['nearidd']; choose from nearid, idsim, fpr"),
    (["train", "--profile", "smoke", "--set", "train.batch_size=-5"],
     "nearid train: error: train.batch_size=-5: must be >= 1"),
    (["rank", "no/such/generated.csv", "no/such/gallery.csv", "--profile", "smoke"], "nearid rank: error: "),
])
def test_bad_input_exits_2_with_one_line(fresh, capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err


def test_set_without_equals_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["report", "--set", "train.lr"])
    assert exc.value.code == 2
    assert "--set needs KEY=VALUE, got 'train.lr'" in capsys.readouterr().err


def test_train_then_report_on_a_fresh_clone(fresh, capsys):
    # training goes to its configuration's run folder (notebook 03 reuses it); an unfinished run
    # (--stop-after) keeps its resume state there and publishes no head
    assert main(["train", "--profile", "smoke", "--stop-after", "1"]) == 0
    ck = fresh / "build" / "smoke" / "checkpoints" / "nearid"
    runs = list((fresh / "build" / "smoke" / "head_runs").iterdir())
    assert "trained 1 steps" in capsys.readouterr().out and len(runs) == 1 and (runs[0] / "resume").is_dir()
    assert not ck.exists()
    assert main(["train", "--profile", "smoke"]) == 0             # resumes and finishes
    assert "published the head" in capsys.readouterr().out
    assert (ck / "head.safetensors").exists() and not (ck / "resume").exists()
    assert main(["report", "--profile", "smoke"]) == 0
    text = (fresh / "figures" / "README.md").read_text()          # NEARID_FIGURES
    assert text.startswith("# Reproduced results") and "Profile: **smoke**" in text
    # the same profile line as notebook 99 writes (one function renders it for both)
    from nearid_lib.config import get_profile
    from nearid_lib.report import profile_note
    cfg = get_profile("smoke")
    assert profile_note(cfg.name, cfg.backbone.name, cfg.world.source) in text and "proves the path" in text
