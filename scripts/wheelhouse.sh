#!/usr/bin/env bash
# `make wheelhouse`: on a machine with network, every file `make install` installs, into a folder
# to carry to a node without internet (`make install WHEELHOUSE=<folder>` there: pip --no-index
# --find-links). Run it with the lock's Python (scripts/requirements.lock, "# target:"): pip picks
# the wheels of the interpreter it runs under.
#   - the lock's packages, hash-checked (pip download --require-hashes --no-deps), including pip and
#     the build backends of its sdists and of nearid_lib;
#   - torch: TORCH=cpu (default) the lock's +cpu wheel from the PyTorch CPU index (hash-checked);
#     TORCH=cu128 (or another index name) torch and torchvision at scripts/constraints.txt's versions
#     from that index, with their CUDA packages (not hashed: the lock holds the CPU build's hashes).
# A wheelhouse.txt names the target, the torch build and the lock's sha256.
# Usage: scripts/wheelhouse.sh [OUT]   (default wheelhouse; make wheelhouse WHEELHOUSE=OUT TORCH=...)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-wheelhouse}"
PYTHON="${PYTHON:-python3}"
TORCH="${TORCH:-cpu}"
# shellcheck source=scripts/lock_entries.sh
. scripts/lock_entries.sh
CONSTRAINTS=scripts/constraints.txt
WANT="$(lock_target)"
HAVE="$(python_target "$PYTHON")"
if [ "$WANT" != "$HAVE" ]; then
  echo "[wheelhouse] error: $LOCK is for $WANT, $PYTHON is $HAVE: run with that Python (make wheelhouse PYTHON=python3.x)" >&2
  exit 1
fi
mkdir -p "$OUT"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
PIP=("$PYTHON" -m pip download --quiet --no-deps --dest "$OUT")
case "$TORCH" in
  ""|cpu|default)
    TORCH=cpu
    lock_entries -v torch > "$TMP/rest.txt"
    lock_entries torch > "$TMP/torch.txt"
    echo "[wheelhouse] torch +cpu from the lock (https://download.pytorch.org/whl/cpu), hash-checked"
    "${PIP[@]}" --require-hashes -r "$TMP/torch.txt" --extra-index-url https://download.pytorch.org/whl/cpu ;;
  *)
    lock_entries -v torch torchvision > "$TMP/rest.txt"
    echo "[wheelhouse] torch and torchvision ($CONSTRAINTS) with their CUDA packages from https://download.pytorch.org/whl/$TORCH"
    "$PYTHON" -m pip download --quiet --dest "$OUT" -c "$CONSTRAINTS" torch torchvision \
      --index-url "https://download.pytorch.org/whl/$TORCH" --extra-index-url https://pypi.org/simple ;;
esac
echo "[wheelhouse] every other package of $LOCK, hash-checked"
"${PIP[@]}" --require-hashes -r "$TMP/rest.txt"
{
  echo "target: $WANT"
  echo "torch: $TORCH"
  echo "lock_sha256: $(sha256sum "$LOCK" | cut -d' ' -f1)"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} > "$OUT/wheelhouse.txt"
echo "[wheelhouse] $(ls "$OUT" | wc -l) files, $(du -sh "$OUT" | cut -f1) in $OUT; on the node: make install WHEELHOUSE=$OUT TORCH=$TORCH"
