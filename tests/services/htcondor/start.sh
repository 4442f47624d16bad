#!/usr/bin/env bash
# Start jim's HTCondor test pool: one machine that is central manager, submit (schedd,
# Condor-G's gridmanager, blahpd) and execute node (one partitionable slot), in the trixie
# chroot made by setup.sh, on loopback only. Idempotent: a running pool is left alone, its
# configuration rewritten (condor_reconfig) when it changed. Needs root.
#
# What the tests get (paths in lib.sh):
#   - host clients (jim's `condor` adapter, the htcondor2 bindings): CONDOR_CONFIG=$STATE/condor_config.client
#     and an IDTOKEN in ~$TEST_USER/.condor/tokens.d/ (token.sh USER for another account);
#   - an unprivileged account $TEST_USER (jobs of root are refused by HTCondor), the same uid in the chroot;
#   - jim installed in the chroot at $CHROOT_VENV (what blahpd runs for `grid_resource = batch jim`)
#     and on the host at /opt/jim-test-venv (what the account runs), both from this repository;
#   - every file under config.d/ here copied into the pool's configuration (e.g. a job-router route; the
#     schedd restarted when its environment lacks the SCHEDD_ENVIRONMENT one sets, as jim-arc.config does).
# Jobs run inside the chroot: every path they touch must be under $BINDS (mounted at the same path).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
need_root
T0=$SECONDS
"$HERE/setup.sh" >/dev/null
mkdir -p "$STATE/log"; chmod 755 "$STATE"

# -- mounts (the chroot sees /proc, /sys, /dev, the bound directories and this repository)
mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
mountpoint -q "$ROOT/sys" || mount --rbind /sys "$ROOT/sys"
mountpoint -q "$ROOT/dev" || mount --rbind /dev "$ROOT/dev"
for d in $BINDS; do mkdir -p "$ROOT$d"; mountpoint -q "$ROOT$d" || mount --bind "$d" "$ROOT$d"; done
mkdir -p "$ROOT$CHROOT_SRC"
if mountpoint -q "$ROOT$CHROOT_SRC" && [ "$(stat -c %d:%i "$ROOT$CHROOT_SRC")" != "$(stat -c %d:%i "$REPO")" ]; then
  umount -l "$ROOT$CHROOT_SRC"   # another clone of jim was mounted there
fi
mountpoint -q "$ROOT$CHROOT_SRC" || mount --bind "$REPO" "$ROOT$CHROOT_SRC"

# -- accounts: the tests' account on the host, and every host account (uid >= 1000) in the chroot
if ! id "$TEST_USER" >/dev/null 2>&1; then useradd -m -s /bin/bash "$TEST_USER"; log "created account $TEST_USER"; fi
chmod 700 "$(getent passwd "$TEST_USER" | cut -d: -f6)"
"$HERE/sync-users.sh"
host=$(hostname)
grep -qw "$host" "$ROOT/etc/hosts" || echo "127.0.0.1 $host" >> "$ROOT/etc/hosts"

# -- the pool's configuration
conf=$ROOT/etc/condor/config.d
new=$(mktemp)
cat > "$new" <<CFG
# jim's HTCondor test pool (tests/services/htcondor/start.sh); rewritten on every start
CONDOR_HOST = 127.0.0.1
COLLECTOR_HOST = 127.0.0.1:$PORT
SHARED_PORT_PORT = $PORT
NETWORK_INTERFACE = 127.0.0.1
ENABLE_IPV6 = false
use ROLE: CentralManager
use ROLE: Submit
use ROLE: Execute
UID_DOMAIN = $host
TRUST_UID_DOMAIN = true
# host clients authenticate with IDTOKENS (token.sh); FS works only inside the chroot
SEC_DEFAULT_AUTHENTICATION_METHODS = FS, IDTOKENS
ALLOW_READ = 127.0.0.1
ALLOW_WRITE = 127.0.0.1
ALLOW_NEGOTIATOR = 127.0.0.1
ALLOW_ADMINISTRATOR = condor@*/127.0.0.1, root@*/127.0.0.1
# one partitionable slot: jobs ask for cores and memory (request_cpus, request_memory)
NUM_CPUS = $CPUS
NUM_SLOTS = 1
NUM_SLOTS_TYPE_1 = 1
SLOT_TYPE_1 = 100%
SLOT_TYPE_1_PARTITIONABLE = TRUE
START = TRUE
SUSPEND = FALSE
PREEMPT = FALSE
KILL = FALSE
# a small pool that answers quickly
UPDATE_INTERVAL = 5
NEGOTIATOR_INTERVAL = 5
NEGOTIATOR_CYCLE_DELAY = 5
SCHEDD_INTERVAL = 5
STARTER_UPDATE_INTERVAL = 5
GRIDMANAGER_JOB_PROBE_INTERVAL = 5
GRIDMANAGER_MAX_SUBMITTED_JOBS_PER_RESOURCE = 10000
# a chroot cannot give each job a mount or PID namespace: without these two every job is held
# with "Failed to execute ... errno=22" (StarterLog: "Failed to unshare the mount namespace")
MOUNT_UNDER_SCRATCH =
USE_PID_NAMESPACES = false
CFG
changed=0
cmp -s "$new" "$conf/90-jim-test.config" || { install -m 644 "$new" "$conf/90-jim-test.config"; changed=1; }
rm -f "$new"
for f in "$HERE"/config.d/*.config; do
  [ -e "$f" ] || continue
  cmp -s "$f" "$conf/95-jim-$(basename "$f")" || { install -m 644 "$f" "$conf/95-jim-$(basename "$f")"; changed=1; }
done
cat > "$STATE/condor_config.client" <<CFG
CONDOR_HOST = 127.0.0.1
COLLECTOR_HOST = 127.0.0.1:$PORT
ENABLE_IPV6 = false
UID_DOMAIN = $host
SEC_CLIENT_AUTHENTICATION_METHODS = IDTOKENS
# always authenticate, reads too: the schedd then knows (and logs) whose query it answers
SEC_CLIENT_AUTHENTICATION = REQUIRED
CFG
chmod 644 "$STATE/condor_config.client"

# -- the daemons
running() { [ -s "$STATE/master.pid" ] && kill -0 "$(cat "$STATE/master.pid")" 2>/dev/null; }
if running; then
  log "pool already running (master $(cat "$STATE/master.pid"))"
  [ "$changed" = 1 ] && { log "configuration changed: condor_reconfig"; in_root condor_reconfig >/dev/null; }
else
  rm -f "$STATE/master.pid"
  in_root /usr/sbin/condor_master   # daemonizes; its pid: the condor_master whose root is this chroot
  for _ in $(seq 50); do
    for p in $(pgrep -x condor_master); do
      [ "$(readlink "/proc/$p/root")" = "$(readlink -f "$ROOT")" ] && echo "$p" > "$STATE/master.pid"
    done
    [ -s "$STATE/master.pid" ] && break; sleep 0.2
  done
  running || die "condor_master did not start: see $ROOT/var/log/condor/MasterLog"
fi
# SCHEDD_ENVIRONMENT (config.d/jim-arc.config: X509_CERT_DIR for Condor-G's arc_gahp, which inherits the
# schedd's environment through the gridmanager) reaches the schedd only when the master starts it:
# condor_reconfig leaves a running schedd's environment as it was. Restarted when it lacks a variable.
schedd_pid() {
  local p
  for p in $(pgrep -x condor_schedd); do
    [ "$(readlink "/proc/$p/root")" = "$(readlink -f "$ROOT")" ] && { echo "$p"; return 0; }
  done
  return 1
}
schedd_env_ok() {
  local pid v
  pid=$(schedd_pid) || return 1
  for v in $(in_root condor_config_val SCHEDD_ENVIRONMENT 2>/dev/null); do
    tr '\0' '\n' < "/proc/$pid/environ" | grep -qxF -- "$v" || return 1
  done
}
for _ in $(seq 60); do schedd_pid >/dev/null && break; sleep 0.5; done
if ! schedd_env_ok; then
  log "the schedd's environment lacks SCHEDD_ENVIRONMENT: condor_restart -daemon schedd"
  in_root condor_restart -daemon schedd >/dev/null
  for _ in $(seq 360); do schedd_env_ok && break; sleep 0.5; done   # (the master may wait ~30 s to restart it)
  schedd_env_ok || die "the restarted schedd's environment still lacks SCHEDD_ENVIRONMENT: see $ROOT/var/log/condor/SchedLog"
fi
for _ in $(seq 90); do
  in_root condor_status -af Name 2>/dev/null | grep -q . && in_root condor_q -totals >/dev/null 2>&1 && break
  sleep 1
done
in_root condor_status -af Name 2>/dev/null | grep -q . || die "no slot advertised: see $ROOT/var/log/condor/"
"$HERE/token.sh" "$TEST_USER"

# -- jim: in the chroot (blahpd's), and on the host for the test account
in_root "$CHROOT_SRC/tests/services/lib/jim-venv.sh" "$CHROOT_VENV" /var/log/jim-venv \
  || die "installing jim in the chroot failed (see $ROOT/var/log/jim-venv/pip.log)"
"$REPO/tests/services/lib/jim-venv.sh" "${JIM_TEST_VENV:-/opt/jim-test-venv}" /var/lib/jim-users-test

# -- smoke: a vanilla job of the test account, from inside the chroot, runs to completion
work=$(runuser -u "$TEST_USER" -- mktemp -d /tmp/jim-htc-smoke.XXXXXX)
in_root runuser -u "$TEST_USER" -- condor_submit -terse - >"$STATE/smoke.id" 2>"$STATE/log/smoke.err" <<SUB \
  || { cat "$STATE/log/smoke.err" >&2; die "condor_submit failed"; }
executable = /bin/echo
arguments = smoke
initialdir = $work
output = $work/out
error = $work/err
log = $work/log
queue
SUB
for _ in $(seq 120); do grep -q smoke "$work/out" 2>/dev/null && break; sleep 1; done
grep -q smoke "$work/out" 2>/dev/null || die "the smoke job did not run (cluster $(cat "$STATE/smoke.id")): see $ROOT/var/log/condor/"
rm -rf "$work"
log "HTCondor pool up on 127.0.0.1:$PORT in $(( SECONDS - T0 )) s; host clients: CONDOR_CONFIG=$STATE/condor_config.client"
