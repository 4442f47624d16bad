# lib.sh -- shared settings of the ARC CE test service (sourced by setup.sh,
# start.sh, stop.sh). Everything lives in $STATE; nothing in /etc/grid-security
# is used.
STATE=${JIM_TEST_ARC_STATE:-/var/tmp/jim-test-arc}
PORT=${JIM_TEST_ARC_PORT:-40450}
VENV=${JIM_TEST_VENV:-/opt/jim-test-venv}
JIM="$VENV/bin/jim"
ARC_SHARE=/usr/share/arc          # A-REX looks for <script>-<lrms>-job only here
ARCHED=/usr/sbin/arched
# Grid jobs run as MAPPED; the ARC client runs as CLIENT. Own accounts, not the
# isolation tests' alice/bob: their fixture kills those accounts' processes.
MAPPED=jimtest-arcuser
CLIENT=jimtest-arcclient
CA_SUBJECT="/O=Grid/OU=jim-test-arc/CN=jim test ARC CA"
HOST_SUBJECT="/O=Grid/OU=jim-test-arc/CN=localhost"
USER_SUBJECT="/O=Grid/OU=jim-test-arc/CN=jim test ARC user"
AREX_PIDFILE="$STATE/run/arex.pid"
WS_PIDFILE="$STATE/run/arex-ws.pid"

arc_say() { echo "[jim-test-arc] $*"; }
arc_die() { echo "[jim-test-arc] $*" >&2; exit 1; }
# arc_arched PID: PID is a live /usr/sbin/arched (never signal anything else)
arc_arched() {
    [ -n "${1:-}" ] && [ -d "/proc/$1" ] && [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$ARCHED" ]
}
arc_running() { [ -s "$1" ] && arc_arched "$(cat "$1")"; }
arc_home() { getent passwd "$1" | cut -d: -f6; }
