# Sourced by scripts/bootstrap.sh and scripts/wheelhouse.sh: the lock file and its reading.
# LOCK: scripts/requirements.lock (NEARID_LOCK_FILE overrides it: a test's own small lock).
LOCK="${NEARID_LOCK_FILE:-$(dirname "${BASH_SOURCE[0]}")/requirements.lock}"

# The lock's entries (requirement line and its --hash lines) of the named packages (-v: all others).
lock_entries() {
  local invert=0
  if [ "$1" = -v ]; then invert=1; shift; fi
  awk -v names=" $* " -v invert="$invert" '
    /^[A-Za-z0-9]/ { n = tolower($1); sub(/[=<>!~;[].*/, "", n); gsub(/[-_.]+/, "-", n)
                     keep = (index(names, " " n " ") > 0) != invert }
    /^[A-Za-z0-9]/ || /^[ \t]+--hash=/ { if (keep) print }' "$LOCK"
}

# The lock's target ("cp311-linux-x86_64") and the one of interpreter $1.
lock_target() { sed -n 's/^# target: \([^ ]*\).*/\1/p' "$LOCK" | head -n 1; }
python_target() {
  "$1" -c 'import platform, sys; print("cp%d%d-%s-%s" % (*sys.version_info[:2], sys.platform, platform.machine().lower()) if sys.implementation.name == "cpython" else sys.implementation.name)'
}

# src URL-ARGS...: where pip looks, into the array SRC -- the given indexes, or, with WHEELHOUSE set,
# that folder alone (pip --no-index --find-links: nothing is downloaded).
WHEELHOUSE="${WHEELHOUSE:-}"
if [ -n "$WHEELHOUSE" ] && [ -d "$WHEELHOUSE" ]; then WHEELHOUSE="$(cd "$WHEELHOUSE" && pwd)"; fi
export WHEELHOUSE
SRC=()
src() { if [ -n "$WHEELHOUSE" ]; then SRC=(--no-index --find-links "$WHEELHOUSE"); else SRC=("$@"); fi; }
