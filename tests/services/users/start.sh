#!/bin/bash
# start.sh -- two ordinary local accounts for jim's isolation tests, and a jim
# they can run. Idempotent. Run as root.
#
#   1. creates the accounts jimtest-alice and jimtest-bob (no password: only
#      root switches to them);
#   2. installs this repository's jim into a venv every account can read
#      (tests/services/lib/jim-venv.sh; default /opt/jim-test-venv).
#
# Environment: JIM_TEST_VENV (default /opt/jim-test-venv).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${JIM_TEST_VENV:-/opt/jim-test-venv}
STATE=/var/lib/jim-users-test
if [ "$(id -u)" -ne 0 ]; then
    echo "start.sh: must run as root (it creates accounts)" >&2
    exit 1
fi
command -v /usr/bin/python3 >/dev/null && /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || {
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=900 update -qq
    apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends python3 python3-venv >/dev/null
}
for u in jimtest-alice jimtest-bob; do
    id "$u" >/dev/null 2>&1 || { useradd -m -s /bin/bash "$u"; echo "== created account $u"; }
    chmod 700 "$(getent passwd "$u" | cut -d: -f6)"
done
"$HERE/../lib/jim-venv.sh" "$VENV" "$STATE"
echo "== users ready: jimtest-alice, jimtest-bob; jim in $VENV"
