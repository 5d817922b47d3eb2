"""The Makefile a person plans a run with (issue 57, items 2 and 3): a notebook reruns when its
source's content changes, not its date (JupyterLab rewrites the .py on every save); FPR's
generation is a step over every GPU before notebook 11 in PROFILE=paper, as the judge is before 04;
the GPU count is what the job may use (CUDA_VISIBLE_DEVICES first, then nvidia-smi)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


# what a make that runs pytest (make test) passes down: its flags, command-line variables and jobserver
_MAKE_ENV = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "CUDA_VISIBLE_DEVICES", "N_GPUS")


def _make(args: list[str], cwd: Path = ROOT, env: dict | None = None) -> str:
    # -o: the venv's install stamp counts as old, so no rule reinstalls the shared venv
    base = {k: v for k, v in os.environ.items() if k not in _MAKE_ENV}
    res = subprocess.run(["make", "--no-print-directory", f"VENV={VENV}", "-o", str(VENV / ".nearid-installed"),
                          *args], cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.fixture
def checkout(tmp_path):
    """The repository's Makefile with one notebook and a runner that only records that it ran (the
    test is about make's staleness, not about executing a notebook)."""
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / "notebooks" / "00_environment.py", tmp_path / "notebooks")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "run_notebook.sh").write_text('echo ran >> ran.log; touch "$3"\n')
    return tmp_path


def _runs(where: Path) -> int:
    log = where / "ran.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def _later(path: Path, seconds: float) -> None:
    t = time.time() + seconds
    os.utime(path, (t, t))


def test_a_notebook_reruns_when_its_content_changes_not_its_date(checkout):
    src, target = checkout / "notebooks" / "00_environment.py", "out/00_environment.ipynb"
    _make([target, "NB_OUT=out"], checkout)
    assert _runs(checkout) == 1
    _make([target, "NB_OUT=out"], checkout)
    assert _runs(checkout) == 1                                  # up to date
    _later(src, 5)                                               # a JupyterLab save: same bytes, new date
    _make([target, "NB_OUT=out"], checkout)
    _make([target, "NB_OUT=out"], checkout)
    assert _runs(checkout) == 1
    src.write_text(src.read_text() + "\n# %%\nprint('a new cell')\n")
    _later(src, 10)
    _make([target, "NB_OUT=out"], checkout)
    assert _runs(checkout) == 2                                  # a changed cell reruns it


def test_a_first_stamp_does_not_make_an_older_executed_notebook_stale(checkout):
    """An executed notebook made before the content stamps existed (newer than its source) stays."""
    out = checkout / "out"
    out.mkdir()
    (out / "00_environment.ipynb").write_text("{}")
    _later(out / "00_environment.ipynb", 5)
    _make(["out/00_environment.ipynb", "NB_OUT=out"], checkout)
    assert _runs(checkout) == 0 and (out / ".src" / "00_environment.sha256").exists()
    _later(checkout / "notebooks" / "00_environment.py", 10)      # then a save that changes no cell
    _make(["out/00_environment.ipynb", "NB_OUT=out"], checkout)
    assert _runs(checkout) == 0


def test_fpr_generation_runs_over_every_gpu_before_notebook_11_in_paper(tmp_path):
    lines = _make(["-n", "notebooks", "PROFILE=paper", f"NB_OUT={tmp_path}"], env={"CUDA_VISIBLE_DEVICES": "0,1,2"})
    lines = lines.splitlines()
    gen = [i for i, ln in enumerate(lines) if "-m nearid_lib.steps run fpr-generate --profile paper" in ln]
    nb11 = [i for i, ln in enumerate(lines) if "run_notebook.sh" in ln and "11_retrieval_galleries" in ln]
    gal = [i for i, ln in enumerate(lines) if "-m nearid_lib.steps run fpr-galleries --profile paper" in ln]
    assert len(gen) == 1 and len(nb11) == 1 and gen[0] < nb11[0]
    # the galleries are built once, by their own step, before any step reads them
    assert len(gal) == 1 and gal[0] < gen[0]
    assert "torchrun --standalone --nproc_per_node 3" in lines[gen[0]]
    # smoke and mini generate nothing there: no step before their notebook 11
    assert "run fpr-generate" not in _make(["-n", "notebooks", "PROFILE=smoke", f"NB_OUT={tmp_path}"])


@pytest.mark.parametrize("visible, n", [("0,1", 2), ("3", 1), ("", 0), ("1,-1,2", 1),
                                        ("GPU-8a5e1c2d,GPU-77b0", 2)])
def test_the_gpu_count_is_what_the_job_may_use(tmp_path, visible, n):
    out = _make(["-n", "judge", "PROFILE=paper", f"NB_OUT={tmp_path}"], env={"CUDA_VISIBLE_DEVICES": visible})
    if n:
        assert f"torchrun --standalone --nproc_per_node {n} -m nearid_lib.steps run judge" in out
    else:       # no GPU the job may use: one plain process (the dry run's way)
        assert "torchrun" not in out and f"{VENV}/bin/python -m nearid_lib.steps run judge" in out


def test_n_gpus_on_the_command_line_wins(tmp_path):
    out = _make(["-n", "judge", "PROFILE=paper", f"NB_OUT={tmp_path}", "N_GPUS=4"], env={"CUDA_VISIBLE_DEVICES": "0"})
    assert "--nproc_per_node 4" in out
