# Shared settings and helpers for the multi-node test Slurm's start.sh,
# stop.sh and ctl.sh (sourced, never run). Every knob is read here, once.
#
# Knobs (environment, all optional):
#   JIM_TEST_SLURM_CLUSTER_STATE    state dir (absolute)     [/var/tmp/jim-test-slurm-cluster]
#   JIM_TEST_SLURM_CLUSTER_NODES    number of compute nodes (1-50)        [3]
#   JIM_TEST_SLURM_CLUSTER_CPUS     CPUs declared per node                [8]
#   JIM_TEST_SLURM_CLUSTER_MEM_PER_CPU  MB declared per CPU (RealMemory is
#                                   CPUs x this; also DefMemPerCPU)       [1000]
#   JIM_TEST_SLURM_CLUSTER_NET      first three octets of the /24 on the
#                                   bridge                                [10.77.0]
#   JIM_TEST_SLURM_CLUSTER_SLURMD_TIMEOUT  SlurmdTimeout: a silent node is
#                                   set DOWN (its jobs NODE_FAIL) after this [10]
#   JIM_TEST_SLURM_CLUSTER_MSG_TIMEOUT     MessageTimeout                 [3]
#   JIM_TEST_SLURM_CLUSTER_PREEMPT_MODE    PreemptMode of partition
#                                   "normal" when "high" needs its CPUs   [REQUEUE]
#   JIM_TEST_SLURM_CLUSTER_MIN_JOB_AGE     MinJobAge                      [60]
#   JIM_TEST_SLURM_CLUSTER_EXTRA_CONF      lines appended to slurm.conf
#   JIM_TEST_SLURM_NO_INSTALL       1 = never run apt-get (shared with ../slurm)
#
# Ports never clash with the host's: every daemon except munged runs inside
# a network namespace and is reached over the bridge only.

# (the variables below are used by the scripts that source this file)
# shellcheck disable=SC2034

export PATH="/usr/sbin:/usr/bin:/sbin:/bin:$PATH"

STATE="${JIM_TEST_SLURM_CLUSTER_STATE:-/var/tmp/jim-test-slurm-cluster}"
NNODES="${JIM_TEST_SLURM_CLUSTER_NODES:-3}"
CPUS="${JIM_TEST_SLURM_CLUSTER_CPUS:-8}"
MEM_PER_CPU="${JIM_TEST_SLURM_CLUSTER_MEM_PER_CPU:-1000}"
NET="${JIM_TEST_SLURM_CLUSTER_NET:-10.77.0}"
SLURMD_TIMEOUT="${JIM_TEST_SLURM_CLUSTER_SLURMD_TIMEOUT:-10}"
MSG_TIMEOUT="${JIM_TEST_SLURM_CLUSTER_MSG_TIMEOUT:-3}"
PREEMPT_MODE="${JIM_TEST_SLURM_CLUSTER_PREEMPT_MODE:-REQUEUE}"
MIN_JOB_AGE="${JIM_TEST_SLURM_CLUSTER_MIN_JOB_AGE:-60}"

case "$STATE" in /*) ;; *) echo "JIM_TEST_SLURM_CLUSTER_STATE must be an absolute path" >&2; exit 2;; esac
case "$NNODES" in [1-9]|[1-4][0-9]|50) ;; *) echo "JIM_TEST_SLURM_CLUSTER_NODES must be 1-50" >&2; exit 2;; esac
case "$MEM_PER_CPU" in ''|*[!0-9]*|0*) echo "JIM_TEST_SLURM_CLUSTER_MEM_PER_CPU must be a number of MB" >&2; exit 2;; esac
case "$NET" in
  *[!0-9.]*|.*|*.|*..*) echo "JIM_TEST_SLURM_CLUSTER_NET must look like 10.77.0" >&2; exit 2;;
esac

# Ports inside the namespaces (distinct from ../slurm's all the same, so
# that a log line or a stray client never leaves any doubt which cluster it is)
CTLD_PORT=17917
SLURMD_PORT=17918
DBD_PORT=17919
DB_PORT=14406

CLUSTER=jimcluster        # ClusterName, also registered in slurmdbd
BRIDGE=jimsc0             # the bridge; the host's side has $NET.1/24
HOST_ADDR="$NET.1"
CTL=jimctl                # controller host name; its namespace is jimsc-ctl
CTL_NS=jimsc-ctl
CTL_ADDR="$NET.2"         # slurmctld, slurmdbd (mariadbd on its 127.0.0.1)
NODES=()                  # compute nodes cn1..cnN at $NET.11...
for ((i = 1; i <= NNODES; i++)); do NODES+=("cn$i"); done
node_ns() { echo "jimsc-$1"; }                       # namespace (and host-side veth) of node NAME
node_addr() { echo "$NET.$(( 10 + ${1#cn} ))"; }     # address of node NAME

CONF="$STATE/slurm.conf"            # slurmdbd.conf lives next to it
RUN="$STATE/run"
LOGDIR="$STATE/log"
SOCK="$STATE/munge/sock/munge.socket"
DBSOCK="$STATE/db/mysqld.sock"
export SLURM_CONF="$CONF"           # every Slurm command below talks to THIS cluster

log() { printf '[jim-test-slurm-cluster %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root (namespaces, bridge, daemons)"; }

# is_node NAME: NAME is one of our compute nodes
is_node() { local n; for n in "${NODES[@]}"; do [ "$n" = "$1" ] && return 0; done; return 1; }

# wait_for SECONDS CMD...: run CMD every 0.2 s until it succeeds; 1 on timeout.
wait_for() {
  local end=$(( SECONDS + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -ge "$end" ] && return 1
    sleep 0.2
  done
}

# in_ns NS HOSTNAME CMD...: run CMD inside network namespace NS, in a new UTS
# namespace whose host name is HOSTNAME. nsenter, not "ip netns exec": that
# one also remounts /sys in a new mount namespace, which would hide
# /sys/fs/cgroup from the daemons.
in_ns() {
  local ns="$1" host="$2"; shift 2
  # shellcheck disable=SC2016  # expanded by the inner sh
  nsenter --net="/run/netns/$ns" -- unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
}

# pid_of NAME: the PID of OUR daemon NAME (from $RUN/NAME.pid; slurmd-cnX for
# node cnX), or fail. "Ours": its command line or environment names $STATE/.
pid_of() {
  local f="$RUN/$1.pid" pid s
  [ -s "$f" ] || return 1
  pid="$(cat "$f" 2>/dev/null)" || return 1
  case "$pid" in ''|*[!0-9]*) return 1;; esac
  [ -r "/proc/$pid/cmdline" ] || return 1
  s="$( { tr '\0' '\n' < "/proc/$pid/cmdline"; tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null )" || true
  case "$s" in *"$STATE/"*) echo "$pid"; return 0;; esac
  return 1
}
alive() { pid_of "$1" >/dev/null; }

# signal_stop NAME...: SIGTERM each of our daemons NAME, wait up to 30 s, then
# SIGKILL what is left. Missing ones are fine.
signal_stop() {
  local name pid pids=() _ p left
  for name in "$@"; do
    if pid="$(pid_of "$name")"; then
      log "stopping $name ($pid)"
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$name:$pid")
    fi
  done
  for _ in $(seq 300); do
    left=0
    for p in "${pids[@]}"; do [ -d "/proc/${p#*:}" ] && left=1; done
    [ "$left" = 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do
    if [ -d "/proc/${p#*:}" ]; then
      log "${p%%:*} (${p#*:}) ignored SIGTERM for 30 s: SIGKILL"
      kill -KILL "${p#*:}" 2>/dev/null || true
    fi
  done
  for name in "$@"; do rm -f "$RUN/$name.pid"; done
}

# ns_exists NS: the named network namespace exists
ns_exists() { [ -e "/run/netns/$1" ] && ip netns list 2>/dev/null | grep -q "^$1\b"; }

# kill_ns NS: SIGKILL every process in network namespace NS (a node crash:
# slurmd, slurmstepd and every job process there), until none is left.
kill_ns() {
  local ns="$1" pids _
  ns_exists "$ns" || return 0
  for _ in $(seq 100); do
    pids="$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')" || pids=""
    [ -z "${pids// /}" ] && return 0
    # shellcheck disable=SC2086  # a list of PIDs
    kill -KILL $pids 2>/dev/null || true
    sleep 0.05
  done
  die "processes keep appearing in namespace $ns: $(ip netns pids "$ns" | tr '\n' ' ')"
}

# ctld_answers: the controller on the bridge answers with OUR config
ctld_answers() {
  local out
  out="$(timeout 10 scontrol show config 2>/dev/null)" || return 1
  case "$out" in *"StateSaveLocation       = $STATE/ctld"*) return 0;; esac
  return 1
}

# node_state NAME: sinfo's state of node NAME (e.g. idle, down*, mixed)
node_state() { timeout 10 sinfo -h -n "$1" -o %T 2>/dev/null | head -1; }

# node_ok NAME: node NAME is schedulable
node_ok() {
  case "$(node_state "$1")" in idle|mixed|allocated|completing) return 0;; esac
  return 1
}

# start_slurmd NAME: start node NAME's slurmd in its namespace unless running
start_slurmd() {
  local n="$1"
  alive "slurmd-$n" && return 0
  ns_exists "$(node_ns "$n")" || die "namespace $(node_ns "$n") missing: run start.sh"
  # leftovers of a killed node (processes in its namespace) go first
  kill_ns "$(node_ns "$n")"
  log "starting slurmd of $n on $(node_addr "$n"):$SLURMD_PORT"
  in_ns "$(node_ns "$n")" "$n" slurmd -f "$CONF" -N "$n" || die "slurmd of $n failed (see $LOGDIR/slurmd-$n.log)"
}

# ensure_node_up NAME [SECONDS]: wait until node NAME is usable; a drained or
# DOWN node is resumed at once, one in any other unusable state after 10 s.
ensure_node_up() {
  local n="$1" end=$(( SECONDS + ${2:-30} )) st resumed=0 t0=$SECONDS
  while :; do
    node_ok "$n" && return 0
    st="$(node_state "$n")" || st=""
    if [ "$resumed" = 0 ]; then
      case "$st" in
        drain*|down) resumed=1;;
        *) [ $(( SECONDS - t0 )) -ge 10 ] && resumed=1;;
      esac
      if [ "$resumed" = 1 ]; then
        log "node $n is '$(sinfo -h -n "$n" -o '%T %E' 2>&1 | head -1)': resuming it"
        scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
      fi
    fi
    [ "$SECONDS" -ge "$end" ] && die "node $n not usable: $(sinfo -h -n "$n" -o '%T %E' 2>&1 | head -1) (see $LOGDIR/)"
    sleep 0.2
  done
}
