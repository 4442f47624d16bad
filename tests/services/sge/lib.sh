# shellcheck shell=bash
# Shared settings and helpers for start.sh, stop.sh, ctl.sh and
# record-outputs.sh (sourced, never run). Every knob is read here, once, so
# that all scripts agree on paths and ports.
#
# Knobs (environment, all optional):
#   JIM_TEST_SGE_STATE         state dir (absolute)              [/var/tmp/jim-test-sge]
#   JIM_TEST_SGE_QMASTER_PORT  sge_qmaster port                  [17444]
#   JIM_TEST_SGE_EXECD_PORT    sge_execd port                    [17445]
#   JIM_TEST_SGE_SLOTS         slots of the one queue (jobs at once) [32]
#   JIM_TEST_SGE_NO_INSTALL    1 = never run apt-get             [0]
# (The stock ports 6444/6445 and the 16444/16445 of ../shared/services/sge
# are avoided on purpose: another Grid Engine may run on the same machine.)

# (the variables below are used by the scripts that source this file)
# shellcheck disable=SC2034

# Daemons in /usr/sbin must be found even from a minimal PATH (cron, sudo).
export PATH="/usr/sbin:/usr/bin:/sbin:/bin:$PATH"

STATE="${JIM_TEST_SGE_STATE:-/var/tmp/jim-test-sge}"
QPORT="${JIM_TEST_SGE_QMASTER_PORT:-17444}"
EPORT="${JIM_TEST_SGE_EXECD_PORT:-17445}"
SLOTS="${JIM_TEST_SGE_SLOTS:-32}"
CELL=jimtest                        # our cell; Debian's "default" cell is never used
QUEUE=all.q                         # the one cluster queue
PE=smp                              # its parallel environment: a job's slots on one host
SGEBIN=/usr/lib/gridengine          # the packaged client and daemon binaries

case "$STATE" in /*) ;; *) echo "JIM_TEST_SGE_STATE must be an absolute path" >&2; exit 2;; esac

export SGE_ROOT="$STATE/root" SGE_CELL="$CELL" SGE_QMASTER_PORT="$QPORT" SGE_EXECD_PORT="$EPORT"
COMMON="$SGE_ROOT/$CELL/common"     # bootstrap, act_qmaster, host_aliases, accounting
RUN="$STATE/run"                    # links to the daemons' PID files
QMASTER_PIDFILE="$STATE/spool/qmaster/qmaster.pid"
# The clients are called from $SGE_ROOT/bin/<arch> (as a site's settings.sh
# does), never through /usr/bin/q*: a PBS/Torque "qsub" may be on PATH too.
if [ -x /usr/share/gridengine/util/arch ]; then
  SGE_ARCH="$(/usr/share/gridengine/util/arch)"
  export SGE_ARCH PATH="$SGE_ROOT/bin/$SGE_ARCH:$PATH"
fi

log() { printf '[jim-test-sge %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root (the daemons run as root and are signalled through PID files)"; }

# wait_for SECONDS CMD...: run CMD every 0.2 s until it succeeds; 1 on timeout.
wait_for() {
  local end=$(( SECONDS + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -ge "$end" ] && return 1
    sleep 0.2
  done
}

# pid_from FILE: the PID in FILE if it is OUR daemon (its command line or
# environment names $STATE/), so that a recycled PID or another Grid
# Engine's daemon is never touched.
pid_from() {
  local f="$1" pid s
  [ -s "$f" ] || return 1
  pid="$(cat "$f" 2>/dev/null)" || return 1
  case "$pid" in ''|*[!0-9]*) return 1;; esac
  [ -r "/proc/$pid/cmdline" ] || return 1
  # (no "| grep -q": with pipefail an early grep exit would fail the pipe)
  s="$( { tr '\0' '\n' < "/proc/$pid/cmdline"; tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null )" || true
  case "$s" in *"$STATE/"*) echo "$pid"; return 0;; esac
  # a non-root caller cannot read a root daemon's environment: accept the name
  if [ "$(id -u)" != 0 ] && [ ! -r "/proc/$pid/environ" ]; then
    case "$(cat "/proc/$pid/comm" 2>/dev/null)" in sge_qmaster|sge_execd) echo "$pid"; return 0;; esac
  fi
  return 1
}

# execd_pidfile: sge_execd spools under the name it resolves for itself
# (here "localhost", the reverse name of 127.0.0.1), not necessarily the
# host name: find its pid file.
execd_pidfile() {
  local f
  for f in "$STATE"/spool/execd/*/execd.pid; do [ -e "$f" ] && { echo "$f"; return 0; }; done
  return 1
}
qmaster_pid() { pid_from "$QMASTER_PIDFILE"; }
execd_pid() { local f; f="$(execd_pidfile)" || return 1; pid_from "$f"; }

# stop_pid NAME PID: SIGTERM, wait up to 30 s, then SIGKILL.
stop_pid() {
  local name="$1" pid="$2" _
  log "stopping $name ($pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 300); do [ -d "/proc/$pid" ] || return 0; sleep 0.1; done
  log "$name ($pid) ignored SIGTERM for 30 s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  sleep 0.5
}

# port_answers PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# qmaster_ok: our qmaster answers (qconf -sss prints the scheduler host).
qmaster_ok() { timeout 10 qstat -u '*' >/dev/null 2>&1; }

# queue_ok: the one queue instance is usable (no state flags: not
# disabled, unknown, alarm or error).
queue_ok() {
  timeout 10 qstat -f -q "$QUEUE" 2>/dev/null |
    awk -v q="$QUEUE@" 'index($1, q) == 1 && NF >= 5 && $6 == "" {ok = 1} END {exit !ok}'
}

# start_qmaster: start sge_qmaster unless ours runs; wait until it answers.
start_qmaster() {
  qmaster_pid >/dev/null && return 0
  if port_answers "$QPORT"; then die "port $QPORT is taken by a process that is not our sge_qmaster"; fi
  local host names n
  host="$("$SGEBIN/gethostname" -name 2>/dev/null || hostname)"
  # 127.0.0.1 reverse-resolves to "localhost" while gethostname() says
  # "$host"; without this alias file commlib refuses every client with
  # "access denied (client IP resolved to host name "localhost". This is not
  # identical to clients host name "$host")".
  names="$host"
  for n in localhost "$(hostname -s 2>/dev/null)" "$(hostname -f 2>/dev/null)"; do
    case " $names " in *" $n "*) ;; *) [ -n "$n" ] && names="$names $n";; esac
  done
  echo "$names" > "$COMMON/host_aliases"
  echo "$host" > "$COMMON/act_qmaster"
  log "starting sge_qmaster on port $QPORT"
  ( cd "$STATE/spool/qmaster" && /usr/sbin/sge_qmaster ) || die "sge_qmaster failed (see $STATE/spool/qmaster/messages)"
  wait_for 30 qmaster_ok || die "sge_qmaster not answering (see $STATE/spool/qmaster/messages)"
  mkdir -p "$RUN"; ln -sfn "$QMASTER_PIDFILE" "$RUN/sge_qmaster.pid"
}

# stop_qmaster: SIGTERM our qmaster and wait until it has exited (~7 s:
# it waits for its threads). Running jobs continue under sge_execd.
stop_qmaster() {
  local pid
  pid="$(qmaster_pid)" || return 0
  stop_pid sge_qmaster "$pid"
  rm -f "$RUN/sge_qmaster.pid"
}
