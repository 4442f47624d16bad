#!/usr/bin/env bash
# Record REAL outputs of Grid Engine's commands from jim's test cell, for
# the golden tests of the Grid Engine adapter's parsers. Needs a cell from
# start.sh and root (it holds, suspends and deletes jobs, and stops
# sge_qmaster for a while). Takes about a minute.
#
# Usage: record-outputs.sh [OUTDIR]      (default: tests/data/sge)
#
# For every recorded command NAME it writes
#   NAME.cmd  the exact argv, as a JSON list of strings
#   NAME.out  its stdout            NAME.err  its stderr
#   NAME.rc   its exit code
# plus index.tsv (name, rc, seconds taken, what it shows) and jobs.json (the
# job ids of every role in the scenarios). Job ids, times and the host name
# are whatever the run produced: tests read them from jobs.json, never
# hard-code them.
#
# The jobs are named the way jim names its array jobs (jim.<grid id>.<offset>),
# with made-up grid ids, plus one job that is not jim's ("other-job").
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/lib.sh"
need_root
OUT="${1:-$(cd "$HERE/../.." && pwd)/data/sge}"
JOBS="$STATE/jobs/record"
ME="$(id -un)"
T0=$SECONDS

"$HERE/ctl.sh" status >/dev/null || die "cell not (fully) up: run $HERE/start.sh first"

G1=20261122-070000-abcdef01   # grid job of the "mix" array (offset 100)
G2=20261122-070000-abcdef02   # grid job of the "held" array (offset 0)
G3=20261122-070000-abcdef03   # grid job of the special exit codes (offsets 0, 10, 20)

mkdir -p "$OUT"
rm -f "$OUT"/*.cmd "$OUT"/*.out "$OUT"/*.err "$OUT"/*.rc "$OUT"/index.tsv "$OUT"/jobs.json
printf 'name\trc\tseconds\tdescription\n' > "$OUT/index.tsv"
rm -rf "$JOBS"; mkdir -p "$JOBS"; cd "$JOBS"

json_str() {
  local s="$1"
  s="${s//\\/\\\\}"; s="${s//\"/\\\"}"; s="${s//$'\n'/\\n}"; s="${s//$'\t'/\\t}"
  printf '"%s"' "$s"
}

# rec NAME DESCRIPTION ARGV...: run ARGV (no shell), record everything.
rec() {
  local name="$1" desc="$2" rc=0 t a sep=""; shift 2
  { printf '['; for a in "$@"; do printf '%s' "$sep"; json_str "$a"; sep=", "; done; printf ']\n'; } > "$OUT/$name.cmd"
  t="$(date +%s%N)"
  "$@" > "$OUT/$name.out" 2> "$OUT/$name.err" || rc=$?
  t="$(( ($(date +%s%N) - t) / 1000000 ))"
  echo "$rc" > "$OUT/$name.rc"
  printf '%s\t%s\t%d.%03d\t%s\n' "$name" "$rc" $((t / 1000)) $((t % 1000)) "$desc" >> "$OUT/index.tsv"
  log "recorded $name (rc $rc, ${t} ms)"
}

# submit ARGS...: qsub -terse into the scratch dir, job id on stdout
submit() { local o; o="$(qsub -terse -wd "$JOBS" -o /dev/null -j y "$@")"; echo "${o%%.*}"; }
# task_state JOB TASK: the state letters of one task ("" when gone)
task_state() {
  qstat -u '*' -g d 2>/dev/null | awk -v j="$1" -v t="$2" '$1 == j && $NF == t {print $5}'
}
job_gone() { ! qstat -u '*' -g d 2>/dev/null | awk -v j="$1" '$1 == j {f = 1} END {exit !f}'; }
in_qacct() { qacct -j "$1" >/dev/null 2>&1; }

# Start from a quiet queue so the snapshots hold only this script's jobs.
# shellcheck disable=SC2016  # expanded by the inner bash
if ! wait_for 60 bash -c '[ -z "$(qstat -u "*" | head -1)" ]'; then
  log "WARNING: queue not empty, the snapshots will show other jobs too"
fi

# ------------------------------------------------------------ qsub
FLAG="$JOBS/release.flag"; rm -f "$FLAG"
WAIT="while [ ! -e $FLAG ]; do sleep 0.5; done"
cat > "$JOBS/true.sh" <<'EOF'
#!/bin/sh
exit 0
EOF
rec qsub-plain "qsub -terse, plain job: prints the job id" \
  qsub -terse -wd "$JOBS" -o /dev/null -j y -N other-job "$JOBS/true.sh"
rec qsub-array "qsub -terse -t 1-10: prints <id>.1-10:1" \
  qsub -terse -t 1-10 -wd "$JOBS" -o /dev/null -j y -N "jim.$G2.50" "$JOBS/true.sh"
rec qsub-array-one "qsub -terse -t 1-1: a one-task array prints <id>.1-1:1" \
  qsub -terse -t 1-1 -wd "$JOBS" -o /dev/null -j y -N "jim.$G2.60" "$JOBS/true.sh"
rec qsub-array-too-big "qsub -t 1-100000 (beyond max_aj_tasks 75000): rejected" \
  qsub -terse -t 1-100000 -wd "$JOBS" -o /dev/null -j y -N "jim.$G2.70" "$JOBS/true.sh"
rec qsub-bad-queue "qsub -q to a queue that does not exist: rejected" \
  qsub -terse -t 1-2 -q nosuchqueue -wd "$JOBS" -o /dev/null -j y -N "jim.$G2.80" "$JOBS/true.sh"
rec qsub-bad-name "qsub -N with a character Grid Engine refuses in names (':')" \
  qsub -terse -t 1-2 -wd "$JOBS" -o /dev/null -j y -N "jim:bad" "$JOBS/true.sh"
rec qsub-bad-project "qsub -P with a project that does not exist: rejected" \
  qsub -terse -t 1-2 -P nosuchproject -wd "$JOBS" -o /dev/null -j y -N "jim.$G2.90" "$JOBS/true.sh"
PLAIN="$(cat "$OUT/qsub-plain.out")"; ARR10="$(cut -d. -f1 "$OUT/qsub-array.out")"
ARR1="$(cut -d. -f1 "$OUT/qsub-array-one.out")"
wait_for 60 job_gone "$ARR10" || die "array $ARR10 did not finish"

# ------------------------------------------------------------ mixed scenario
# Array "mix" (jim.$G1.100, -tc 3: at most 3 tasks at once): task 1 exits 0,
# task 2 exits 3, the others wait for $FLAG. So the snapshot shows tasks 1-2
# gone (finished), 3-5 running (r), 6-10 pending (qw). Plus: an array held
# at submit (-h, hqw), a task suspended with qmod -sj (s), a task that exits
# 100 without jim's wrapper (Eqw), a job whose output path cannot be opened
# (Eqw), a job that exits 99 on its first run (requeued: Rq, then Rr), and a
# job that is not jim's (other-job).
cat > "$JOBS/mix.sh" <<EOF
#!/bin/sh
case \$SGE_TASK_ID in 1) exit 0;; 2) exit 3;; esac
$WAIT
EOF
cat > "$JOBS/special.sh" <<EOF
#!/bin/sh
# task 1: exits 100 at once; task 2: exits 99 on its first run only
case \$SGE_TASK_ID in
  1) exit 100;;
  2) if [ ! -e $JOBS/rerun.\$JOB_ID ]; then touch $JOBS/rerun.\$JOB_ID; sleep 2; exit 99; fi;;
esac
$WAIT
EOF
cat > "$JOBS/wait.sh" <<EOF
#!/bin/sh
$WAIT
EOF
MIX="$(submit -t 1-10 -tc 3 -N "jim.$G1.100" "$JOBS/mix.sh")"
HELD="$(submit -h -t 1-3 -N "jim.$G2.0" "$JOBS/true.sh")"
SUSP="$(submit -t 1-2 -N "jim.$G3.30" "$JOBS/wait.sh")"
SPECIAL="$(submit -t 1-2 -N "jim.$G3.0" "$JOBS/special.sh")"
BADOUT="$(qsub -terse -t 1-1 -wd "$JOBS" -o /nonexistent/dir/out -j y -N "jim.$G3.10" "$JOBS/true.sh" | cut -d. -f1)"
OTHER="$(submit -N other-job "$JOBS/wait.sh")"
wait_for 30 bash -c "[ \"\$(qstat -u '*' -g d | awk '\$1 == $SUSP && \$5 == \"r\"' | wc -l)\" = 2 ]" \
  || die "job $SUSP not running"
qmod -sj "$SUSP.1" >/dev/null
mix_ready() {
  [ "$(task_state "$MIX" 3)$(task_state "$MIX" 4)$(task_state "$MIX" 5)" = rrr ] &&
  [ "$(task_state "$MIX" 6)" = qw ] && [ -z "$(task_state "$MIX" 1)" ] && [ -z "$(task_state "$MIX" 2)" ] &&
  [ "$(task_state "$SUSP" 1)" = s ] && [ "$(task_state "$SPECIAL" 1)" = Eqw ] &&
  [ "$(task_state "$BADOUT" 1)" = Eqw ] && [ "$(task_state "$OTHER" 1)" = r ] &&
  [ "$(task_state "$HELD" 1)" = hqw ]
}
wait_for 60 mix_ready || die "scenario not reached: $(qstat -u '*' -g d | tr '\n' ';')"
# task 2 of SPECIAL: requeued after exit 99 (Rq), caught while waiting
wait_for 30 bash -c "[ \"\$(qstat -u '*' -g d | awk '\$1 == $SPECIAL && \$NF == 2 {print \$5}')\" = Rq ]" || true
rec qstat-mix "qstat -u USER -xml -g d: running (r), pending (qw), held (hqw), suspended (s), error (Eqw), requeued after exit 99 (Rq if caught), not jim's" \
  qstat -u "$ME" -xml -g d
rec qstat-mix-folded "same without -g d: pending tasks folded into one job_list with <tasks>6-10:1</tasks>" \
  qstat -u "$ME" -xml
rec qstat-mix-text "same in qstat's text format, for people" \
  qstat -u "$ME" -g d
rec qstat-g-c "qstat -g c: cluster queue summary (USED, RES, AVAIL, TOTAL slots), for jim advertise" \
  qstat -g c
rec qstat-j-error "qstat -j of the job with a task in Eqw: 'error reason'" \
  qstat -j "$SPECIAL"
wait_for 30 bash -c "qstat -u '*' -g d | awk '\$1 == $SPECIAL && \$NF == 2 && \$5 ~ /^R?r\$/ {f = 1} END {exit !f}'" \
  || die "task $SPECIAL.2 not running again after exit 99"
rec qstat-rerun "qstat -xml -g d once task 2 of the exit-99 job runs again (Rr or r)" \
  qstat -u "$ME" -xml -g d

# delete a running and a pending task of "mix", see them in deletion (dr)
rec qdel-tasks "qdel JOB -t 3 JOB -t 9: a running and a pending task" \
  qdel "$MIX" -t 3 "$MIX" -t 9
rec qstat-deleting "qstat right after qdel: the running task is in deletion (dr) for a second or so" \
  qstat -u "$ME" -xml -g d
rec qdel-unknown "qdel of a job id that does not exist: rc 1" \
  qdel 999999
rec qdel-gone-task "qdel of a task that has already ended, with one that has not: rc 1, the other is deleted" \
  qdel "$MIX" -t 1 "$HELD" -t 3

# let everything end: the waiting tasks complete, the suspended task is
# resumed, the held array released (tasks 1-2), the error jobs deleted
touch "$FLAG"
qmod -usj "$SUSP.1" >/dev/null
qrls "$HELD" >/dev/null
qdel "$SPECIAL" -t 1 "$BADOUT" >/dev/null 2>&1 || true
for j in "$MIX" "$HELD" "$SUSP" "$SPECIAL" "$BADOUT" "$OTHER"; do
  wait_for 60 job_gone "$j" || die "job $j did not finish: $(qstat -u '*' -g d | tr '\n' ';')"
done
# records: mix 1-8,10 (9 was deleted while pending: none), held 1-2, susp 1-2,
# special 1 (failed 30), 2 (failed 25, then 0), badout 1 (failed 26)
wait_for 30 bash -c "[ \"\$(qacct -j $MIX 2>/dev/null | grep -c '^taskid')\" -ge 9 ]" || die "qacct lacks $MIX"
wait_for 30 in_qacct "$BADOUT" || die "qacct lacks $BADOUT"
wait_for 30 bash -c "[ \"\$(qacct -j $SPECIAL 2>/dev/null | grep -c '^taskid')\" -ge 3 ]" || die "qacct lacks $SPECIAL"
wait_for 30 in_qacct "$OTHER" || die "qacct lacks $OTHER"
rec qstat-empty "qstat -xml -g d with no jobs of the user" \
  qstat -u "$ME" -xml -g d
rec qacct-mix "qacct -j MIX: exit 0, exit 3, killed while running (qdel), completed; no record for the task deleted while pending" \
  qacct -j "$MIX"
rec qacct-special "qacct -j of the exit-100 / exit-99 job: failed 30 (application error, exit 100); failed 25 (rescheduling, exit 99) then a normal end" \
  qacct -j "$SPECIAL"
rec qacct-badout "qacct -j of the job whose output file could not be opened: failed 26" \
  qacct -j "$BADOUT"
rec qacct-held "qacct -j of the held array, released: tasks 1-2 completed (3 was deleted while held: no record)" \
  qacct -j "$HELD"
rec qacct-by-name "qacct -o USER -j 'jim.<grid>.*': every array job of one grid job, by name pattern" \
  qacct -o "$ME" -j "jim.$G3.*"
rec qacct-by-name-none "qacct -j with a name pattern that matches nothing: rc 1" \
  qacct -o "$ME" -j "jim.20000101-000000-00000000.*"
rec qacct-unknown-id "qacct -j with an unknown id: rc 1" \
  qacct -j 999999
rec qacct-plain "qacct -j of a job that is not an array job: taskid undefined" \
  qacct -j "$PLAIN"

# ------------------------------------------------------------ sge_qmaster down
# Job "outage" runs across a qmaster stop and ends while it is down; it is
# reported once the qmaster is back.
FLAG2="$JOBS/outage.flag"; rm -f "$FLAG2"
cat > "$JOBS/outage.sh" <<EOF
#!/bin/sh
while [ ! -e $FLAG2 ]; do sleep 0.5; done
exit 3
EOF
OUTAGE="$(submit -t 1-1 -N "jim.$G3.40" "$JOBS/outage.sh")"
wait_for 30 bash -c "[ \"\$(qstat -u '*' -g d | awk '\$1 == $OUTAGE {print \$5}')\" = r ]" || die "job $OUTAGE not running"
"$HERE/ctl.sh" stop-qmaster
rec down-qstat "qstat -xml while sge_qmaster is down: rc 1 at once" \
  qstat -u "$ME" -xml -g d
rec down-qsub "qsub while sge_qmaster is down" \
  qsub -terse -t 1-2 -wd "$JOBS" -o /dev/null -j y -N "jim.$G3.50" "$JOBS/true.sh"
rec down-qdel "qdel while sge_qmaster is down" \
  qdel "$OUTAGE"
touch "$FLAG2"; sleep 2   # the job ends now, while the qmaster is down
rec down-qacct "qacct while sge_qmaster is down: it reads the accounting file, the job that just ended is not in it yet" \
  qacct -j "$OUTAGE"
t=$SECONDS
"$HERE/ctl.sh" start-qmaster
wait_for 60 in_qacct "$OUTAGE" || die "job $OUTAGE not in qacct after the restart"
log "outage job reported $(( SECONDS - t )) s after start-qmaster"
rec after-restart-qacct "qacct after the restart: the job that ended during the outage, exit 3" \
  qacct -j "$OUTAGE"

cat > "$OUT/jobs.json" <<EOF
{
  "user": "$ME",
  "grid_ids": {"mix": "$G1", "held": "$G2", "special": "$G3"},
  "plain": "$PLAIN",
  "array10": "$ARR10",
  "array1": "$ARR1",
  "mix": {"job": "$MIX", "name": "jim.$G1.100", "throttle": 3,
          "tasks": {"1": "exit 0", "2": "exit 3", "3": "deleted while running (qdel)",
                    "4": "exit 0", "5": "exit 0", "6": "exit 0", "7": "exit 0", "8": "exit 0",
                    "9": "deleted while pending: no accounting record", "10": "exit 0"}},
  "held": {"job": "$HELD", "name": "jim.$G2.0", "tasks": {"1": "held, released, exit 0", "2": "held, released, exit 0",
           "3": "deleted while held: no accounting record"}},
  "suspended": {"job": "$SUSP", "name": "jim.$G3.30", "tasks": {"1": "suspended (qmod -sj), resumed, exit 0", "2": "exit 0"}},
  "special": {"job": "$SPECIAL", "name": "jim.$G3.0", "tasks": {"1": "exit 100: Eqw, then deleted",
              "2": "exit 99 on the first run: requeued (Rq), runs again, exit 0"}},
  "badout": {"job": "$BADOUT", "name": "jim.$G3.10", "tasks": {"1": "output path cannot be opened: Eqw, then deleted"}},
  "other": {"job": "$OTHER", "name": "other-job"},
  "outage": {"job": "$OUTAGE", "name": "jim.$G3.40", "tasks": {"1": "ends with exit 3 while sge_qmaster is down"}}
}
EOF
cd /; rm -rf "$JOBS"
log "recorded into $OUT in $(( SECONDS - T0 )) s"
