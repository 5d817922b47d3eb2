#!/usr/bin/env bash
# Install every package of the lock into the environment of PY (scripts/bootstrap.sh calls it):
# pip and the build backends first, then torch (the lock's +cpu wheel, or with CUDA=<index name>
# torch/torchvision at scripts/constraints.txt's versions from that index), then every other package,
# hash-checked; from the indexes, or with WHEELHOUSE=<dir> from that folder alone (no network).
# Usage: scripts/install_lock.sh PY [CUDA]       (NEARID_LOCK_FILE: another lock, e.g. a test's)
set -euo pipefail
PY="$1"
CUDA="${2:-}"
HERE="$(dirname "$0")"
# shellcheck source=scripts/lock_entries.sh
. "$HERE/lock_entries.sh"
CONSTRAINTS="$HERE/constraints.txt"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# pip install -r FILE, skipped when FILE holds no requirement (a lock without that part)
# pip compiles every installed module to bytecode in its one process (~80 of the ~135 s here); the
# packages go in with --no-compile and compileall does it afterwards on every core (the same .pyc files,
# ~110 s in all here). A module that does not compile is compiled again, and fails, when imported.
install_r() { if grep -q '^[A-Za-z0-9]' "$1"; then "$PY" -m pip install --quiet --no-compile "${@:2}" "${SRC[@]}" -r "$1"; fi; }
# pip and the build backends first: the sdists of the lock and nearid_lib itself are built with
# these (--no-build-isolation), so no unpinned build dependency is fetched.
lock_entries pip setuptools wheel flit-core > "$TMP/tools.txt"
src
install_r "$TMP/tools.txt" --require-hashes --no-deps
if [ -z "$CUDA" ]; then
  # torch==X+cpu is on the PyTorch CPU index only; that index is given to this one call, the
  # other packages come from the usual index.
  lock_entries torch > "$TMP/torch.txt"
  src --extra-index-url https://download.pytorch.org/whl/cpu
  install_r "$TMP/torch.txt" --require-hashes --no-deps
  REST="$LOCK"
else
  src --index-url "https://download.pytorch.org/whl/$CUDA"
  "$PY" -m pip install --quiet --force-reinstall --no-deps -c "$CONSTRAINTS" "${SRC[@]}" torch torchvision
  src --index-url "https://download.pytorch.org/whl/$CUDA" --extra-index-url https://pypi.org/simple
  "$PY" -m pip install --quiet -c "$CONSTRAINTS" "${SRC[@]}" torch torchvision
  lock_entries -v torch torchvision > "$TMP/rest.txt"
  REST="$TMP/rest.txt"
fi
src
install_r "$REST" --require-hashes --no-build-isolation --check-build-dependencies
"$PY" -m compileall -q -j 0 "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null 2>&1 || true
