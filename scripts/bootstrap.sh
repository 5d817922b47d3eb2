#!/usr/bin/env bash
# Create or reuse the virtual environment, install the pinned dependencies and, only where
# `import torchvision` fails against the CPU torch, install the import fix as a .pth hook.
# Usage: scripts/bootstrap.sh VENV_DIR
set -euo pipefail
VENV="${1:-.venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[bootstrap] creating virtual environment in $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
# The exact CPU torch/torchvision pins live in scripts/constraints.txt (pyproject.toml has lower
# bounds only); every pip call below gets them, so nothing can resolve to a CUDA build.
CONSTRAINTS="$(dirname "$0")/constraints.txt"
"$PY" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
# TORCH=cu128 (or another wheel index name) installs that build of the same pinned versions;
# unset: cu128 when nvidia-smi lists a GPU, else the registry's default (CPU) build.
TORCH="${TORCH:-}"
if [ -z "$TORCH" ] && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  TORCH=cu128
  echo "[bootstrap] nvidia-smi lists a GPU: installing the CUDA build (TORCH=cu128; TORCH=cpu to refuse)"
fi
if [ -n "$TORCH" ] && [ "$TORCH" != "default" ]; then
  echo "[bootstrap] installing torch and torchvision pinned by $CONSTRAINTS from the $TORCH wheel index"
  "$PY" -m pip install --quiet --force-reinstall --no-deps -c "$CONSTRAINTS" torch torchvision \
    --index-url "https://download.pytorch.org/whl/$TORCH"
  "$PY" -m pip install --quiet -c "$CONSTRAINTS" torch torchvision \
    --index-url "https://download.pytorch.org/whl/$TORCH" --extra-index-url https://pypi.org/simple
else
  echo "[bootstrap] installing torch and torchvision pinned by $CONSTRAINTS"
  "$PY" -m pip install --quiet -c "$CONSTRAINTS" torch torchvision
fi
echo "[bootstrap] installing nearid_lib[paper,dev] (editable)"
"$PY" -m pip install --quiet -c "$CONSTRAINTS" -e ".[paper,dev]"
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# Test the plain import with any hook from an earlier run removed first: with the hook in place the
# import always works, and a re-run (e.g. after pyproject.toml changed) would wrongly drop it.
rm -f "$SITE/nearid_torchvision_cpu_fix.pth" "$SITE/_nearid_torchvision_cpu_fix.py"
if "$PY" -c "import torchvision" >/dev/null 2>&1; then
  echo "[bootstrap] torchvision imports as is; no fix needed"
else
  echo "[bootstrap] torchvision fails to import against CPU torch; installing the schema hook"
  cp scripts/torchvision_cpu_fix.py "$SITE/_nearid_torchvision_cpu_fix.py"
  echo "import _nearid_torchvision_cpu_fix" > "$SITE/nearid_torchvision_cpu_fix.pth"
  "$PY" -c "import torchvision, timm, open_clip; print('[bootstrap] torchvision', torchvision.__version__, 'imports with the fix')"
fi
"$PY" -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (nearid)" >/dev/null
# JupyterLab (make lab): open the jupytext percent notebooks as notebooks on a double click. The
# setting goes into this venv's JupyterLab (its app settings), never into the user's home.
LAB_SETTINGS="$("$PY" -c 'import sys; print(sys.prefix)')/share/jupyter/lab/settings"
mkdir -p "$LAB_SETTINGS"
cp "$(dirname "$0")/jupyterlab_overrides.json" "$LAB_SETTINGS/overrides.json"
echo "[bootstrap] done"
