#!/bin/bash
# stop.sh [--keep-jobs] -- stop the ARC CE test service: the two arched named by
# $STATE/run/*.pid (only if that pid is a live /usr/sbin/arched; TERM, then KILL
# after 10 s) and their root children still alive (scan helper, info provider).
# Unless --keep-jobs: every process of the mapped account (it exists for this
# service only: jim's monitor and workers, local jobs, fork-LRMS jobs, which
# A-REX's own cancel leaves running) and its jobs on the test Slurm.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
[ "$(id -u)" = 0 ] || arc_die "stop.sh must run as root"

alive() { [ -r "/proc/$1/stat" ] && [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
for name in arex-ws arex; do
    pf="$STATE/run/$name.pid"
    [ -s "$pf" ] || continue
    pid=$(cat "$pf")
    if arc_arched "$pid"; then
        kids=$(ps -o pid= --ppid "$pid" 2>/dev/null)
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 100); do alive "$pid" || break; sleep 0.1; done
        alive "$pid" && kill -KILL "$pid" 2>/dev/null
        for k in $kids; do
            alive "$k" && [ "$(stat -c %u "/proc/$k" 2>/dev/null)" = 0 ] && kill -TERM "$k" 2>/dev/null
        done
        arc_say "stopped arc-$name (pid $pid)"
    fi
    rm -f "$pf"
done
rm -f "$STATE/run/mode" "$STATE"/tmp/arex.xml.*

[ "${1:-}" = --keep-jobs ] && exit 0
uid=$(id -u "$MAPPED" 2>/dev/null) || exit 0
if [ -r /var/tmp/jim-test-slurm/env.sh ] && command -v scancel >/dev/null; then
    (. /var/tmp/jim-test-slurm/env.sh; export SLURM_CONF; timeout 20 scancel -u "$MAPPED" 2>/dev/null) || true
fi
for _ in 1 2 3; do
    pids=$(ps -e -o pid=,uid= | awk -v u="$uid" '$2 == u { print $1 }')
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null
    sleep 0.5
done
pids=$(ps -e -o pid=,uid= | awk -v u="$uid" '$2 == u { print $1 }')
# shellcheck disable=SC2086
[ -z "$pids" ] || kill -KILL $pids 2>/dev/null
exit 0
