#!/usr/bin/env bash
# Rebuild scripts/requirements.lock (`make lock`), the hash-checked lock that scripts/bootstrap.sh
# installs: the dependencies of `.[paper,dev]` (pyproject.toml) resolved by uv for the venv's
# CPython minor version on Linux x86_64, torch/torchvision at the scripts/constraints.txt versions
# (torch as the "+cpu" build of the PyTorch CPU index), every other package at the version VENV has
# installed (the tested environment: `pip freeze`), plus pip and the build backends of the sdist-only
# packages and of nearid_lib itself, each with the sha256 of every file of its pinned version.
#
# Usage: scripts/lock.sh [VENV]            (default .venv; make lock)
#   LOCK_UPGRADE=1     ignore VENV's versions: newest versions pyproject.toml allows (then run
#                      make install and make test before committing the new lock)
#   TORCH_FIND_LINKS   where uv finds the +cpu torch wheel and its hash (default: the CPU index page
#                      https://download.pytorch.org/whl/cpu/torch/; a local wheel folder also works)
#   UV                 the uv executable (default: uv on PATH, else uv==$UV_VERSION in a throwaway venv)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv}"
LOCK=scripts/requirements.lock
UV_VERSION=0.13.9
TORCH_FIND_LINKS="${TORCH_FIND_LINKS:-https://download.pytorch.org/whl/cpu/torch/}"
# pip itself and the build backends that bootstrap.sh's `pip install --no-build-isolation
# --check-build-dependencies` takes from the lock: the [build-system] requires of nearid_lib
# (setuptools>=77) and of the sdist-only packages geomloss (setuptools, wheel) and lazy-importer
# (flit-core>=3.12,<4).
TOOLS=(pip "setuptools>=77" wheel "flit-core>=3.12,<4")

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
if [ -n "${UV:-}" ]; then :
elif command -v uv >/dev/null 2>&1; then UV=uv
else
  echo "[lock] installing uv==$UV_VERSION into a throwaway venv"
  "${PYTHON:-python3}" -m venv "$TMP/uv" && "$TMP/uv/bin/pip" install --quiet "uv==$UV_VERSION"
  UV="$TMP/uv/bin/uv"
fi

if [ -x "$VENV/bin/python" ]; then PY="$VENV/bin/python"; else PY="${PYTHON:-python3}"; fi
PYVER="$("$PY" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
TARGET="$("$PY" -c 'import sys; print("cp%d%d-linux-x86_64" % sys.version_info[:2])')"

# constraints: torch/torchvision from constraints.txt (torch as +cpu), the rest from VENV's freeze
TORCH_V="$(sed -n 's/^torch==\([^[:space:]]*\).*/\1/p' scripts/constraints.txt)"
TV_V="$(sed -n 's/^torchvision==\([^[:space:]]*\).*/\1/p' scripts/constraints.txt)"
printf 'torch==%s+cpu\ntorchvision==%s\n' "${TORCH_V%%+*}" "$TV_V" > "$TMP/constraints.txt"
if [ "${LOCK_UPGRADE:-0}" != 1 ]; then
  if [ ! -x "$VENV/bin/python" ]; then
    echo "[lock] error: no venv at $VENV to take the tested versions from (make install first, or LOCK_UPGRADE=1)" >&2
    exit 1
  fi
  echo "[lock] pinning every package to the version installed in $VENV"
  "$PY" -m pip freeze --all | grep -v -i -E '^(-e |#|torch==|torchvision==|nearid[-_]lib)' \
    >> "$TMP/constraints.txt"
fi
printf '%s\n' "${TOOLS[@]}" > "$TMP/tools.in"

echo "[lock] resolving .[paper,dev] for CPython $PYVER on Linux x86_64 (torch from $TORCH_FIND_LINKS)"
"$UV" pip compile pyproject.toml "$TMP/tools.in" --extra paper --extra dev \
  -c "$TMP/constraints.txt" --generate-hashes \
  --python-version "$PYVER" --python-platform x86_64-manylinux_2_28 \
  --default-index https://pypi.org/simple --find-links "$TORCH_FIND_LINKS" \
  --no-header --quiet -o "$TMP/body.txt"

{
  cat <<EOF
# Hash-checked lock of the tested environment, installed by scripts/bootstrap.sh (make install).
# target: $TARGET (CPython ${PYVER%.*}, resolved for $PYVER; Linux x86_64, manylinux_2_28 wheels)
# Not a universal lock: on another Python or platform scripts/bootstrap.sh says so and falls back
# to the unlocked install (pyproject.toml + scripts/constraints.txt); NEARID_LOCK=0 forces that.
# Every entry: an exact == pin and the sha256 of every file of that version on PyPI; torch is the
# +cpu build of https://download.pytorch.org/whl/cpu (PyPI's Linux torch is the CUDA build).
# By hand (one line): pip install --require-hashes -r scripts/requirements.lock
#   --extra-index-url https://download.pytorch.org/whl/cpu; then pip install --no-deps -e .
# Regenerate: make lock (scripts/lock.sh: uv pip compile --generate-hashes, pinned to the versions
# installed in .venv); make lock LOCK_UPGRADE=1 takes the newest versions pyproject.toml allows.
EOF
  # drop the throwaway file names from uv's "# via" notes
  sed -e '/^    #   -c .*constraints\.txt$/d' \
      -e 's|-r [^ ]*tools\.in|build tools (scripts/lock.sh)|' "$TMP/body.txt"
} > "$LOCK"
echo "[lock] wrote $LOCK: $(grep -c -E '^[A-Za-z0-9]' "$LOCK") packages"
