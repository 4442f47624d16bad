#!/usr/bin/env bash
# Start jim's private single-host Grid Engine for tests: Debian bookworm's
# gridengine 8.1.9 (sge_qmaster + sge_execd, both as root, no systemd) in a
# cell of its own: SGE_ROOT=$STATE/root, SGE_CELL=jimtest, BerkeleyDB spool,
# accounting file and logs under $JIM_TEST_SGE_STATE (default
# /var/tmp/jim-test-sge), on ports 17444/17445. Debian's "default" cell
# and /etc are never written: clients find the cell through the variables
# exported by $STATE/env.sh.
#
# Idempotent: daemons already running from this state dir are left alone;
# missing ones are started. Installs missing Debian packages. Ends with a
# smoke test: one job as root and one as nobody must run and be in qacct.
# Exit 0 = cell usable.
#
# Knobs: see lib.sh (state dir, ports, slots).
# Usage:   tests/services/sge/start.sh && . /var/tmp/jim-test-sge/env.sh
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/lib.sh"
need_root
T0=$SECONDS

# --------------------------------------------------------------- packages
# gridengine-client also ships /usr/bin/q* wrapper scripts (it conflicts with
# slurm-wlm-torque and torque-client, which ship /usr/bin/qsub too); jim and
# these scripts call the binaries in $SGE_ROOT/bin/<arch> instead.
PKGS=(gridengine-master gridengine-exec gridengine-client)
if [ ! -x /usr/sbin/sge_qmaster ] || [ ! -x /usr/sbin/sge_execd ] || [ ! -x "$SGEBIN/qsub" ]; then
  [ "${JIM_TEST_SGE_NO_INSTALL:-0}" = 1 ] && die "gridengine missing and JIM_TEST_SGE_NO_INSTALL=1"
  log "installing ${PKGS[*]}"
  "$HERE/../lib/apt-install.sh" sge "${PKGS[@]}" || die "apt-get failed"
  log "packages installed in $(( SECONDS - T0 )) s"
  # lib.sh could not set SGE_ARCH/PATH before the install
  SGE_ARCH="$(/usr/share/gridengine/util/arch)"
  export SGE_ARCH PATH="$SGE_ROOT/bin/$SGE_ARCH:$PATH"
fi
for b in /usr/sbin/sge_qmaster /usr/sbin/sge_execd "$SGEBIN/qsub" "$SGEBIN/qstat" "$SGEBIN/qacct" "$SGEBIN/qdel" \
         "$SGEBIN/qconf" "$SGEBIN/spoolinit" "$SGEBIN/spooldefaults"; do
  [ -x "$b" ] || die "the packages did not provide $b"
done

# --------------------------------------------------------------- layout
HOST="$("$SGEBIN/gethostname" -name 2>/dev/null || hostname)"
mkdir -p "$STATE"/{run,log,jobs,tmpl} "$COMMON" "$STATE/spool/qmaster" "$STATE/spool/execd"
# readable by every user (jobs may be submitted by anyone); jobs/ is a
# scratch working directory for test jobs of any user
chmod 755 "$STATE" "$STATE/root" "$SGE_ROOT/$CELL" "$COMMON"; chmod 1777 "$STATE/jobs"
for d in bin lib util utilbin; do ln -sfn "/var/lib/gridengine/$d" "$SGE_ROOT/$d"; done
cat > "$STATE/env.sh.tmp" <<ENV
# Grid Engine cell of jim's tests (tests/services/sge): source me.
export SGE_ROOT=$SGE_ROOT SGE_CELL=$CELL SGE_QMASTER_PORT=$QPORT SGE_EXECD_PORT=$EPORT SGE_ARCH=$SGE_ARCH
export PATH="$SGE_ROOT/bin/$SGE_ARCH:\$PATH"
export JIM_TEST_SGE_STATE=$STATE
ENV
chmod 644 "$STATE/env.sh.tmp"; mv "$STATE/env.sh.tmp" "$STATE/env.sh"

# --------------------------------------------------------------- cell (once)
if [ ! -e "$STATE/spool/db/sge" ]; then
  log "creating cell $CELL in $SGE_ROOT (host '$HOST')"
  rm -rf "$STATE/spool/db"; mkdir -p "$STATE/spool/db"
  cat > "$COMMON/bootstrap" <<BOOT
# Version: 8.1.9
admin_user              none
default_domain          none
ignore_fqdn             true
spooling_method         berkeleydb
spooling_lib            libspoolb
spooling_params         $STATE/spool/db
binary_path             /usr/sbin
qmaster_spool_dir       $STATE/spool/qmaster
security_mode           none
listener_threads        2
worker_threads          2
scheduler_threads       1
BOOT
  echo jimtest > "$COMMON/cluster_name"
  # min_uid/min_gid 0: root may run jobs (CI runs the tests as root; stock
  # is 100). mailer /bin/true: no exim. Accounting flushed every second.
  sed -e "s|^execd_spool_dir .*|execd_spool_dir        $STATE/spool/execd|" \
      -e 's|^min_uid .*|min_uid                0|' -e 's|^min_gid .*|min_gid                0|' \
      -e 's|^mailer .*|mailer                 /bin/true|' \
      -e 's|^load_report_time .*|load_report_time       00:00:10|' \
      -e 's|^reporting_params .*|reporting_params       accounting=true reporting=false flush_time=00:00:01 joblog=false sharelog=00:00:00|' \
      /usr/share/gridengine/default-configuration > "$STATE/global.conf"
  grep -q '^min_uid  *0$' "$STATE/global.conf" || die "default-configuration has no min_uid line to edit"
  ( cd "$STATE"
    "$SGEBIN/spoolinit" berkeleydb libspoolb "$STATE/spool/db" init
    "$SGEBIN/spooldefaults" configuration "$STATE/global.conf"
    "$SGEBIN/spooldefaults" complexes /usr/share/gridengine/util/resources/centry
    "$SGEBIN/spooldefaults" usersets /usr/share/gridengine/util/resources/usersets
    "$SGEBIN/spooldefaults" managers root
    mkdir -p "$STATE/tmpl/hosts"; echo "hostname $HOST" > "$STATE/tmpl/hosts/$HOST"
    "$SGEBIN/spooldefaults" adminhosts "$STATE/tmpl/hosts"
    "$SGEBIN/spooldefaults" submithosts "$STATE/tmpl/hosts"
  ) > "$STATE/log/cell-init.log" 2>&1 || { cat "$STATE/log/cell-init.log" >&2; die "cell init failed"; }
  rm -f "$STATE/run/configured"
fi

# --------------------------------------------------------------- qmaster
start_qmaster

# --------------------------------------------------------------- host, queue (once)
if [ ! -e "$STATE/run/configured" ]; then
  log "configuring exec host $HOST, @allhosts and queue $QUEUE ($SLOTS slots)"
  t="$STATE/tmpl"
  printf 'hostname %s\nload_scaling NONE\ncomplex_values NONE\nuser_lists NONE\nxuser_lists NONE\nprojects NONE\nxprojects NONE\nusage_scaling NONE\nreport_variables NONE\n' "$HOST" > "$t/exechost"
  qconf -Ae "$t/exechost" >/dev/null 2>&1 || qconf -Me "$t/exechost" >/dev/null
  printf 'group_name @allhosts\nhostlist %s\n' "$HOST" > "$t/hostgroup"
  qconf -Ahgrp "$t/hostgroup" >/dev/null 2>&1 || qconf -Mhgrp "$t/hostgroup" >/dev/null
  # scheduler: a pass every second, and at once after a submit or an end
  qconf -ssconf | sed -e 's|^schedule_interval .*|schedule_interval                 0:0:1|' \
                      -e 's|^flush_submit_sec .*|flush_submit_sec                  1|' \
                      -e 's|^flush_finish_sec .*|flush_finish_sec                  1|' > "$t/sconf"
  qconf -Msconf "$t/sconf" >/dev/null 2>&1 || die "qconf -Msconf failed"
  # the queue: rerun FALSE (a crashed node's jobs are not run twice),
  # shell /bin/sh posix_compliant, no limits
  sed -e "s|@SLOTS@|$SLOTS|" -e "s|@QUEUE@|$QUEUE|" > "$t/queue" <<'QUEUE'
qname                 @QUEUE@
hostlist              @allhosts
seq_no                0
load_thresholds       NONE
suspend_thresholds    NONE
nsuspend              1
suspend_interval      00:05:00
priority              0
min_cpu_interval      00:05:00
processors            UNDEFINED
qtype                 BATCH INTERACTIVE
ckpt_list             NONE
pe_list               NONE
rerun                 FALSE
slots                 @SLOTS@
tmpdir                /tmp
shell                 /bin/sh
prolog                NONE
epilog                NONE
shell_start_mode      posix_compliant
starter_method        NONE
suspend_method        NONE
resume_method         NONE
terminate_method      NONE
notify                00:00:60
owner_list            NONE
user_lists            NONE
xuser_lists           NONE
subordinate_list      NONE
complex_values        NONE
projects              NONE
xprojects             NONE
calendar              NONE
initial_state         default
s_rt                  INFINITY
h_rt                  INFINITY
s_cpu                 INFINITY
h_cpu                 INFINITY
s_fsize               INFINITY
h_fsize               INFINITY
s_data                INFINITY
h_data                INFINITY
s_stack               INFINITY
h_stack               INFINITY
s_core                INFINITY
h_core                INFINITY
s_rss                 INFINITY
h_rss                 INFINITY
s_vmem                INFINITY
h_vmem                INFINITY
QUEUE
  if qconf -sq "$QUEUE" >/dev/null 2>&1; then qconf -Mq "$t/queue" >/dev/null 2>&1; else qconf -Aq "$t/queue" >/dev/null 2>&1; fi \
    || die "cannot create queue $QUEUE"
  touch "$STATE/run/configured"
fi

# --------------------------------------------------------------- parallel environment
# $PE (every start, so that a cell made before it existed gets it too): the
# slots of a multi-core job, all on one host (allocation_rule $pe_slots), as
# jim's [batch] parallel_environment expects; on the queue's pe_list.
if ! qconf -sp "$PE" >/dev/null 2>&1; then
  log "adding parallel environment $PE ($SLOTS slots, \$pe_slots)"
  printf '%s\n' "pe_name $PE" "slots $SLOTS" "user_lists NONE" "xuser_lists NONE" \
    "start_proc_args NONE" "stop_proc_args NONE" 'allocation_rule $pe_slots' "control_slaves FALSE" \
    "job_is_first_task TRUE" "urgency_slots min" "accounting_summary FALSE" "qsort_args NONE" > "$STATE/tmpl/pe"
  qconf -Ap "$STATE/tmpl/pe" >/dev/null 2>&1 || die "cannot add parallel environment $PE"
fi
if ! qconf -sq "$QUEUE" | awk '$1 == "pe_list"' | grep -qw "$PE"; then
  qconf -aattr queue pe_list "$PE" "$QUEUE" >/dev/null 2>&1 || die "cannot add $PE to the pe_list of $QUEUE"
fi

# --------------------------------------------------------------- execd
if ! execd_pid >/dev/null; then
  if port_answers "$EPORT"; then die "port $EPORT is taken by a process that is not our sge_execd"; fi
  log "starting sge_execd on port $EPORT"
  ( cd "$STATE/spool/execd" && /usr/sbin/sge_execd ) || die "sge_execd failed"
  wait_for 10 execd_pid || die "sge_execd wrote no pid file (see $STATE/spool/execd/*/messages)"
fi
ln -sfn "$(execd_pidfile)" "$RUN/sge_execd.pid"
wait_for 60 queue_ok || die "queue instance $QUEUE@$HOST not usable: $(qstat -f 2>&1 | tail -3)"

# --------------------------------------------------------------- smoke test
# one job as root, one as nobody; both must run and reach the accounting file
smoke() {
  local who="$1" out="$STATE/jobs/start-check.$1.out" id
  rm -f "$out"
  if [ "$who" = root ]; then
    id="$(timeout 120 qsub -terse -sync y -b y -N jim-start-check -wd "$STATE/jobs" -j y -o "$out" /bin/echo sge-ok)" \
      || die "test job as root failed: $(cat "$out" 2>/dev/null)"
  else
    id="$(timeout 120 setpriv --reuid="$who" --regid=nogroup --clear-groups env HOME=/ \
          qsub -terse -sync y -b y -N jim-start-check -wd "$STATE/jobs" -j y -o "$out" /bin/echo sge-ok)" \
      || die "test job as $who failed: $(cat "$out" 2>/dev/null)"
  fi
  id="$(head -1 <<<"$id")"
  grep -q sge-ok "$out" || die "test job $id as $who: output missing"
  wait_for 20 qacct -j "$id" || die "test job $id as $who: not in the accounting file"
  rm -f "$out"
}
smoke root & p1=$!
smoke nobody & p2=$!
wait "$p1" || die "smoke test as root failed"
wait "$p2" || die "smoke test as nobody failed"
log "ready in $(( SECONDS - T0 )) s: . $STATE/env.sh"
