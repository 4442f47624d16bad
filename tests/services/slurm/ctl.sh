#!/usr/bin/env bash
# Control jim's test Slurm (started by start.sh) from tests.
#
#   ctl.sh env                 print the path of env.sh (export SLURM_CONF=...)
#   ctl.sh status              one line per daemon: "NAME up PID" / "NAME down",
#                              then "controller answering|not answering";
#                              exit 0 if everything is up and answering, else 1
#   ctl.sh stop-ctld           clean stop (SIGTERM) of slurmctld only; it
#                              saves its state; slurmd/slurmdbd/munged stay up,
#                              jobs keep running. Returns once it has exited.
#   ctl.sh start-ctld [--settle [SECONDS]]
#                              start slurmctld again (recovering every job)
#                              and return once it answers and the node is
#                              usable. With --settle also wait (default up
#                              to 40 s) until jobs that ended while it was
#                              down have been reported (see "settle").
#   ctl.sh settle [SECONDS]    wait (default 40 s) until no batch job is left
#                              whose script has exited but whose slurmstepd
#                              has not yet reported the end to slurmctld.
#                              slurmstepd retries every 15 s + up to
#                              MessageTimeout, so this takes up to ~20 s after
#                              a restart. Exit 1 on timeout.
#   ctl.sh resume-node         resume the node if it is drained/down
#
# stop-ctld/start-ctld/resume-node need root (as start.sh).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/lib.sh"

settle() {
  local limit="${1:-40}" left
  no_pending() { [ -z "$(pending_completions)" ]; }
  wait_for "$limit" no_pending && return 0
  left="$(pending_completions | tr '\n' ' ')"
  die "jobs still waiting to report their end after ${limit} s: $left"
}

cmd="${1:-}"; [ $# -gt 0 ] && shift
case "$cmd" in
  env)
    [ -s "$STATE/env.sh" ] || die "$STATE/env.sh missing: run start.sh first"
    echo "$STATE/env.sh"
    ;;
  status)
    ok=0
    for d in munged mariadbd slurmdbd slurmctld slurmd; do
      # (PID files are readable by all; the /proc check of other users'
      # environment is not, so non-root callers may see "down" for slurmdbd)
      if pid="$(pid_of "$d")"; then echo "$d up $pid"; else echo "$d down"; ok=1; fi
    done
    ping="$(timeout 10 scontrol ping 2>/dev/null)" || ping=""
    if grep -q 'is UP' <<<"$ping"; then
      echo "controller answering"
    else
      echo "controller not answering"; ok=1
    fi
    exit "$ok"
    ;;
  stop-ctld)
    need_root
    [ $# -eq 0 ] || die "usage: $0 stop-ctld"
    T0=$SECONDS
    if alive slurmctld; then signal_stop slurmctld; else log "slurmctld was not running"; fi
    log "slurmctld stopped in $(( SECONDS - T0 )) s"
    ;;
  start-ctld)
    need_root
    do_settle=0; limit=40
    if [ "${1:-}" = --settle ]; then do_settle=1; shift; [ $# -gt 0 ] && { limit="$1"; shift; }; fi
    [ $# -eq 0 ] || die "usage: $0 start-ctld [--settle [SECONDS]]"
    [ -s "$CONF" ] || die "$CONF missing: run start.sh first"
    T0=$SECONDS
    start_ctld
    ensure_node_up 40
    log "slurmctld up in $(( SECONDS - T0 )) s"
    if [ "$do_settle" = 1 ]; then settle "$limit"; log "settled in $(( SECONDS - T0 )) s"; fi
    ;;
  settle)
    settle "${1:-40}"
    ;;
  resume-node)
    need_root
    ensure_node_up 30
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
