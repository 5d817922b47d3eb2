"""``scripts/run_notebook.sh`` (every ``make`` notebook target runs it): a notebook that runs is moved into
place with its log beside it; one that fails leaves its executed copy under a temporary name, says
where, and exits non-zero, so ``make`` never takes it for finished; the kernel starts with portable
numerics' pinned variables (``scripts/execute_notebook.py`` sets them before the kernel starts)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.executable).parent.parent

GOOD = """# %% tags=["parameters"]
PROFILE = "mini"
SEED = 0

# %%
import os
from tqdm.auto import tqdm
for _ in tqdm(range(3), desc="work"):
    pass
print("env", os.environ.get("NEARID_PORTABLE"), os.environ.get("OMP_NUM_THREADS"), PROFILE, SEED)
"""
BAD = GOOD + """
# %%
raise RuntimeError("cell three fails")
"""


def _run(tmp_path: Path, name: str, text: str) -> tuple[subprocess.CompletedProcess, Path]:
    src = tmp_path / f"{name}.py"
    src.write_text(text)
    out = tmp_path / "nb" / f"{name}.ipynb"
    env = {**os.environ, "NEARID_PORTABLE": "1"}
    env.pop("OMP_NUM_THREADS", None)
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "run_notebook.sh"), str(VENV), str(src), str(out),
                           "smoke", "3"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return proc, out


def test_a_notebook_that_runs_is_moved_into_place_with_portable_numerics(tmp_path):
    proc, out = _run(tmp_path, "good", GOOD)
    assert proc.returncode == 0, proc.stderr
    assert "[notebook] good done in" in proc.stdout
    assert out.exists() and out.with_suffix(".log").exists()
    assert not list(out.parent.glob(".good.*"))               # no partial copy, no converted source left
    nb = json.loads(out.read_text())
    printed = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
    assert "env 1 1 smoke 3" in printed                      # portable numerics: one thread; the parameters
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    assert "Ending Cell" in out.with_suffix(".log").read_text()   # papermill's --log-output


def test_a_failing_notebook_keeps_its_executed_copy_and_exits_non_zero(tmp_path):
    proc, out = _run(tmp_path, "bad", BAD)
    assert proc.returncode != 0
    partial = out.parent / ".bad.partial.ipynb"
    assert not out.exists() and partial.exists()
    assert "FAILED after" in proc.stderr and str(partial) in proc.stderr
    assert "cell three fails" in proc.stderr                 # the log's tail names the error
