#!/usr/bin/env bash
# Control the running test cell (see README.md):
#   ctl.sh env             print the path of env.sh (source it for SGE_ROOT, PATH ...)
#   ctl.sh status          "NAME up PID" / "NAME down" per daemon, then whether
#                          the qmaster answers; rc 0 only if all is up
#   ctl.sh stop-qmaster    SIGTERM to sge_qmaster only; returns once it has exited.
#                          Running jobs go on under sge_execd.           (root)
#   ctl.sh start-qmaster   start it again (jobs that ended meanwhile are
#                          reported at once); returns once it answers    (root)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/lib.sh"
# shellcheck disable=SC1091  # written by start.sh
[ -s "$STATE/env.sh" ] && . "$STATE/env.sh"
case "${1:-}" in
  env) echo "$STATE/env.sh" ;;
  status)
    rc=0
    if pid="$(qmaster_pid)"; then echo "sge_qmaster up $pid"; else echo "sge_qmaster down"; rc=1; fi
    if pid="$(execd_pid)"; then echo "sge_execd up $pid"; else echo "sge_execd down"; rc=1; fi
    if qmaster_ok; then echo "qmaster answering"; else echo "qmaster not answering"; rc=1; fi
    exit $rc ;;
  stop-qmaster) need_root; stop_qmaster ;;
  start-qmaster) need_root; start_qmaster; wait_for 60 queue_ok || die "queue not usable after the restart" ;;
  *) echo "usage: $0 env|status|stop-qmaster|start-qmaster" >&2; exit 2 ;;
esac
