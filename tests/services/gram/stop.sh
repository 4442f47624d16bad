#!/bin/bash
# stop.sh -- stop what tests/services/gram/start.sh started, by PID file
# only (never by name):
#   1. the gatekeeper recorded in $STATE/run/gatekeeper.pid;
#   2. the job managers it started for the mapped account jimgrid: GRAM5 job
#      managers daemonize and record their own PID in
#      /var/lib/globus/gram_job_state/jimgrid/<host>/*.pid; each is signalled
#      only if that PID is a live /usr/sbin/globus-job-manager owned by
#      jimgrid (their Perl script processes exit with them). Otherwise they
#      would exit by themselves 60 s after their last job.
# Installed packages, accounts, certificates, the venv and `jim gram-install`
# stay (start.sh is then quick); `stop.sh --uninstall` also runs
# `jim gram-install --uninstall`. jim's own monitors exit when idle.
#
# Environment: JIM_GRAM_TEST_STATE (default /var/lib/jim-gram-test)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
STATE=${JIM_GRAM_TEST_STATE:-/var/lib/jim-gram-test}
MAPPED_USER=jimgrid
PIDFILE="$STATE/run/gatekeeper.pid"
uninstall=0
[ "${1:-}" = "--uninstall" ] && uninstall=1

alive() { [ -r "/proc/$1/stat" ] && [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

stop_pid() {        # PID EXE NAME: TERM, up to 5 s, then KILL
    local pid=$1 exe=$2 name=$3
    if ! alive "$pid" || [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" != "$exe" ]; then
        echo "$name (pid $pid) not running"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
        alive "$pid" || { echo "stopped $name (pid $pid)"; return 0; }
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    echo "killed $name (pid $pid)"
}

if [ -f "$PIDFILE" ]; then
    stop_pid "$(cat "$PIDFILE")" /usr/sbin/globus-gatekeeper gatekeeper
    rm -f "$PIDFILE" "$STATE/run/gatekeeper.selfpid"
else
    echo "no gatekeeper PID file ($PIDFILE)"
fi

if id "$MAPPED_USER" >/dev/null 2>&1; then
    uid=$(id -u "$MAPPED_USER")
    for pf in /var/lib/globus/gram_job_state/"$MAPPED_USER"/*/*.pid; do
        [ -f "$pf" ] || continue
        pid=$(cat "$pf" 2>/dev/null || true)
        [ -n "$pid" ] && alive "$pid" || continue
        [ "$(stat -c %u "/proc/$pid" 2>/dev/null || echo -1)" = "$uid" ] || continue
        stop_pid "$pid" /usr/sbin/globus-job-manager "job manager $(basename "$pf" .pid)"
    done
fi

if [ "$uninstall" = 1 ]; then
    PYTHONPATH="$REPO" /usr/bin/python3 -m jim.gram --uninstall
fi
