"""Portable numerics (``nearid_lib.runtime``, ``NEARID_PORTABLE``): the switch, what it sets and
when, where a process escaped it, what a run records, and the committed digests.

The digests (``tests/portable_digests.json``, made by ``tests/_portable_digests.py``) are recomputed
in a process of their own under the setting: a frozen EfficientNet-Lite0 forward, the smoke world,
its tokens, a 30-step head training and a claim's bootstrap. On any x86-64 machine with AVX2 and FMA
they must equal the committed ones bit for bit; a difference names the stage that moved (see
docs/mini.md "Portable numerics" for which operations are pinned and which could still vary)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from nearid_lib import runtime as R
from nearid_lib.config import ConfigValueError, get_profile, runtime_env

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "tests" / "portable_digests.json"
PINNABLE = R.cpu_facts()["pinnable"]
PINNED = dict(R.PINNED_PATHS)


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without any variable portable numerics set (a fresh process decides)."""
    drop = {*PINNED, *R.THREAD_VARS, R.PORTABLE_VAR, "NEARID_THREADS"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PYTHONPATH=str(ROOT), NEARID_ROOT=str(ROOT), **extra)
    return env


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=_clean_env(**env), capture_output=True, text=True,
                          timeout=300)


def test_the_switch_reads_one_or_zero_and_else_asks_whether_a_gpu_computes():
    assert R.portable_requested({"NEARID_PORTABLE": "1"})[0] is True
    assert R.portable_requested({"NEARID_PORTABLE": " 0 "})[0] is False
    for bad in ("yes", "2", "off"):
        with pytest.raises(ValueError, match="NEARID_PORTABLE"):
            R.portable_requested({"NEARID_PORTABLE": bad})
    # unset: on unless a GPU is visible; CUDA_VISIBLE_DEVICES="" hides every GPU
    assert R.portable_requested({"CUDA_VISIBLE_DEVICES": ""}) == (True, "NEARID_PORTABLE unset, no GPU visible (the default)")
    assert R.portable_requested({})[0] is (not R._gpu_visible({}))


def test_the_environment_it_sets_and_the_choices_it_refuses():
    on = R.portable_environment({"NEARID_PORTABLE": "1"})
    assert {v: on[v] for v in R.THREAD_VARS} == {v: "1" for v in R.THREAD_VARS}
    if PINNABLE:
        assert {v: on[v] for v in PINNED} == {**PINNED, "NPY_DISABLE_CPU_FEATURES": R._numpy_features()}
        assert on["MKL_CBWR"] == "COMPATIBLE,STRICT" and on["ATEN_CPU_CAPABILITY"] == "avx2"
    assert R.portable_environment({"NEARID_PORTABLE": "0", "MKL_CBWR": "AVX512"}) == {}
    # a code path chosen by hand is not overridden silently; a thread pool's default is
    if PINNABLE:
        with pytest.raises(ValueError, match="MKL_CBWR='AVX2'.*NEARID_PORTABLE=0"):
            R.portable_environment({"NEARID_PORTABLE": "1", "MKL_CBWR": "AVX2"})
    assert R.portable_environment({"NEARID_PORTABLE": "1", "OMP_NUM_THREADS": "16"})["OMP_NUM_THREADS"] == "1"
    env = {"NEARID_PORTABLE": "1", "OMP_NUM_THREADS": "16"}
    assert R.apply_portable(env)["on"] and env["OMP_NUM_THREADS"] == "1"
    env = {}
    R.apply_portable(env)                  # the decision is written back for every worker to inherit
    assert env["NEARID_PORTABLE"] == ("0" if R._gpu_visible({}) else "1")


def test_the_shell_exports_set_what_the_library_sets():
    out = subprocess.run(["bash", "-c", 'eval "$(python -c "from nearid_lib.runtime import shell_exports; '
                          'print(shell_exports())")"; echo "$NEARID_PORTABLE|$MKL_CBWR|$OMP_NUM_THREADS|'
                          '$NPY_DISABLE_CPU_FEATURES"'], env=_clean_env(NEARID_PORTABLE="1", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}"),
                         capture_output=True, text=True, check=True).stdout.strip()
    want = "|".join(["1", PINNED["MKL_CBWR"] if PINNABLE else "", "1", R._numpy_features() if PINNABLE else ""])
    assert out == want


def test_threads_are_the_settings_under_portable_numerics_and_the_environments_without():
    assert runtime_env({"NEARID_PORTABLE": "1", "OMP_NUM_THREADS": "8"}) == {"runtime.threads": 1}
    assert runtime_env({"NEARID_PORTABLE": "1", "NEARID_THREADS": "1", "NEARID_WORKERS": "2"}) == {
        "runtime.workers": 2, "runtime.threads": 1}
    with pytest.raises(ConfigValueError, match="NEARID_THREADS='4'.*NEARID_PORTABLE=0"):
        runtime_env({"NEARID_PORTABLE": "1", "NEARID_THREADS": "4"})
    assert runtime_env({"NEARID_PORTABLE": "0", "OMP_NUM_THREADS": "8"}) == {"runtime.threads": 8}
    assert runtime_env({"NEARID_PORTABLE": "0"}) == {}


def test_set_torch_threads_runs_one_thread_and_warns_of_another(monkeypatch):
    import torch

    before = torch.get_num_threads()
    monkeypatch.setenv("NEARID_PORTABLE", "1")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert R.set_torch_threads(None) == 1 and torch.get_num_threads() == 1
        with pytest.warns(RuntimeWarning, match="torch runs 2 threads"):
            R.set_torch_threads(2)
        monkeypatch.setenv("NEARID_PORTABLE", "0")
        assert R.set_torch_threads(None) == R.thread_count(None)
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(not PINNABLE, reason="no x86-64 CPU with AVX2 and FMA: nothing is pinned here")
def test_the_library_import_sets_the_variables_before_numpy_and_torch_read_them():
    """A fresh process: ``import nearid_lib`` comes before numpy loads, and every library then runs
    its pinned path on one thread (OpenBLAS's core type and pool, torch's capability and threads)."""
    code = ("import sys, nearid_lib, json; from nearid_lib import runtime as R; import torch, numpy; "
            "torch.ones(4).softmax(0); R.set_torch_threads(None); "
            "print(json.dumps(R.numerics_record()))")
    res = _python(code, NEARID_PORTABLE="1")
    assert res.returncode == 0, res.stderr[-3000:]
    rec = json.loads(res.stdout.strip().splitlines()[-1])
    assert rec["setting"] == "portable" and rec["escapes"] == []
    assert rec["torch"] == {"threads": 1, "cpu_capability": "AVX2"}
    assert rec["openblas"] and all(p["architecture"] == "Haswell" and p["threads"] == 1 for p in rec["openblas"])
    assert rec["env"]["MKL_CBWR"] == "COMPATIBLE,STRICT"


@pytest.mark.skipif(not PINNABLE, reason="no x86-64 CPU with AVX2 and FMA: nothing is pinned here")
def test_a_library_loaded_before_the_setting_is_an_escape_on_record():
    """numpy and torch started under other code paths (as in a kernel that imported them before
    nearid_lib, its variables unset): :func:`check_portable` names both, ``set_torch_threads`` warns."""
    code = ("import os, numpy, torch; torch.ones(4).softmax(0); "
            "[os.environ.pop(v) for v in ('OPENBLAS_CORETYPE', 'ATEN_CPU_CAPABILITY')]; "
            "import warnings, nearid_lib; from nearid_lib import runtime as R; "
            "warnings.simplefilter('error'); R.set_torch_threads(None)")
    res = _python(code, NEARID_PORTABLE="1", OPENBLAS_CORETYPE="Sandybridge", ATEN_CPU_CAPABILITY="default")
    assert res.returncode != 0
    assert "torch dispatches DEFAULT kernels" in res.stderr
    res = _python(code.replace("R.set_torch_threads(None)", "print(R.check_portable())"), NEARID_PORTABLE="1",
                  OPENBLAS_CORETYPE="Sandybridge", ATEN_CPU_CAPABILITY="default")
    assert "runs Sandybridge kernels" in res.stdout and "torch dispatches DEFAULT" in res.stdout, res.stderr[-2000:]


def test_a_run_records_its_numerics(monkeypatch, tmp_path):
    """``run.json`` holds the setting, the variables, the CPU and the escapes; a table's sidecar
    says which setting made it."""
    import torch

    from nearid_lib import run as RUN

    monkeypatch.setenv("NEARID_OUT", str(tmp_path / "out"))
    monkeypatch.setenv("NEARID_FIGURES", str(tmp_path / "figs"))
    monkeypatch.setenv("NEARID_PORTABLE", "1")
    before = torch.get_num_threads()
    try:
        run = RUN.start_run("smoke", 0, "04_x", overrides={"eval.vlm_judge": None})
    finally:
        torch.set_num_threads(before)
    meta = json.loads((tmp_path / "out" / "smoke" / "results" / "04_x" / "run.json").read_text())
    num = meta["numerics"]
    assert num["setting"] == "portable" and num["torch"]["threads"] == 1 and num["escapes"] == []
    assert set(num["env"]) == {*PINNED, *R.THREAD_VARS} and "flags" in num["cpu"]
    assert run.cfg.runtime.threads == 1
    import pandas as pd

    path = run.write_table(pd.DataFrame({"v": [1]}), "04_t")
    assert RUN.read_table_meta(path)["numerics"] == "portable"


def test_the_makefile_refuses_threads_the_setting_does_not_run():
    make = ["make", "-s", "--no-print-directory", "help", "VENV=/nonexistent"]
    env = _clean_env(NEARID_PORTABLE="1", NEARID_THREADS="4")
    res = subprocess.run(make, cwd=ROOT, env=env, capture_output=True, text=True)
    assert res.returncode != 0 and "NEARID_THREADS=4: portable numerics run one thread" in res.stderr
    env = _clean_env(NEARID_PORTABLE="0", NEARID_THREADS="4")
    assert subprocess.run(make, cwd=ROOT, env=env, capture_output=True, text=True).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not PINNABLE, reason="portable numerics pin x86-64 CPUs with AVX2 and FMA; this one is "
                                         f"{R.cpu_facts()['machine']} with {R.cpu_facts()['flags']}")
def test_the_committed_digests_come_out_bit_for_bit():
    """Recomputes every digest of ``tests/_portable_digests.py`` in a fresh process under
    ``NEARID_PORTABLE=1`` and compares them with the committed ones. Package versions are compared
    first: other versions compute other bits, and the digests (and the committed figures) are
    then regenerated, not tolerated."""
    committed = json.loads(COMMITTED.read_text())
    res = subprocess.run([sys.executable, str(ROOT / "tests" / "_portable_digests.py")],
                         env=_clean_env(NEARID_PORTABLE="1", HF_HUB_OFFLINE="1", NEARID_WORKERS="1"),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    got = json.loads(res.stdout)
    assert got["escapes"] == [], got["escapes"]
    made = committed["made_on"]
    versions = {p: (made["packages"].get(p), v) for p, v in got["machine"]["packages"].items()
                if made["packages"].get(p) != v}
    assert not versions, (f"the digests were made with other package versions {versions} (committed, here): "
                          f"regenerate them (`NEARID_PORTABLE=1 python tests/_portable_digests.py --write`) "
                          f"and the committed figures")
    differ = [k for k in committed["digests"] if got["digests"].get(k) != committed["digests"][k]]
    here = got["machine"]
    assert not differ, (
        f"digests that differ from the committed ones: {differ} (stages in order: lite0_forward, world, "
        f"world_tokens, head_training, claim_bootstrap; the first that differs names the operation). "
        f"Committed on {made['cpu']['model']} {made['cpu']['flags']}, torch capability "
        f"{made['torch_cpu_capability']}, OpenBLAS {made['openblas']}; here {here['cpu']['model']} "
        f"{here['cpu']['flags']}, {here['torch_cpu_capability']}, {here['openblas']}")
