#!/bin/bash
# stop.sh [--keep-jobs] [--keep-mounts] -- stop the ARC 7 CE test service; root.
#  1. the two arched named by $STATE/run/*.pid, only when that PID is a live arched whose root is
#     the chroot (TERM, 10 s, KILL), and their root children still alive (scan step, info provider);
#  2. unless --keep-jobs: every process whose root is the chroot and whose uid is $MAPPED's
#     ($MAPPED_UID, a chroot-only account: jim's monitor and workers, local jobs, fork-LRMS jobs,
#     which A-REX's own fork cancel leaves running);
#  3. unless --keep-mounts: when no process is left in the chroot (the HTCondor pool shares it),
#     everything mounted under it is unmounted, deepest first; otherwise the mounts stay.
# The chroot and the service's state stay.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
[ "$(id -u)" = 0 ] || arc7_die "stop.sh must run as root"
keep_jobs=0; keep_mounts=0
for a in "$@"; do
    case "$a" in --keep-jobs) keep_jobs=1 ;; --keep-mounts) keep_mounts=1 ;; *) arc7_die "unknown option $a" ;; esac
done
[ -d "$ROOT$STATE" ] || exit 0

alive() { [ -r "/proc/$1/stat" ] && [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
for name in arex-ws arex; do
    pf=$ROOT$STATE/run/$name.pid
    [ -s "$pf" ] || continue
    pid=$(cat "$pf")
    if arched_pid_ok "$pid"; then
        kids=$(ps -o pid= --ppid "$pid" 2>/dev/null)
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 100); do alive "$pid" || break; sleep 0.1; done
        alive "$pid" && kill -KILL "$pid" 2>/dev/null
        for k in $kids; do
            alive "$k" && in_our_root "$k" && [ "$(stat -c %u "/proc/$k" 2>/dev/null)" = 0 ] && kill -TERM "$k" 2>/dev/null
        done
        arc7_say "stopped arc-$name (pid $pid)"
    fi
    rm -f "$pf"
done
rm -f "$ROOT$STATE/run/mode" "$ROOT$STATE"/tmp/arex.xml.*

if [ "$keep_jobs" = 0 ]; then
    for round in 1 2 3 4; do
        pids=()
        for p in /proc/[0-9]*; do
            pid=${p#/proc/}
            [ "$(stat -c %u "$p" 2>/dev/null)" = "$MAPPED_UID" ] && in_our_root "$pid" && alive "$pid" && pids+=("$pid")
        done
        [ ${#pids[@]} -gt 0 ] || break
        sig=TERM; [ "$round" -ge 3 ] && sig=KILL
        kill -"$sig" "${pids[@]}" 2>/dev/null
        sleep 0.5
    done
fi

[ "$keep_mounts" = 1 ] && exit 0
for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    if in_our_root "$pid" && alive "$pid"; then
        arc7_say "other processes run in $ROOT (the HTCondor pool?): mounts kept"
        exit 0
    fi
done
r=$(readlink -f "$ROOT")
for m in $(awk -v r="$r" '$2 ~ "^"r"/" { print $2 }' /proc/mounts | sort -r); do umount -l "$m" 2>/dev/null; done
arc7_say "stopped; unmounted what was mounted under $ROOT"
exit 0
