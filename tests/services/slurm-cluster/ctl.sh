#!/usr/bin/env bash
# Control jim's multi-node test Slurm (started by start.sh) from tests.
#
#   ctl.sh env               print the path of env.sh (export SLURM_CONF=...)
#   ctl.sh nodes             the compute nodes' names, one a line
#   ctl.sh status            one line per daemon ("NAME up PID" / "NAME down"),
#                            one per node ("node NAME STATE"), then
#                            "controller answering" or not; exit 0 if every
#                            daemon is up and the controller answers
#   ctl.sh kill-node NAME    crash node NAME: SIGKILL every process in its
#                            network namespace (its slurmd, the slurmstepds
#                            and every process of the jobs running there),
#                            at once. slurmctld notices after SlurmdTimeout.
#   ctl.sh wait-down NAME [SECONDS]
#                            wait (default 60 s) until slurmctld has set node
#                            NAME DOWN (its jobs are then NODE_FAIL or
#                            requeued); exit 1 on timeout
#   ctl.sh revive-node NAME  start node NAME's slurmd again (after kill-node)
#                            and return once the node is usable again
#                            (a DOWN node is resumed)
#
# kill-node/revive-node need root.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/lib.sh"

cmd="${1:-}"; [ $# -gt 0 ] && shift
case "$cmd" in
  env)
    [ -s "$STATE/env.sh" ] || die "$STATE/env.sh missing: run start.sh first"
    echo "$STATE/env.sh"
    ;;
  nodes)
    printf '%s\n' "${NODES[@]}"
    ;;
  status)
    ok=0
    for d in munged mariadbd slurmdbd slurmctld "${NODES[@]/#/slurmd-}"; do
      if pid="$(pid_of "$d")"; then echo "$d up $pid"; else echo "$d down"; ok=1; fi
    done
    if ctld_answers; then
      echo "controller answering"
      timeout 10 sinfo -h -N -o 'node %N %T' 2>/dev/null | sort -u || true
    else
      echo "controller not answering"; ok=1
    fi
    exit "$ok"
    ;;
  kill-node)
    need_root
    [ $# -eq 1 ] && is_node "$1" || die "usage: $0 kill-node NODE (one of: ${NODES[*]})"
    ns_exists "$(node_ns "$1")" || die "namespace $(node_ns "$1") missing: run start.sh"
    kill_ns "$(node_ns "$1")"
    rm -f "$RUN/slurmd-$1.pid"
    log "node $1 killed (every process in namespace $(node_ns "$1"))"
    ;;
  wait-down)
    [ $# -ge 1 ] && [ $# -le 2 ] && is_node "$1" || die "usage: $0 wait-down NODE [SECONDS]"
    is_down() { case "$(node_state "$1")" in down*) return 0;; esac; return 1; }
    wait_for "${2:-60}" is_down "$1" || die "node $1 still '$(node_state "$1")' after ${2:-60} s"
    ;;
  revive-node)
    need_root
    [ $# -eq 1 ] && is_node "$1" || die "usage: $0 revive-node NODE (one of: ${NODES[*]})"
    T0=$SECONDS
    start_slurmd "$1"
    ensure_node_up "$1" 40
    log "node $1 usable again in $(( SECONDS - T0 )) s"
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
