#!/usr/bin/env bash
# Convert one jupytext percent source to .ipynb and execute it with papermill (scripts/execute_notebook.py).
# Usage: scripts/run_notebook.sh VENV SRC.py OUT.ipynb PROFILE [SEED]
# The executed notebook is written to a temporary name and moved into place only on success,
# so make never mistakes a failed run for a finished one. The log lands beside it. Before the move,
# every progress bar's saved text is set to its final state (scripts/finalise_notebook.py): a viewer
# without the widgets then shows "100% 22/22", not the "0% 0/22" of the moment the bar appeared.
set -euo pipefail
VENV="$1"; SRC="$2"; OUT="$3"; PROFILE="$4"; SEED="${5:-0}"
mkdir -p "$(dirname "$OUT")"
NAME="$(basename "$SRC" .py)"
PARTIAL="$(dirname "$OUT")/.${NAME}.partial.ipynb"
LOG="${OUT%.ipynb}.log"
START=$(date +%s)
echo "[notebook] $NAME (PROFILE=$PROFILE, NEARID_PORTABLE=${NEARID_PORTABLE:-default})"
# scripts/execute_notebook.py: the conversion, the kernel's portable numerics (nearid_lib/runtime; the
# kernel must start with the pinned code paths and thread counts, since a notebook imports numpy and
# torch before nearid_lib), papermill and the progress bars' final text, in one process.
rc=0
"$VENV/bin/python" "$(dirname "$0")/execute_notebook.py" \
  "$SRC" "$PARTIAL" "$PROFILE" "$SEED" >"$LOG" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ]; then
  [ "$rc" -eq 3 ] && echo "[notebook] $NAME: warning: progress bars keep their first text (see $LOG)" >&2
  mv "$PARTIAL" "$OUT"
  echo "[notebook] $NAME done in $(( $(date +%s) - START )) s"
else
  echo "[notebook] $NAME FAILED after $(( $(date +%s) - START )) s; executed copy: $PARTIAL; log: $LOG" >&2
  tail -n 40 "$LOG" >&2
  exit $rc
fi
