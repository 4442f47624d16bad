#!/usr/bin/env bash
# Stop jim's test Slurm started by start.sh: cancel its remaining jobs (so no
# job process outlives the cluster), then stop slurmd + slurmctld, slurmdbd,
# mariadbd + munged through the PID files in $STATE/run. Only processes whose
# command line or environment names the state dir are signalled. Idempotent.
#
# Usage: stop.sh [--wipe]
#   --wipe (or JIM_TEST_SLURM_WIPE=1)  also delete the state dir (config,
#                                      logs, job state, accounting database)
#   JIM_TEST_SLURM_KEEP_JOBS=1         do not cancel jobs first (they are
#                                      recovered by the next start.sh)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/lib.sh"
need_root
WIPE="${JIM_TEST_SLURM_WIPE:-0}"
case "${1:-}" in
  --wipe) WIPE=1;;
  "") ;;
  *) die "usage: $0 [--wipe]";;
esac
[ -d "$STATE" ] || { log "nothing to stop ($STATE absent)"; exit 0; }
T0=$SECONDS

if alive slurmctld && [ "${JIM_TEST_SLURM_KEEP_JOBS:-0}" != 1 ]; then
  jobs="$(timeout 15 squeue -h -t PD,R,S,CG,CF,RQ,RS,SO -o %A 2>/dev/null | sort -u | tr '\n' ' ')" || jobs=""
  if [ -n "${jobs// /}" ]; then
    log "cancelling remaining jobs"
    # shellcheck disable=SC2086  # word splitting intended: list of job ids
    timeout 15 scancel $jobs 2>/dev/null || true
    # shellcheck disable=SC2016  # expanded by the inner bash
    wait_for 30 bash -c '[ -z "$(squeue -h -t PD,R,S,CG -o %A 2>/dev/null)" ]' || log "some jobs still completing"
  fi
fi
# slurmctld sends its last records to slurmdbd on the way down: stop the
# Slurm daemons before the database ones, munged last.
signal_stop slurmd slurmctld
signal_stop slurmdbd
signal_stop mariadbd munged

if [ "$WIPE" = 1 ]; then
  case "$STATE" in /|/var|/var/tmp|/tmp|/root|/home|/etc|/usr) die "refusing to wipe $STATE";; esac
  rm -rf -- "$STATE"
  log "wiped $STATE"
fi
log "stopped in $(( SECONDS - T0 )) s"
