#!/bin/bash
# jim-venv.sh VENV LOGDIR -- install this repository's jim into VENV, a venv
# every local account can read and run (the test services run jim as other
# users: the GRAM mapped account, the isolation tests' two users).
# Reinstalls only when the sources changed (their hash is kept in the venv).
set -euo pipefail
VENV=$1
LOGDIR=$2
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
install -d -m 755 "$LOGDIR"
exec 9>"$LOGDIR/jim-venv.lock"
flock 9
src_hash=$(cd "$REPO" && find pyproject.toml jim adapters handlers sandbox -type f \
               ! -path '*/__pycache__/*' ! -name '*.pyc' 2>/dev/null | LC_ALL=C sort \
           | xargs sha256sum | sha256sum | cut -c1-16)
if [ ! -x "$VENV/bin/python" ]; then
    echo "== creating $VENV"
    /usr/bin/python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check --upgrade pip > "$LOGDIR/pip.log" 2>&1 || true
fi
if [ "$(cat "$VENV/.jim-source-hash" 2>/dev/null)" != "$src_hash" ]; then
    echo "== installing jim from $REPO into $VENV"
    t0=$(date +%s)
    # (pip always reinstalls a project given as a directory; deps only when missing)
    "$VENV/bin/pip" install -q --disable-pip-version-check "$REPO" \
        > "$LOGDIR/pip.log" 2>&1 || { tail -30 "$LOGDIR/pip.log" >&2; exit 1; }
    echo "$src_hash" > "$VENV/.jim-source-hash"
    chmod -R a+rX "$VENV"
    echo "   installed in $(( $(date +%s) - t0 )) s"
fi
