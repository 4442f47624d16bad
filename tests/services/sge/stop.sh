#!/usr/bin/env bash
# Stop the Grid Engine cell that start.sh started: delete its remaining jobs
# (not with JIM_TEST_SGE_KEEP_JOBS=1), then stop sge_execd and sge_qmaster
# through their PID files (only processes whose command line or environment
# names the state dir are signalled). Keeps the state dir (spool, accounting
# file) unless --wipe / JIM_TEST_SGE_WIPE=1. Idempotent.
#
# Usage:   tests/services/sge/stop.sh [--wipe]
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/lib.sh"
need_root
WIPE="${JIM_TEST_SGE_WIPE:-0}"
[ "${1:-}" = --wipe ] && WIPE=1
[ -d "$STATE" ] || { log "nothing to stop ($STATE absent)"; exit 0; }

if qmaster_pid >/dev/null && [ "${JIM_TEST_SGE_KEEP_JOBS:-0}" != 1 ]; then
  if [ -n "$(timeout 10 qstat -u '*' 2>/dev/null | head -1)" ]; then
    log "deleting remaining jobs"
    timeout 30 qdel -u '*' >/dev/null 2>&1 || true
    # shellcheck disable=SC2016  # expanded by the inner bash
    wait_for 30 bash -c '[ -z "$(qstat -u "*" 2>/dev/null | head -1)" ]' || {
      log "jobs still there after 30 s: forcing"; timeout 30 qdel -f -u '*' >/dev/null 2>&1 || true; }
  fi
fi
if pid="$(execd_pid)"; then stop_pid sge_execd "$pid"; fi
stop_qmaster
rm -f "$RUN/sge_execd.pid" "$RUN/sge_qmaster.pid"
if [ "$WIPE" = 1 ]; then
  case "$STATE" in /|/var|/var/tmp|/tmp|/root|/home|"") die "refusing to wipe $STATE";; esac
  rm -rf -- "$STATE"; log "wiped $STATE"
fi
log "stopped"
