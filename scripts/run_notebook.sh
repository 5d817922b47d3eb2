#!/usr/bin/env bash
# Convert one jupytext percent source to .ipynb and execute it with papermill.
# Usage: scripts/run_notebook.sh VENV SRC.py OUT.ipynb PROFILE [SEED]
# The executed notebook is written to a temporary name and moved into place only on success,
# so make never mistakes a failed run for a finished one. The log lands beside it. Before the move,
# every progress bar's saved text is set to its final state (scripts/finalise_notebook.py): a viewer
# without the widgets then shows "100% 22/22", not the "0% 0/22" of the moment the bar appeared.
set -euo pipefail
VENV="$1"; SRC="$2"; OUT="$3"; PROFILE="$4"; SEED="${5:-0}"
mkdir -p "$(dirname "$OUT")"
NAME="$(basename "$SRC" .py)"
SRC_NB="$(dirname "$OUT")/.${NAME}.src.ipynb"
PARTIAL="$(dirname "$OUT")/.${NAME}.partial.ipynb"
LOG="${OUT%.ipynb}.log"
"$VENV/bin/jupytext" --quiet --to ipynb --set-kernel python3 -o "$SRC_NB" "$SRC"
# Portable numerics (nearid_lib/runtime/__init__.py; NEARID_PORTABLE, which the Makefile exports): the kernel
# must start with the pinned code paths and thread counts, since a notebook imports numpy and torch
# before nearid_lib and each reads its variables once, when it loads.
EXPORTS="$(PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}" "$VENV/bin/python" -c \
  'from nearid_lib.runtime import shell_exports; print(shell_exports())')"
eval "$EXPORTS"
START=$(date +%s)
echo "[notebook] $NAME (PROFILE=$PROFILE, NEARID_PORTABLE=$NEARID_PORTABLE)"
if "$VENV/bin/papermill" "$SRC_NB" "$PARTIAL" -k python3 -p PROFILE "$PROFILE" -p SEED "$SEED" \
     --cwd "$(pwd)" --log-output --progress-bar >"$LOG" 2>&1; then
  "$VENV/bin/python" "$(dirname "$0")/finalise_notebook.py" "$PARTIAL" >>"$LOG" 2>&1 ||
    echo "[notebook] $NAME: warning: progress bars keep their first text (see $LOG)" >&2
  mv "$PARTIAL" "$OUT"
  rm -f "$SRC_NB"
  echo "[notebook] $NAME done in $(( $(date +%s) - START )) s"
else
  rc=$?
  echo "[notebook] $NAME FAILED after $(( $(date +%s) - START )) s; executed copy: $PARTIAL; log: $LOG" >&2
  tail -n 40 "$LOG" >&2
  exit $rc
fi
