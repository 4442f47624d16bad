#!/usr/bin/env bash
# Start jim's multi-node test Slurm: a controller and $NNODES compute nodes
# (default 3), each in its own network namespace with its own host name and
# address on a bridge this script creates (default 10.77.0.0/24):
#
#   host          jimsc0 (bridge)  10.77.0.1    munged (unix socket only)
#   jimsc-ctl     jimctl           10.77.0.2    mariadbd (its 127.0.0.1), slurmdbd, slurmctld
#   jimsc-cnN     cnN              10.77.0.1N   slurmd of node cnN (and its jobs)
#
# Debian bookworm's slurm-wlm 22.05, all daemons as root, no systemd, every
# file under $JIM_TEST_SLURM_CLUSTER_STATE (default
# /var/tmp/jim-test-slurm-cluster); clients find the cluster through
# SLURM_CONF (exported by $STATE/env.sh). Coexists with ../slurm (own state
# dir, own munged; its daemons' ports live inside the namespaces).
#
# Idempotent: what runs is left alone, what is missing is created/started, a
# changed configuration restarts the Slurm daemons (jobs survive). Ends with a
# smoke test: one job on every node must COMPLETE there and be seen by sacct.
# Installs missing Debian packages. Knobs: see lib.sh.
# Usage:   tests/services/slurm-cluster/start.sh && . /var/tmp/jim-test-slurm-cluster/env.sh
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/lib.sh"
need_root
T0=$SECONDS

# --------------------------------------------------------------- packages
PKGS=(munge slurmctld slurmd slurmdbd slurm-client mariadb-server iproute2 util-linux)
BINS=(munged munge unmunge slurmctld slurmd slurmdbd sbatch squeue sacct sacctmgr scontrol sinfo
      mariadbd mariadb-install-db mariadb ip nsenter unshare)
missing=()
for b in "${BINS[@]}"; do command -v "$b" >/dev/null 2>&1 || missing+=("$b"); done
if [ "${#missing[@]}" -gt 0 ]; then
  [ "${JIM_TEST_SLURM_NO_INSTALL:-0}" = 1 ] && die "missing ${missing[*]} and JIM_TEST_SLURM_NO_INSTALL=1"
  log "installing ${PKGS[*]} (missing: ${missing[*]})"
  "$HERE/../lib/apt-install.sh" slurm-cluster "${PKGS[@]}" || die "apt-get failed"
  for b in "${BINS[@]}"; do command -v "$b" >/dev/null 2>&1 || die "install did not provide $b"; done
  log "packages installed in $(( SECONDS - T0 )) s"
fi

# --------------------------------------------------------------- layout
mkdir -p "$STATE"/{munge/sock,ctld,spool,log,run,jobs,db}
chmod 711 "$STATE" "$STATE/munge"     # munged wants o+x on every dir above its socket
chmod 755 "$STATE/munge/sock" "$LOGDIR" "$RUN" "$STATE/spool"
chmod 700 "$STATE/ctld" "$STATE/db"
chmod 1777 "$STATE/jobs"              # scratch cwd/output dir for test jobs of any user

# --------------------------------------------------------------- network
# Only our bridge, our veth pairs and our namespaces are ever touched.
route="$(ip -4 route show to "$NET.0/24" 2>/dev/null)" || route=""
case "$route" in ""|*"dev $BRIDGE "*) ;; *) die "$NET.0/24 is already routed elsewhere ($route): set JIM_TEST_SLURM_CLUSTER_NET";; esac
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  log "creating bridge $BRIDGE ($HOST_ADDR/24)"
  ip link add "$BRIDGE" type bridge
fi
ip addr replace "$HOST_ADDR/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
# plug_ns NS ADDR: namespace NS with lo up and eth0 = ADDR/24, the peer of a
# host-side veth named NS enslaved to the bridge
plug_ns() {
  local ns="$1" addr="$2"
  if ! ns_exists "$ns"; then
    ip link del "$ns" >/dev/null 2>&1 || true
    ip netns add "$ns"
  fi
  if ! ip link show "$ns" >/dev/null 2>&1; then
    ip -n "$ns" link del eth0 >/dev/null 2>&1 || true
    ip link add "$ns" type veth peer name eth0 netns "$ns"
  fi
  ip link set "$ns" master "$BRIDGE" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr replace "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
}
plug_ns "$CTL_NS" "$CTL_ADDR"
for n in "${NODES[@]}"; do plug_ns "$(node_ns "$n")" "$(node_addr "$n")"; done

# --------------------------------------------------------------- munge
# Own key and socket (a unix socket: reachable from every namespace).
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
write_if_changed() {
  local f="$1" mode="$2"
  cat > "$f.new"; chmod "$mode" "$f.new"
  if cmp -s "$f.new" "$f"; then rm -f "$f.new"; echo 0; else mv -f "$f.new" "$f"; echo 1; fi
}
node_lines="$(for n in "${NODES[@]}"; do
  echo "NodeName=$n NodeAddr=$(node_addr "$n") NodeHostname=$n CPUs=$CPUS RealMemory=$(( CPUS * MEM_PER_CPU )) State=UNKNOWN"
done)"
nodelist="$(IFS=,; echo "${NODES[*]}")"

conf_changed=$(write_if_changed "$CONF" 644 <<EOF
# Generated by jim's tests/services/slurm-cluster/start.sh: edits are
# overwritten, use the JIM_TEST_SLURM_CLUSTER_* knobs (lib.sh) instead.
ClusterName=$CLUSTER
SlurmctldHost=$CTL($CTL_ADDR)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK
StateSaveLocation=$STATE/ctld
# one slurmd per node on one file system: %n = the node's name
SlurmdSpoolDir=$STATE/spool/%n
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmdLogFile=$LOGDIR/slurmd-%n.log
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
MailProg=/bin/true
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$CTL_ADDR
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$SOCK
AccountingStoreFlags=job_comment
# memory is enforced without cgroups: slurmstepd samples every process of a step each second
# and kills a step whose memory exceeds its job's --mem (the job ends OUT_OF_MEMORY)
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherParams=OverMemoryKill
JobAcctGatherFrequency=task=1
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGDIR/jobcomp.txt
SlurmdParameters=config_overrides
SelectType=select/cons_tres
# CPUs and memory are consumable; a job that asks no memory gets DefMemPerCPU per CPU, so
# 1-CPU jobs still fill a node CPU by CPU
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=$MEM_PER_CPU
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
MaxJobCount=30000
MaxArraySize=10001
MinJobAge=$MIN_JOB_AGE
MessageTimeout=$MSG_TIMEOUT
KillWait=5
InactiveLimit=0
Waittime=0
SlurmctldTimeout=30
# a node whose slurmd stays silent this long is set DOWN and its jobs end
# NODE_FAIL (or are requeued unless submitted with --no-requeue)
SlurmdTimeout=$SLURMD_TIMEOUT
# a DOWN node comes back by itself once its slurmd registers again
ReturnToService=2
# partition "high" preempts jobs of partition "normal" when it needs their CPUs
PreemptType=preempt/partition_prio
PreemptMode=$PREEMPT_MODE
$node_lines
# LLN: least loaded node first, so that a few jobs already spread over the nodes
PartitionName=normal Nodes=$nodelist Default=YES MaxTime=INFINITE State=UP PriorityTier=1 LLN=YES PreemptMode=$PREEMPT_MODE
PartitionName=high   Nodes=$nodelist Default=NO  MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
${JIM_TEST_SLURM_CLUSTER_EXTRA_CONF:-}
EOF
)

dbd_changed=$(write_if_changed "$STATE/slurmdbd.conf" 600 <<EOF
# Generated by jim's tests/services/slurm-cluster/start.sh. slurmdbd has no
# -f: it reads slurmdbd.conf from the directory of \$SLURM_CONF.
AuthType=auth/munge
AuthInfo=socket=$SOCK
DbdHost=$CTL
DbdAddr=$CTL_ADDR
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

{ echo "# source me: points Slurm clients at jim's multi-node test cluster"
  echo "export SLURM_CONF=$CONF"
  echo "export JIM_TEST_SLURM_CLUSTER_STATE=$STATE"
} > "$STATE/env.sh"
chmod 644 "$STATE/env.sh"

running_slurm=()
for d in slurmctld "${NODES[@]/#/slurmd-}"; do alive "$d" && running_slurm+=("$d"); done
if [ "$conf_changed" = 1 ] && [ "${#running_slurm[@]}" -gt 0 ]; then
  log "slurm.conf changed: restarting ${running_slurm[*]}"
  signal_stop "${running_slurm[@]}"
fi
if [ "$dbd_changed" = 1 ] && alive slurmdbd; then
  log "slurmdbd.conf changed: restarting slurmdbd"
  signal_stop slurmdbd
fi
# slurmds of nodes beyond a smaller JIM_TEST_SLURM_CLUSTER_NODES
for f in "$RUN"/slurmd-cn*.pid; do
  [ -e "$f" ] || continue
  d="$(basename "$f" .pid)"; is_node "${d#slurmd-}" || signal_stop "$d"
done
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^jimsc-cn' || true); do
  is_node "${ns#jimsc-}" && continue
  log "removing namespace $ns (beyond $NNODES nodes)"
  kill_ns "$ns"; ip netns del "$ns" 2>/dev/null || true; ip link del "$ns" >/dev/null 2>&1 || true
done

# --------------------------------------------------------------- MariaDB (controller namespace)
if ! alive mariadbd; then
  if [ ! -d "$STATE/db/data/mysql" ]; then
    log "initialising the MariaDB data dir"
    mariadb-install-db --no-defaults --datadir="$STATE/db/data" --user=root \
      --auth-root-authentication-method=normal --skip-test-db >"$LOGDIR/mariadb-install.log" 2>&1 \
      || die "mariadb-install-db failed (see $LOGDIR/mariadb-install.log)"
  fi
  log "starting mariadbd on $CTL's 127.0.0.1:$DB_PORT"
  # mariadbd does not daemonize itself: detach it from this script
  setsid nsenter --net="/run/netns/$CTL_NS" -- mariadbd --no-defaults --datadir="$STATE/db/data" --user=root \
    --socket="$DBSOCK" --pid-file="$RUN/mariadbd.pid" --bind-address=127.0.0.1 --port="$DB_PORT" \
    --log-error="$LOGDIR/mariadbd.log" --skip-name-resolve \
    --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900 \
    </dev/null >/dev/null 2>&1 &
  wait_for 60 mariadb --no-defaults -S "$DBSOCK" -uroot -e 'select 1' \
    || die "mariadbd not answering (see $LOGDIR/mariadbd.log)"
  chmod 644 "$RUN/mariadbd.pid"
  mariadb --no-defaults -S "$DBSOCK" -uroot -e "
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'jim';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;" \
    || die "could not create the slurm database user"
fi

# --------------------------------------------------------------- slurmdbd
if ! alive slurmdbd; then
  log "starting slurmdbd on $CTL_ADDR:$DBD_PORT"
  in_ns "$CTL_NS" "$CTL" slurmdbd || die "slurmdbd failed (see $LOGDIR/slurmdbd.log)"
  wait_for 60 timeout 10 sacctmgr -n list cluster || die "slurmdbd not answering (see $LOGDIR/slurmdbd.log)"
fi
clusters="$(timeout 10 sacctmgr -n -P list cluster format=cluster 2>/dev/null)" || clusters=""
if ! grep -qx "$CLUSTER" <<<"$clusters"; then
  timeout 10 sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr add cluster $CLUSTER failed"
fi

# --------------------------------------------------------------- slurmctld, slurmds
if ! alive slurmctld; then
  log "starting slurmctld on $CTL_ADDR:$CTLD_PORT"
  in_ns "$CTL_NS" "$CTL" slurmctld -f "$CONF" || die "slurmctld failed (see $LOGDIR/slurmctld.log)"
fi
wait_for 30 ctld_answers || die "slurmctld not answering on $CTL_ADDR:$CTLD_PORT (see $LOGDIR/slurmctld.log)"
for n in "${NODES[@]}"; do mkdir -p "$STATE/spool/$n"; chmod 755 "$STATE/spool/$n"; start_slurmd "$n"; done
for n in "${NODES[@]}"; do ensure_node_up "$n" 40; done

# --------------------------------------------------------------- smoke test
# One job pinned to each node: it must run THERE (its host name), COMPLETE,
# and reach sacct.
ids=()
for n in "${NODES[@]}"; do
  out="$STATE/jobs/start-check-$n.out"; rm -f "$out"
  jid="$(sbatch --parsable -J jim-start-check -w "$n" -D "$STATE/jobs" -o "$out" --wrap hostname)" \
    || die "sbatch to node $n failed"
  case "$jid" in ''|*[!0-9]*) die "sbatch printed '$jid' instead of a job id";; esac
  ids+=("$jid")
done
idlist="$(IFS=,; echo "${ids[*]}")"
all_state() {
  local o; o="$("$@" 2>/dev/null)" || return 1
  [ "$(printf '%s\n' "$o" | sort -u)" = COMPLETED ]
}
wait_for 60 all_state squeue -h -t all -j "$idlist" -o %T \
  || die "smoke jobs $idlist did not complete: $(squeue -h -t all -j "$idlist" -o '%i %T %r %N' 2>&1 | tr '\n' ';')"
wait_for 30 all_state sacct -n -X -P -j "$idlist" -o State \
  || die "sacct does not see smoke jobs $idlist: $(sacct -n -X -P -j "$idlist" -o JobID,State 2>&1 | tr '\n' ';')"
for n in "${NODES[@]}"; do
  [ "$(cat "$STATE/jobs/start-check-$n.out" 2>/dev/null)" = "$n" ] \
    || die "the smoke job on $n did not report host name $n: $(head -c 200 "$STATE/jobs/start-check-$n.out" 2>&1)"
done
log "ready in $(( SECONDS - T0 )) s: . $STATE/env.sh   (SLURM_CONF=$CONF)"
