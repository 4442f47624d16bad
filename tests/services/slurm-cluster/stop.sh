#!/usr/bin/env bash
# Stop jim's multi-node test Slurm started by start.sh: cancel its remaining
# jobs, stop the slurmds, slurmctld, slurmdbd, mariadbd and munged through the
# PID files in $STATE/run (only processes whose command line or environment
# names the state dir), SIGKILL whatever is still left inside the cluster's
# namespaces, then delete the namespaces, the veth pairs and the bridge.
# Idempotent; also cleans up after a half-done start.sh.
#
# Usage: stop.sh [--wipe]
#   --wipe (or JIM_TEST_SLURM_CLUSTER_WIPE=1)  also delete the state dir
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/lib.sh"
need_root
WIPE="${JIM_TEST_SLURM_CLUSTER_WIPE:-0}"
case "${1:-}" in
  --wipe) WIPE=1;;
  "") ;;
  *) die "usage: $0 [--wipe]";;
esac
T0=$SECONDS

if alive slurmctld; then
  jobs="$(timeout 15 squeue -h -t PD,R,S,CG,CF,RQ,RS,SO -o %A 2>/dev/null | sort -u | tr '\n' ' ')" || jobs=""
  if [ -n "${jobs// /}" ]; then
    log "cancelling remaining jobs"
    # shellcheck disable=SC2086  # a list of job ids
    timeout 15 scancel $jobs 2>/dev/null || true
    # shellcheck disable=SC2016  # expanded by the inner bash
    wait_for 20 bash -c '[ -z "$(squeue -h -t PD,R,S,CG -o %A 2>/dev/null)" ]' || log "some jobs still completing"
  fi
fi

# every slurmd with a PID file (also of nodes beyond the current node count)
slurmds=()
for f in "$RUN"/slurmd-*.pid; do [ -e "$f" ] && slurmds+=("$(basename "$f" .pid)"); done
[ "${#slurmds[@]}" -gt 0 ] && signal_stop "${slurmds[@]}"
signal_stop slurmctld
signal_stop slurmdbd
signal_stop mariadbd munged

# anything left in our namespaces (jobs of a killed node, ...) dies with them
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^jimsc-' || true); do
  kill_ns "$ns"
  ip netns del "$ns" 2>/dev/null || log "could not delete namespace $ns"
  ip link del "$ns" >/dev/null 2>&1 || true   # the host side of its veth (gone with the peer already)
done
if ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link del "$BRIDGE"
  log "removed bridge $BRIDGE and the namespaces"
fi

if [ "$WIPE" = 1 ]; then
  case "$STATE" in /|/var|/var/tmp|/tmp|/root|/home|/etc|/usr) die "refusing to wipe $STATE";; esac
  rm -rf -- "$STATE"
  log "wiped $STATE"
fi
log "stopped in $(( SECONDS - T0 )) s"
