#!/usr/bin/env bash
# Create or reuse the virtual environment, install the pinned dependencies and, only where
# `import torchvision` fails against the CPU torch, install the import fix as a .pth hook.
# Usage: scripts/bootstrap.sh VENV_DIR
# WHEELHOUSE=<dir>: every pip call reads that folder only (pip --no-index --find-links), as filled by
# scripts/wheelhouse.sh (make wheelhouse) on a machine with network: a node without internet.
set -euo pipefail
VENV="${1:-.venv}"
PYTHON="${PYTHON:-python3}"
HERE="$(dirname "$0")"
# scripts/requirements.lock (make lock): every package of the tested environment with == pins and
# sha256 hashes, for one CPython minor version on Linux x86_64 (its "# target:" line).
# NEARID_LOCK unset: the lock where the target matches, else the unlocked install (one line says
# so); NEARID_LOCK=0: always unlocked; NEARID_LOCK=1: a target mismatch is an error.
# shellcheck source=scripts/lock_entries.sh
. "$HERE/lock_entries.sh"
NEARID_LOCK="${NEARID_LOCK:-}"
if [ -n "$WHEELHOUSE" ]; then
  [ -d "$WHEELHOUSE" ] || { echo "[bootstrap] error: WHEELHOUSE=$WHEELHOUSE does not exist (make wheelhouse fills it on a machine with network)" >&2; exit 1; }
  BUILT="$(sed -n 's/^torch: //p' "$WHEELHOUSE/wheelhouse.txt" 2>/dev/null || true)"
  if [ -n "$BUILT" ] && [ -n "${TORCH:-}" ] && [ "$BUILT" != "$TORCH" ]; then
    echo "[bootstrap] error: $WHEELHOUSE holds the torch build '$BUILT', TORCH=${TORCH:-cpu}; pass TORCH=$BUILT or rebuild it (make wheelhouse TORCH=...)" >&2
    exit 1
  fi
  TORCH="${TORCH:-$BUILT}"            # the build the wheelhouse holds (no nvidia-smi guess)
  echo "[bootstrap] WHEELHOUSE=$WHEELHOUSE: installing offline (pip --no-index --find-links), torch build ${TORCH:-cpu}"
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "[bootstrap] creating virtual environment in $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
# The exact CPU torch/torchvision pins live in scripts/constraints.txt (pyproject.toml has lower
# bounds only); every unlocked pip call below gets them, so nothing can resolve to a CUDA build.
CONSTRAINTS="$HERE/constraints.txt"
# TORCH=cu128 (or another wheel index name) installs that build of the same pinned versions;
# unset: cu128 when nvidia-smi lists a GPU, else the CPU build (TORCH=cpu or default: the same).
TORCH="${TORCH:-}"
if [ -z "$TORCH" ] && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  TORCH=cu128
  echo "[bootstrap] nvidia-smi lists a GPU: installing the CUDA build (TORCH=cu128; TORCH=cpu to refuse)"
fi
case "$TORCH" in ""|cpu|default) CUDA="" ;; *) CUDA="$TORCH" ;; esac

USE_LOCK=1
if [ "$NEARID_LOCK" = 0 ]; then
  USE_LOCK=0
  echo "[bootstrap] NEARID_LOCK=0: unlocked install (pyproject.toml + $CONSTRAINTS)"
else
  WANT="$(lock_target)"
  HAVE="$(python_target "$PY")"
  if [ "$WANT" != "$HAVE" ]; then
    if [ "$NEARID_LOCK" = 1 ]; then
      V="${WANT%%-*}"; V="${V#cp}"
      echo "[bootstrap] error: $LOCK is for $WANT, $PY is $HAVE; recreate $VENV with that Python (rm -rf $VENV && make install PYTHON=python${V:0:1}.${V:1}) or use NEARID_LOCK=0" >&2
      exit 1
    fi
    USE_LOCK=0
    echo "[bootstrap] $LOCK is for $WANT, this venv is $HAVE: unlocked install (pyproject.toml + $CONSTRAINTS) instead"
  fi
fi

if [ "$USE_LOCK" = 1 ]; then
  if [ -z "$CUDA" ]; then
    echo "[bootstrap] installing $LOCK (hash-checked; torch's +cpu build from https://download.pytorch.org/whl/cpu)"
  else
    # The lock holds the CPU wheels' hashes: torch/torchvision come unhashed from the $CUDA index at
    # the constraints.txt versions (with their CUDA dependencies), every other package from the lock.
    echo "[bootstrap] TORCH=$CUDA: torch/torchvision pinned by $CONSTRAINTS from the $CUDA wheel index (no hashes), every other package from $LOCK (hash-checked)"
  fi
  bash "$HERE/install_lock.sh" "$PY" "$CUDA"
  src
  echo "[bootstrap] installing nearid_lib (editable, --no-deps: its dependencies come from the lock)"
  "$PY" -m pip install --quiet --no-deps --no-build-isolation --check-build-dependencies "${SRC[@]}" -e .
else
  [ -n "$WHEELHOUSE" ] || "$PY" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  if [ -n "$CUDA" ]; then
    echo "[bootstrap] installing torch and torchvision pinned by $CONSTRAINTS from the $CUDA wheel index"
    src --index-url "https://download.pytorch.org/whl/$CUDA"
    "$PY" -m pip install --quiet --force-reinstall --no-deps -c "$CONSTRAINTS" "${SRC[@]}" torch torchvision
    src --index-url "https://download.pytorch.org/whl/$CUDA" --extra-index-url https://pypi.org/simple
    "$PY" -m pip install --quiet -c "$CONSTRAINTS" "${SRC[@]}" torch torchvision
  else
    echo "[bootstrap] installing torch and torchvision pinned by $CONSTRAINTS"
    src
    "$PY" -m pip install --quiet -c "$CONSTRAINTS" "${SRC[@]}" torch torchvision
  fi
  echo "[bootstrap] installing nearid_lib[paper,dev] (editable)"
  src
  "$PY" -m pip install --quiet -c "$CONSTRAINTS" "${SRC[@]}" -e ".[paper,dev]"
fi
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# Test the plain import with any hook from an earlier run removed first: with the hook in place the
# import always works, and a re-run (e.g. after pyproject.toml changed) would wrongly drop it.
rm -f "$SITE/nearid_torchvision_cpu_fix.pth" "$SITE/_nearid_torchvision_cpu_fix.py"
if "$PY" -c "import torchvision" >/dev/null 2>&1; then
  echo "[bootstrap] torchvision imports as is; no fix needed"
else
  # expected with the CPU build of torch (the registry's torchvision is built for CUDA torch): say what
  # is done, so the line does not read like a failed install
  echo "[bootstrap] CPU torch with the registry's torchvision (a CUDA build): defining its two operator schemas (nms, qnms) in a small import hook, as expected on CPU (scripts/torchvision_cpu_fix.py; no action needed)"
  cp scripts/torchvision_cpu_fix.py "$SITE/_nearid_torchvision_cpu_fix.py"
  echo "import _nearid_torchvision_cpu_fix" > "$SITE/nearid_torchvision_cpu_fix.pth"
  "$PY" -c "import torchvision, timm, open_clip; print('[bootstrap] torchvision', torchvision.__version__, 'with the hook: torchvision, timm and open_clip import')"
fi
"$PY" -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (nearid)" >/dev/null
# JupyterLab (make lab): open the jupytext percent notebooks as notebooks on a double click. The
# setting goes into this venv's JupyterLab (its app settings), never into the user's home.
LAB_SETTINGS="$("$PY" -c 'import sys; print(sys.prefix)')/share/jupyter/lab/settings"
mkdir -p "$LAB_SETTINGS"
cp "$(dirname "$0")/jupyterlab_overrides.json" "$LAB_SETTINGS/overrides.json"
echo "[bootstrap] done"
