# Shared settings and helpers for start.sh, stop.sh, ctl.sh and
# record-outputs.sh (sourced, never run). Every knob is read here, once, so
# that all scripts agree on paths and ports.
#
# Knobs (environment, all optional):
#   JIM_TEST_SLURM_STATE        state dir (absolute)            [/var/tmp/jim-test-slurm]
#   JIM_TEST_SLURM_CTLD_PORT    slurmctld port                  [17817]
#   JIM_TEST_SLURM_SLURMD_PORT  slurmd port                     [17818]
#   JIM_TEST_SLURM_DBD_PORT     slurmdbd port                   [17819]
#   JIM_TEST_SLURM_DB_PORT      MariaDB port (127.0.0.1 only)   [14306]
#   JIM_TEST_SLURM_CPUS         CPUs declared on the one node   [32]
#   JIM_TEST_SLURM_MIN_JOB_AGE  seconds a finished job stays in squeue [30]
#   JIM_TEST_SLURM_MSG_TIMEOUT  MessageTimeout; a client hangs about this
#                               long minus 1 s when slurmctld is down [5]
#   JIM_TEST_SLURM_EXTRA_CONF   lines appended verbatim to slurm.conf (a later
#                               duplicate key overrides an earlier one)
#   JIM_TEST_SLURM_NO_INSTALL   1 = never run apt-get        [0]
# (The stock ports 6817-6819/3306 and the shared recipe's 16817-16819/13306
# are avoided on purpose: other Slurms may run on the same machine.)

# (the variables below are used by the scripts that source this file)
# shellcheck disable=SC2034

# Daemons in /usr/sbin must be found even from a minimal PATH (cron, sudo).
export PATH="/usr/sbin:/usr/bin:/sbin:/bin:$PATH"

STATE="${JIM_TEST_SLURM_STATE:-/var/tmp/jim-test-slurm}"
CTLD_PORT="${JIM_TEST_SLURM_CTLD_PORT:-17817}"
SLURMD_PORT="${JIM_TEST_SLURM_SLURMD_PORT:-17818}"
DBD_PORT="${JIM_TEST_SLURM_DBD_PORT:-17819}"
DB_PORT="${JIM_TEST_SLURM_DB_PORT:-14306}"
CPUS="${JIM_TEST_SLURM_CPUS:-32}"
MIN_JOB_AGE="${JIM_TEST_SLURM_MIN_JOB_AGE:-30}"
MSG_TIMEOUT="${JIM_TEST_SLURM_MSG_TIMEOUT:-5}"

NODE=jimnode          # the one compute node (NodeAddr 127.0.0.1)
CLUSTER=jimtest       # ClusterName, also registered in slurmdbd

CONF="$STATE/slurm.conf"            # slurmdbd.conf lives next to it (slurmdbd has no -f)
RUN="$STATE/run"                    # PID files
LOGDIR="$STATE/log"
SOCK="$STATE/munge/sock/munge.socket"
DBSOCK="$STATE/db/mysqld.sock"
export SLURM_CONF="$CONF"           # every Slurm command below talks to OUR cluster

case "$STATE" in /*) ;; *) echo "JIM_TEST_SLURM_STATE must be an absolute path" >&2; exit 2;; esac

log() { printf '[jim-test-slurm %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root (daemons run as root and are signalled through PID files)"; }

# wait_for SECONDS CMD...: run CMD every 0.2 s until it succeeds; 1 on timeout.
wait_for() {
  local end=$(( SECONDS + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -ge "$end" ] && return 1
    sleep 0.2
  done
}

# pid_of NAME: the PID of OUR daemon NAME (from $RUN/NAME.pid), or fail.
# "Ours" means the process's command line or environment names $STATE/, so a
# recycled PID or another Slurm's daemon of the same name is never touched.
pid_of() {
  local f="$RUN/$1.pid" pid s
  [ -s "$f" ] || return 1
  pid="$(cat "$f" 2>/dev/null)" || return 1
  case "$pid" in ''|*[!0-9]*) return 1;; esac
  [ -r "/proc/$pid/cmdline" ] || return 1
  # (no "| grep -q": with pipefail an early grep exit would fail the pipe)
  s="$( { tr '\0' '\n' < "/proc/$pid/cmdline"; tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null )" || true
  case "$s" in *"$STATE/"*) echo "$pid"; return 0;; esac
  # A non-root caller cannot read a root daemon's environment (slurmdbd is
  # recognised only by it): there, accept a process of the right name.
  if [ "$(id -u)" != 0 ] && [ ! -r "/proc/$pid/environ" ] \
     && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ]; then
    echo "$pid"; return 0
  fi
  return 1
}
alive() { pid_of "$1" >/dev/null; }

# signal_stop NAME...: SIGTERM each of our daemons NAME (in parallel), wait up
# to 30 s for all of them to exit, SIGKILL what is left. Missing ones are fine.
signal_stop() {
  local name pid pids=() _
  for name in "$@"; do
    if pid="$(pid_of "$name")"; then
      log "stopping $name ($pid)"
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$name:$pid")
    fi
  done
  for _ in $(seq 300); do
    local left=0 p
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

# port_answers PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ctld_is_ours: the controller answering on our port runs with OUR config
# (StateSaveLocation in our state dir), not some other Slurm on that port.
ctld_is_ours() {
  local out
  out="$(timeout 10 scontrol show config 2>/dev/null)" || return 1
  case "$out" in *"StateSaveLocation       = $STATE/ctld"*) return 0;; esac
  return 1
}

# node_ok: our node is schedulable (not down/drained/unknown).
node_ok() {
  case "$(timeout 10 sinfo -h -n "$NODE" -o %T 2>/dev/null | sort -u)" in
    idle|mixed|allocated|completing) return 0;;
  esac
  return 1
}

# ensure_node_up [SECONDS]: wait until our node is usable. A drained or
# admin-DOWN node (e.g. DRAIN "Duplicate jobid" after a slurmctld crash) is
# resumed at once; one in any other unusable state (e.g. "down*", slurmd not
# registered yet) after 10 s.
ensure_node_up() {
  local end=$(( SECONDS + ${1:-30} )) st resumed=0 t0=$SECONDS
  while :; do
    node_ok && return 0
    st="$(timeout 10 sinfo -h -n "$NODE" -o %T 2>/dev/null | head -1)" || st=""
    if [ "$resumed" = 0 ]; then
      case "$st" in
        drain*|down) resumed=1;;
        *) [ $(( SECONDS - t0 )) -ge 10 ] && resumed=1;;
      esac
      if [ "$resumed" = 1 ]; then
        log "node is '$(sinfo -h -n "$NODE" -o '%T %E' 2>&1 | head -1)': resuming it"
        scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true
      fi
    fi
    [ "$SECONDS" -ge "$end" ] && die "node not usable: $(sinfo -h -n "$NODE" -o '%T %E' 2>&1 | head -1) (see $LOGDIR/)"
    sleep 0.2
  done
}

# start_ctld: start slurmctld (recovering saved jobs: no -c) unless running,
# and wait until it answers. Used by start.sh and ctl.sh start-ctld.
start_ctld() {
  alive slurmctld && return 0
  if port_answers "$CTLD_PORT"; then
    die "port $CTLD_PORT is taken by a process that is not our slurmctld"
  fi
  log "starting slurmctld on port $CTLD_PORT"
  slurmctld -f "$CONF" || die "slurmctld failed to start (see $LOGDIR/slurmctld.log)"
  wait_for 30 ctld_is_ours || die "slurmctld not answering (see $LOGDIR/slurmctld.log)"
}

# pending_completions: batch steps whose job script has exited but whose
# slurmstepd is still alive, i.e. still trying to tell slurmctld that the job
# ended (it retries every 15 s + up to MessageTimeout while slurmctld is down).
# Prints their job ids. slurmstepd's process title is "slurmstepd: [JOBID.batch]".
pending_completions() {
  local d pid title kids
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    title="$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null)" || continue
    case "$title" in "slurmstepd: ["*".batch]"*) ;; *) continue;; esac
    kids="$(cat "$d"/task/*/children 2>/dev/null | tr -d ' \n')" || kids=""
    if [ -z "$kids" ]; then
      # ignore a step that has only just started and not forked its child yet
      local age=$(( $(cut -d' ' -f1 /proc/uptime | cut -d. -f1) - $(awk '{print int($22/100)}' "$d/stat" 2>/dev/null || echo 0) ))
      [ "$age" -ge 2 ] || continue
      title="${title#slurmstepd: [}"; echo "${title%%.batch]*}"
    fi
  done
}
