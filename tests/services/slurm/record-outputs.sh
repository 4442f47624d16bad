#!/usr/bin/env bash
# Record REAL outputs of Slurm's commands from jim's test cluster, for the
# golden tests of the Slurm adapter's parsers. Needs a cluster from start.sh
# and root (it holds, suspends and cancels jobs, and stops slurmctld for a
# while). Takes about 2.5 minutes.
#
# Usage: record-outputs.sh [OUTDIR]      (default: tests/data/slurm)
#
# For every recorded command NAME it writes
#   NAME.cmd  the exact argv, as a JSON list of strings
#   NAME.out  its stdout            NAME.err  its stderr
#   NAME.rc   its exit code
# plus index.tsv (name, rc, seconds taken, what it shows), jobs.json (the job
# ids of every role in the scenarios) and formats.txt (the format strings).
# Job ids, times and the host name are whatever the run produced: tests read
# them from jobs.json, never hard-code them.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/lib.sh"
need_root
OUT="${1:-$(cd "$HERE/../.." && pwd)/data/slurm}"
JOBS="$STATE/jobs"
ME="$(id -un)"
T0=$SECONDS

"$HERE/ctl.sh" status >/dev/null || die "cluster not (fully) up: run $HERE/start.sh first"

# The format strings the adapter is expected to use (documented in
# $OUT/README.md). '|' separates fields; Slurm does not escape it, so a job
# name or comment containing '|' shifts the fields (recorded below).
SQ_FMT='%i|%A|%F|%K|%T|%r|%j|%k'
SA_FIELDS='JobID,JobIDRaw,State,ExitCode,Submit,Start,End,JobName,Comment'

mkdir -p "$OUT"
rm -f "$OUT"/*.cmd "$OUT"/*.out "$OUT"/*.err "$OUT"/*.rc "$OUT"/index.tsv "$OUT"/jobs.json "$OUT"/formats.txt
printf 'SQUEUE_FORMAT=%s\nSACCT_FIELDS=%s\n' "$SQ_FMT" "$SA_FIELDS" > "$OUT/formats.txt"
printf 'name\trc\tseconds\tdescription\n' > "$OUT/index.tsv"

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

# submit ARGS...: sbatch --parsable, job id on stdout (-D/-o into the scratch dir)
submit() { sbatch --parsable -D "$JOBS" -o /dev/null "$@"; }
# states JOBIDS: "ID STATE" per (array task) job, from squeue
states() { squeue -h -r -t all -j "$1" -o '%i %T' 2>/dev/null | sort; }
# task_state ARRAYID TASK
task_state() { squeue -h -r -t all -j "$1_$2" -o %T 2>/dev/null; }
# sacct_wait TIMEOUT JOBIDS MIN_LINES [final]: wait until slurmdbd's view of
# JOBIDS (sacct -X) has at least MIN_LINES lines, no placeholder job name
# "allocation" (slurmdbd's name for a job whose start record came late), with
# "final" no unfinished state, and has not changed for 2 s. Records reach
# slurmdbd asynchronously and are updated after the first final state
# (e.g. "CANCELLED by 0" 0:0 becomes "CANCELLED" 0:15).
sacct_wait() {
  local end=$(( SECONDS + $1 )) ids="$2" min="$3" final="${4:-}" prev="" cur n stable=0
  while [ "$SECONDS" -lt "$end" ]; do
    cur="$(sacct -n -X -P -j "$ids" -o "$SA_FIELDS" 2>/dev/null)" || cur=""
    n="$(grep -c . <<<"$cur")" || true
    if [ "$n" -ge "$min" ] && ! grep -q '|allocation|' <<<"$cur" &&
       { [ "$final" != final ] || ! grep -qE '^[^|]*\|[^|]*\|(PENDING|RUNNING|SUSPENDED|REQUEUED|RESIZING)\|' <<<"$cur"; }; then
      if [ "$cur" = "$prev" ]; then
        stable=$(( stable + 1 )); [ "$stable" -ge 2 ] && return 0
      else stable=0; fi
    else stable=0; fi
    prev="$cur"; sleep 1
  done
  log "sacct for $ids not settled: $(tr '\n' ';' <<<"$cur")"
  return 1
}
gone_from_queue() { [ -z "$(squeue -h -t PD,R,S,CG -j "$1" -o %i 2>/dev/null)" ]; }

# Start from a quiet queue so the snapshots hold only this script's jobs
# (finished jobs leave squeue MinJobAge s after they end).
# shellcheck disable=SC2016  # expanded by the inner bash
if ! wait_for $(( MIN_JOB_AGE + 60 )) bash -c '[ -z "$(squeue -h -t all -o %i)" ]'; then
  log "WARNING: queue not empty, the snapshots will show other jobs too"
fi

# ------------------------------------------------------------ config
rec show-config "scontrol show config: MaxArraySize=10001, MaxJobCount=30000, MinJobAge" \
  scontrol show config
grep -E '^(MaxArraySize|MaxJobCount|MinJobAge|MessageTimeout) ' "$OUT/show-config.out" > "$OUT/show-config-limits.txt" || true

# ------------------------------------------------------------ sbatch
rec sbatch-plain "sbatch --parsable, plain job: prints the job id" \
  sbatch --parsable -D "$JOBS" -o /dev/null --job-name=jim-rec-plain --comment=jim:rec-plain --wrap /bin/true
rec sbatch-array "sbatch --parsable --array=0-9: prints the array job id only" \
  sbatch --parsable -D "$JOBS" -o /dev/null --array=0-9 --job-name=jim-rec-array --comment=jim:rec-array --wrap /bin/true
rec sbatch-array-too-big "sbatch --array beyond MaxArraySize: rejected" \
  sbatch --parsable -D "$JOBS" -o /dev/null --array=0-10001 --job-name=jim-rec-big --comment=jim:rec-big --wrap /bin/true
rec sbatch-bad-partition "sbatch to a partition that does not exist: rejected" \
  sbatch --parsable -D "$JOBS" -o /dev/null -p nosuchqueue --job-name=jim-rec-badp --comment=jim:rec-badp --wrap /bin/true
PLAIN="$(cat "$OUT/sbatch-plain.out")"; ARR10="$(cat "$OUT/sbatch-array.out")"
wait_for 60 gone_from_queue "$PLAIN,$ARR10" || die "jobs $PLAIN/$ARR10 did not finish"

# ------------------------------------------------------------ mixed scenario
# Array "mix" (at most 3 tasks at once, %3): task 0 exits 0, task 1 exits 3,
# the others wait for $FLAG. So the snapshot shows COMPLETED 0, FAILED 1,
# RUNNING 2-4, PENDING 5-9 (JobArrayTaskLimit). Plus a job held at submit
# (sbatch -H), a pending job held with "scontrol hold", a SUSPENDED job.
FLAG="$JOBS/rec-release.flag"; rm -f "$FLAG"
WAIT="while [ ! -e $FLAG ]; do sleep 0.5; done"
MIX="$(submit --array=0-9%3 --job-name=jim-rec-mix --comment=jim:rec-mix \
  --wrap "case \$SLURM_ARRAY_TASK_ID in 0) exit 0;; 1) exit 3;; esac; $WAIT")"
HELDU="$(submit -H --job-name=jim-rec-held --comment=jim:rec-held --wrap /bin/true)"
HELDA="$(submit --begin=now+3600 --job-name=jim-rec-hold --comment=jim:rec-hold --wrap /bin/true)"
SUSP="$(submit --job-name=jim-rec-susp --comment=jim:rec-susp --wrap "$WAIT")"
scontrol hold "$HELDA"
wait_for 30 bash -c "[ \"\$(squeue -h -j $SUSP -o %T)\" = RUNNING ]" || die "job $SUSP not running"
scontrol suspend "$SUSP"
mix_ready() {
  [ "$(task_state "$MIX" 0)" = COMPLETED ] && [ "$(task_state "$MIX" 1)" = FAILED ] &&
  [ "$(task_state "$MIX" 2)$(task_state "$MIX" 3)$(task_state "$MIX" 4)" = RUNNINGRUNNINGRUNNING ] &&
  [ "$(squeue -h -j "$SUSP" -o %T)" = SUSPENDED ]
}
wait_for 60 mix_ready || die "scenario not reached: $(states "$MIX,$SUSP" | tr '\n' ';')"
ALL="$MIX,$HELDU,$HELDA,$SUSP"

rec squeue-mix "squeue -r -t all -u USER: array with COMPLETED/FAILED/RUNNING/PENDING tasks, held (sbatch -H, scontrol hold), SUSPENDED" \
  squeue -h -r -t all -u "$ME" -o "$SQ_FMT"
rec squeue-mix-folded "same without -r: pending array tasks folded into ID_[5-9%3]" \
  squeue -h -t all -u "$ME" -o "$SQ_FMT"
rec squeue-mix-by-id "same selected by job ids (-j) instead of user" \
  squeue -h -r -t all -j "$ALL" -o "$SQ_FMT"
# 9 lines: 3 single jobs, tasks 0-4, folded pending tasks 5-9
sacct_wait 30 "$ALL" 9 || die "sacct does not show the live scenario"
rec sacct-mix-live "sacct -X while the scenario is live (pending tasks folded, RUNNING, SUSPENDED, held)" \
  sacct -n -X -P -o "$SA_FIELDS" -j "$ALL"

# cancel one running and one pending task of the array
rec scancel-tasks "scancel of a running (_2) and a pending (_9) array task" \
  scancel "${MIX}_2" "${MIX}_9"
wait_for 30 bash -c "[ \"\$(squeue -h -r -t all -j ${MIX}_2 -o %T)\" = CANCELLED ]" || die "${MIX}_2 not cancelled"
rec squeue-mix-cancelled "squeue after cancelling task 2 (running) and 9 (pending)" \
  squeue -h -r -t all -u "$ME" -o "$SQ_FMT"

# let everything end: the waiting tasks complete, the suspended job is
# resumed and completes, the user-held job is released, the admin-held job
# is cancelled while pending
touch "$FLAG"
scontrol resume "$SUSP"
scontrol release "$HELDU"
scancel "$HELDA"
wait_for 90 gone_from_queue "$ALL" || die "scenario jobs did not finish: $(states "$ALL" | tr '\n' ';')"
# 12 lines: 3 single jobs and tasks 0-8; task 9 (cancelled while pending)
# leaves no record at all
sacct_wait 60 "$ALL" 12 final || die "sacct has no final state for $ALL"
rec squeue-mix-final "squeue once every scenario job has ended (within MinJobAge)" \
  squeue -h -r -t all -u "$ME" -o "$SQ_FMT"
rec sacct-mix-final "sacct -X at the end: COMPLETED, FAILED 3:0, CANCELLED (running and pending task), released, cancelled while held" \
  sacct -n -X -P -o "$SA_FIELDS" -j "$ALL"
rec sacct-mix-final-steps "same without -X: also the .batch steps" \
  sacct -n -P -o "$SA_FIELDS" -j "$ALL"
sacct_wait 30 "$PLAIN,$ARR10" 11 final || die "sacct has no final state for $PLAIN,$ARR10"
rec sacct-submitted "sacct -X for the plain job and the 10-task array from sbatch-plain/sbatch-array" \
  sacct -n -X -P -o "$SA_FIELDS" -j "$PLAIN,$ARR10"

# ------------------------------------------------------------ awkward names
ODD="$(submit -H --job-name='jim x|y z' --comment='jim:a|b c' --wrap /bin/true)"
rec squeue-odd-name "job name 'jim x|y z' and comment 'jim:a|b c': '|' is not escaped" \
  squeue -h -r -t all -j "$ODD" -o "$SQ_FMT"
scancel "$ODD"
# (sacct shows the comment only once the job has ended)
sacct_wait 30 "$ODD" 1 final || die "sacct does not show job $ODD"
rec sacct-odd-name "sacct -P for the same job, cancelled: '|' is not escaped either" \
  sacct -n -X -P -o "$SA_FIELDS" -j "$ODD"

# ------------------------------------------------------------ unknown ids
rec squeue-unknown-id "squeue -j with one unknown id: rc 1" \
  squeue -h -r -t all -j 999999 -o "$SQ_FMT"
rec squeue-known-and-unknown "squeue -j with a known and an unknown id: rc 0, unknown one just missing" \
  squeue -h -r -t all -j "$PLAIN,999999" -o "$SQ_FMT"
rec sacct-unknown-id "sacct -j with an unknown id: rc 0, no lines" \
  sacct -n -X -P -o "$SA_FIELDS" -j 999999
rec scancel-unknown-id "scancel of an unknown id: error message, rc 0" \
  scancel 999999

# ------------------------------------------------------------ slurmctld down
# Job "outage" runs across a clean slurmctld stop, ends (exit 3) while it is
# down, and is reported once slurmctld is back.
FLAG2="$JOBS/rec-outage.flag"; rm -f "$FLAG2"
OUTAGE="$(submit --job-name=jim-rec-outage --comment=jim:rec-outage \
  --wrap "while [ ! -e $FLAG2 ]; do sleep 0.5; done; exit 3")"
wait_for 30 bash -c "[ \"\$(squeue -h -j $OUTAGE -o %T)\" = RUNNING ]" || die "job $OUTAGE not running"
# slurmdbd must have the job as RUNNING before the outage (else it still
# says PENDING, named "allocation", until slurmctld is back)
wait_for 30 bash -c "[ \"\$(sacct -n -X -P -j $OUTAGE -o State,JobName)\" = 'RUNNING|jim-rec-outage' ]" \
  || die "sacct does not show job $OUTAGE running"
"$HERE/ctl.sh" stop-ctld
rec down-squeue "squeue while slurmctld is down" \
  squeue -h -r -t all -u "$ME" -o "$SQ_FMT"
rec down-squeue-by-id "squeue -j while slurmctld is down (takes twice as long)" \
  squeue -h -r -t all -j "$OUTAGE" -o "$SQ_FMT"
rec down-sbatch "sbatch while slurmctld is down" \
  sbatch --parsable -D "$JOBS" -o /dev/null --job-name=jim-rec-down --comment=jim:rec-down --wrap /bin/true
rec down-scancel "scancel while slurmctld is down: rc 8" \
  scancel "$OUTAGE"
rec down-scontrol-ping "scontrol ping while slurmctld is down: answers at once" \
  scontrol ping
touch "$FLAG2"; sleep 2   # the job ends now, while slurmctld is down
rec down-sacct "sacct while slurmctld is down: slurmdbd answers, but the job still shows RUNNING" \
  sacct -n -X -P -o "$SA_FIELDS" -j "$OUTAGE"
t=$SECONDS
"$HERE/ctl.sh" start-ctld --settle 60
sacct_wait 60 "$OUTAGE" 1 final || die "sacct has no final state for $OUTAGE"
log "outage job reported $(( SECONDS - t )) s after start-ctld"
rec after-restart-squeue "squeue after start-ctld --settle: the job that ended during the outage is FAILED 3" \
  squeue -h -r -t all -j "$OUTAGE" -o "$SQ_FMT"
rec after-restart-sacct "sacct after the restart (End = when the end was reported, not the real end)" \
  sacct -n -X -P -o "$SA_FIELDS" -j "$OUTAGE"

# ------------------------------------------------------------ after the purge
# MinJobAge after their end, slurmctld forgets the jobs: squeue no longer
# knows them, sacct still does (and its records have changed meanwhile:
# "CANCELLED by 0" 0:0 became "CANCELLED" 0:15 for the cancelled running task)
purged() { [ -z "$(squeue -h -t all -j "$ALL" -o %i 2>/dev/null)" ]; }
wait_for $(( MIN_JOB_AGE + 90 )) purged || die "scenario jobs still in squeue after MinJobAge"
rec squeue-purged-ids "squeue -j with ids that slurmctld has purged (MinJobAge): rc 0, no lines (rc 1 for a single id)" \
  squeue -h -r -t all -j "$ALL" -o "$SQ_FMT"
rec squeue-purged-id "squeue -j with ONE purged id: rc 1 Invalid job id" \
  squeue -h -r -t all -j "$HELDU" -o "$SQ_FMT"
sacct_wait 30 "$ALL" 12 final || die "sacct has no final state for $ALL"
rec sacct-mix-purged "sacct -X for the scenario once slurmctld has purged the jobs" \
  sacct -n -X -P -o "$SA_FIELDS" -j "$ALL"

cat > "$OUT/jobs.json" <<EOF
{
  "user": "$ME",
  "plain": "$PLAIN",
  "array10": "$ARR10",
  "mix": {"array_job_id": "$MIX", "throttle": 3,
          "tasks": {"0": "COMPLETED", "1": "FAILED exit 3", "2": "cancelled while RUNNING",
                    "3": "COMPLETED", "4": "COMPLETED", "5": "COMPLETED", "6": "COMPLETED",
                    "7": "COMPLETED", "8": "COMPLETED",
                    "9": "cancelled while PENDING: vanishes, no squeue/sacct/jobcomp record"}},
  "held_user": "$HELDU",
  "held_admin": "$HELDA",
  "suspended": "$SUSP",
  "odd_name": "$ODD",
  "outage": "$OUTAGE"
}
EOF
log "recorded into $OUT in $(( SECONDS - T0 )) s"
