#!/usr/bin/env bash
# Start jim's private single-node Slurm for tests: Debian bookworm's
# slurm-wlm 22.05 with its own munged, MariaDB, slurmdbd, slurmctld and slurmd,
# all as root, without systemd, every file under $JIM_TEST_SLURM_STATE
# (default /var/tmp/jim-test-slurm). /etc/slurm is never written: clients
# find the cluster through SLURM_CONF, exported by $STATE/env.sh.
#
# Idempotent: daemons already running from this state dir are left alone;
# missing ones are started; a changed slurm.conf/slurmdbd.conf (different
# knobs) restarts the daemons that read it (queued and running jobs survive:
# slurmctld saves its state on SIGTERM). Installs missing Debian packages.
# Ends with a smoke test: one trivial job per partition must COMPLETE and be
# seen by sacct. Exit 0 = cluster usable.
#
# Knobs: see lib.sh (ports, CPUs, MinJobAge, MessageTimeout, extra config).
# Usage:   tests/services/slurm/start.sh && . /var/tmp/jim-test-slurm/env.sh
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/lib.sh"
need_root
T0=$SECONDS

# --------------------------------------------------------------- packages
# munge: munged/munge/unmunge; slurm-client: sbatch squeue sacct sacctmgr ...
# mariadb-server brings mariadb-install-db and the mariadb client.
PKGS=(munge slurmctld slurmd slurmdbd slurm-client mariadb-server)
BINS=(munged munge unmunge slurmctld slurmd slurmdbd sbatch squeue sacct sacctmgr scontrol
      mariadbd mariadb-install-db mariadb)
missing=()
for b in "${BINS[@]}"; do command -v "$b" >/dev/null 2>&1 || missing+=("$b"); done
if [ "${#missing[@]}" -gt 0 ]; then
  [ "${JIM_TEST_SLURM_NO_INSTALL:-0}" = 1 ] && die "missing ${missing[*]} and JIM_TEST_SLURM_NO_INSTALL=1"
  log "installing ${PKGS[*]} (missing: ${missing[*]})"
  export DEBIAN_FRONTEND=noninteractive
  APT=(apt-get -o DPkg::Lock::Timeout=600 -o Dpkg::Options::=--force-confdef
       -o Dpkg::Options::=--force-confold -y -q)
  # The packages' postinst scripts would start the distro's own munge,
  # mariadb, slurm* services on the stock ports. policy-rc.d exit 101 tells
  # invoke-rc.d not to; add one only for the duration of the install.
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d; made_policy=1
  fi
  aptlog="$(mktemp /tmp/jim-test-slurm-apt.XXXXXX)"
  rc=0
  # try with the current package lists first; on a fresh machine (no lists)
  # or with stale lists (404) the install fails: then update and retry
  if ! "${APT[@]}" install --no-install-recommends "${PKGS[@]}" >"$aptlog" 2>&1; then
    log "apt-get install failed with the current lists: apt-get update, retry"
    { "${APT[@]}" update && "${APT[@]}" install --no-install-recommends "${PKGS[@]}"; } >>"$aptlog" 2>&1 || rc=$?
  fi
  [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ "$rc" = 0 ] || { tail -25 "$aptlog" >&2; die "apt-get failed (log: $aptlog)"; }
  rm -f "$aptlog"
  for b in "${BINS[@]}"; do command -v "$b" >/dev/null 2>&1 || die "install did not provide $b"; done
  log "packages installed in $(( SECONDS - T0 )) s"
fi

# --------------------------------------------------------------- layout
mkdir -p "$STATE"/{munge/sock,ctld,spool,log,run,jobs,db}
# munged refuses a socket unless every dir above it has o+x; 0711 lets other
# users reach slurm.conf, env.sh and the socket by name without listing.
chmod 711 "$STATE" "$STATE/munge"
chmod 755 "$STATE/munge/sock" "$LOGDIR" "$RUN"
chmod 700 "$STATE/ctld" "$STATE/db"
# slurmd keeps job scripts under SlurmdSpoolDir; jobs of unprivileged users
# must be able to traverse it (slurmd makes it 0755 itself; never tighten it)
chmod 755 "$STATE/spool"
chmod 1777 "$STATE/jobs"     # scratch cwd/output dir for test jobs of any user

# --------------------------------------------------------------- munge
# Own key and socket, so another munged (the distro's, another Slurm's) is
# never involved. AuthInfo/AccountingStoragePass point Slurm at this socket.
if ! alive munged; then
  [ -s "$STATE/munge/munge.key" ] || dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$STATE/munge/munge.key"
  rm -f "$SOCK" "$SOCK.lock"
  log "starting munged"
  munged --socket="$SOCK" --key-file="$STATE/munge/munge.key" \
         --log-file="$LOGDIR/munged.log" --pid-file="$RUN/munged.pid" \
         --seed-file="$STATE/munge/munged.seed" --num-threads=4 \
    || die "munged failed (see $LOGDIR/munged.log)"
  wait_for 10 bash -c "munge -S '$SOCK' -n | unmunge -S '$SOCK'" \
    || die "munged not answering (see $LOGDIR/munged.log)"
fi

# --------------------------------------------------------------- configs
# write_if_changed FILE MODE < content: prints 1 if FILE changed, else 0.
write_if_changed() {
  local f="$1" mode="$2"
  cat > "$f.new"; chmod "$mode" "$f.new"
  if cmp -s "$f.new" "$f"; then rm -f "$f.new"; echo 0; else mv -f "$f.new" "$f"; echo 1; fi
}

conf_changed=$(write_if_changed "$CONF" 644 <<EOF
# Generated by jim's tests/services/slurm/start.sh: edits are overwritten,
# use the JIM_TEST_SLURM_* knobs (lib.sh) instead.
ClusterName=$CLUSTER
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
# daemons run as root; jobs run as whoever submits them (root included:
# DisableRootJobs is NO by default)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups and no systemd in containers/CI: plain /proc process tracking.
# (no cgroup.conf at all: "CgroupPlugin=disabled" is not valid in 22.05)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
MailProg=/bin/true
# accounting through slurmdbd + MariaDB so that sacct works. Enforcement is
# off: users need no association. The munge socket for slurmdbd connections
# is taken from AccountingStoragePass, not from AuthInfo.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$SOCK
# sacct's Comment column stays empty unless the comment is stored
AccountingStoreFlags=job_comment
JobAcctGatherType=jobacct_gather/none
# plus a plain-text final record of every job (independent of accounting)
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGDIR/jobcomp.txt
# many tiny jobs on a 2-core machine: declare $CPUS CPUs (config_overrides,
# else slurmd drains a node whose config exceeds the hardware), 1 CPU/job
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# start jobs at once (stock batch_sched_delay=3 delays each start by <= 3 s)
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
MaxJobCount=30000
MaxArraySize=10001
# finished jobs leave squeue/scontrol this many seconds after they end
MinJobAge=$MIN_JOB_AGE
# also how long a client waits for a dead slurmctld (about MessageTimeout-1 s)
MessageTimeout=$MSG_TIMEOUT
KillWait=5
InactiveLimit=0
Waittime=0
SlurmctldTimeout=30
SlurmdTimeout=60
# a DOWN node comes back by itself once its slurmd registers
ReturnToService=2
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=$CPUS RealMemory=1000 State=UNKNOWN
# two queues on the same node so that queue selection can be tested
PartitionName=debug Nodes=$NODE Default=YES MaxTime=60 State=UP OverSubscribe=NO
PartitionName=long  Nodes=$NODE Default=NO MaxTime=INFINITE State=UP OverSubscribe=NO
${JIM_TEST_SLURM_EXTRA_CONF:-}
EOF
)

dbd_changed=$(write_if_changed "$STATE/slurmdbd.conf" 600 <<EOF
# Generated by jim's tests/services/slurm/start.sh. slurmdbd has no -f:
# it reads slurmdbd.conf from the directory of \$SLURM_CONF.
AuthType=auth/munge
AuthInfo=socket=$SOCK
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
DebugLevel=info
LogFile=$LOGDIR/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=jim
StorageLoc=slurm_acct_db
EOF
)

{ echo "# source me: points Slurm clients at jim's test cluster"
  echo "export SLURM_CONF=$CONF"
  echo "export JIM_TEST_SLURM_STATE=$STATE"
} > "$STATE/env.sh"
chmod 644 "$STATE/env.sh"

if [ "$conf_changed" = 1 ] && { alive slurmd || alive slurmctld; }; then
  log "slurm.conf changed: restarting slurmd and slurmctld"
  signal_stop slurmd slurmctld
fi
if [ "$dbd_changed" = 1 ] && alive slurmdbd; then
  log "slurmdbd.conf changed: restarting slurmdbd"
  signal_stop slurmdbd
fi

# --------------------------------------------------------------- MariaDB
if ! alive mariadbd; then
  port_answers "$DB_PORT" && die "port $DB_PORT is taken by a process that is not our mariadbd"
  if [ ! -d "$STATE/db/data/mysql" ]; then
    log "initialising the MariaDB data dir"
    mariadb-install-db --no-defaults --datadir="$STATE/db/data" --user=root \
      --auth-root-authentication-method=normal --skip-test-db >"$LOGDIR/mariadb-install.log" 2>&1 \
      || die "mariadb-install-db failed (see $LOGDIR/mariadb-install.log)"
  fi
  log "starting mariadbd on 127.0.0.1:$DB_PORT"
  # mariadbd does not daemonize itself: detach it from this script
  setsid mariadbd --no-defaults --datadir="$STATE/db/data" --user=root --socket="$DBSOCK" \
    --pid-file="$RUN/mariadbd.pid" --bind-address=127.0.0.1 --port="$DB_PORT" \
    --log-error="$LOGDIR/mariadbd.log" --skip-name-resolve \
    --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900 \
    </dev/null >/dev/null 2>&1 &
  wait_for 60 mariadb --no-defaults -S "$DBSOCK" -uroot -e 'select 1' \
    || die "mariadbd not answering (see $LOGDIR/mariadbd.log)"
  chmod 644 "$RUN/mariadbd.pid"   # written 0660: let "ctl.sh status" read it as any user
  mariadb --no-defaults -S "$DBSOCK" -uroot -e "
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'jim';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;" \
    || die "could not create the slurm database user"
fi

# --------------------------------------------------------------- slurmdbd
if ! alive slurmdbd; then
  port_answers "$DBD_PORT" && die "port $DBD_PORT is taken by a process that is not our slurmdbd"
  log "starting slurmdbd on 127.0.0.1:$DBD_PORT"
  slurmdbd || die "slurmdbd failed (see $LOGDIR/slurmdbd.log)"   # finds slurmdbd.conf via SLURM_CONF
  wait_for 60 timeout 10 sacctmgr -n list cluster || die "slurmdbd not answering (see $LOGDIR/slurmdbd.log)"
fi
# slurmctld only sends job records for a cluster that slurmdbd knows
clusters="$(timeout 10 sacctmgr -n -P list cluster format=cluster 2>/dev/null)" || clusters=""
if ! grep -qx "$CLUSTER" <<<"$clusters"; then
  timeout 10 sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr add cluster $CLUSTER failed"
fi

# --------------------------------------------------------------- slurmctld, slurmd
start_ctld
if ! alive slurmd; then
  port_answers "$SLURMD_PORT" && die "port $SLURMD_PORT is taken by a process that is not our slurmd"
  log "starting slurmd on 127.0.0.1:$SLURMD_PORT"
  slurmd -f "$CONF" -N "$NODE" || die "slurmd failed (see $LOGDIR/slurmd.log)"
fi
ensure_node_up 40

# --------------------------------------------------------------- smoke test
# One trivial job per partition as root, and one as the unprivileged user
# "nobody" (tests may run as either); each must COMPLETE in squeue and then
# show up as COMPLETED in sacct (records reach slurmdbd ~1 s after the end).
ids=()
for p in debug long nobody; do
  out="$STATE/jobs/start-check-$p.out"; rm -f "$out"
  # (not -Q: it also swallows the job id that --parsable prints)
  args=(sbatch --parsable -J jim-start-check -D "$STATE/jobs" -o "$out" --wrap 'echo slurm-ok')
  case "$p" in
    nobody) jid="$(cd / && runuser -u nobody -- env SLURM_CONF="$CONF" "${args[@]}")" \
              || die "sbatch as user nobody failed";;
    *)      jid="$("${args[@]}" -p "$p")" || die "sbatch to partition $p failed";;
  esac
  case "$jid" in ''|*[!0-9]*) die "sbatch printed '$jid' instead of a job id";; esac
  ids+=("$jid")
done
idlist="$(IFS=,; echo "${ids[*]}")"
all_state() { # all_state CMD...: every line of CMD's output is COMPLETED
  local o; o="$("$@" 2>/dev/null)" || return 1
  [ "$(printf '%s\n' "$o" | sort -u)" = COMPLETED ]
}
wait_for 60 all_state squeue -h -t all -j "$idlist" -o %T \
  || die "smoke jobs $idlist did not complete: $(squeue -h -t all -j "$idlist" -o '%i %T %r' 2>&1 | tr '\n' ';')"
wait_for 30 all_state sacct -n -X -P -j "$idlist" -o State \
  || die "sacct does not see smoke jobs $idlist: $(sacct -n -X -P -j "$idlist" -o JobID,State 2>&1 | tr '\n' ';')"
for p in debug long nobody; do
  grep -q slurm-ok "$STATE/jobs/start-check-$p.out" || die "smoke job output missing in $STATE/jobs/start-check-$p.out"
done
log "ready in $(( SECONDS - T0 )) s: . $STATE/env.sh   (SLURM_CONF=$CONF)"
