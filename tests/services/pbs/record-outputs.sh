#!/usr/bin/env bash
# Record REAL outputs of Slurm's PBS/Torque-style wrappers (qsub, qstat, qdel of Debian's
# slurm-wlm-torque) for the golden tests of jim's PBS adapter (tests/test_pbs_golden.py).
# Needs the wrappers (tests/services/pbs/start.sh) and the test cluster
# (tests/services/slurm/start.sh). Takes about 15 s. Does not stop or disturb the cluster:
# it only submits, and cancels, its own jobs (named jim.rec-*).
#
# Usage: record-outputs.sh [OUTDIR]      (default: tests/data/pbs)
#
# For every recorded command NAME: NAME.cmd (argv, JSON), NAME.out, NAME.err, NAME.rc; plus
# index.tsv and jobs.json (the job id of every role). Job ids, times and host names are
# whatever the run produced: tests take ids from jobs.json, never hard-code them.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${1:-$(cd "$HERE/../.." && pwd)/data/pbs}"
PBS_STATE="${JIM_TEST_PBS_STATE:-/var/tmp/jim-test-pbs}"
SLURM_STATE="${JIM_TEST_SLURM_STATE:-/var/tmp/jim-test-slurm}"
export SLURM_CONF="$SLURM_STATE/slurm.conf"
export PATH="$PBS_STATE/bin:$PATH"
[ -x "$PBS_STATE/bin/qsub" ] || { echo "no wrappers in $PBS_STATE/bin: run $HERE/start.sh" >&2; exit 1; }
scontrol ping >/dev/null 2>&1 || { echo "the test Slurm does not answer: run tests/services/slurm/start.sh" >&2; exit 1; }

WORK="$(mktemp -d "$SLURM_STATE/jobs/pbs-rec.XXXXXX")"
chmod 777 "$WORK"
# on any exit: release and cancel what this run submitted (never anything else), then clean up
trap 'touch "$WORK/go" 2>/dev/null; scancel -n jim.rec-plain.0,jim.rec-fail.0,jim.rec-array.0,jim.rec-held.0 \
        -u "$(id -un)" >/dev/null 2>&1; rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
# (down-* files are kept: recorded while slurmctld was down, which this script never causes)
find "$OUT" -maxdepth 1 -type f \( -name '*.cmd' -o -name '*.out' -o -name '*.err' -o -name '*.rc' \) \
  ! -name 'down-*' -delete
rm -f "$OUT/index.tsv" "$OUT/jobs.json"
printf 'name\trc\tseconds\tdescription\n' > "$OUT/index.tsv"

json_str() { local s="$1"; s="${s//\\/\\\\}"; s="${s//\"/\\\"}"; printf '"%s"' "$s"; }
# rec NAME DESCRIPTION ARGV...: run ARGV (no shell), record everything.
rec() {
  local name="$1" desc="$2" rc=0 t a sep=""; shift 2
  { printf '['; for a in "$@"; do printf '%s' "$sep"; json_str "$a"; sep=", "; done; printf ']\n'; } > "$OUT/$name.cmd"
  t="$(date +%s%N)"
  "$@" > "$OUT/$name.out" 2> "$OUT/$name.err" || rc=$?
  echo "$rc" > "$OUT/$name.rc"
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( ($(date +%s%N) - t) / 1000000 ))e-3" "$desc" >> "$OUT/index.tsv"
  # paths of this run are noise in the golden data
  sed -i "s#$WORK#WORKDIR#g" "$OUT/$name.out" "$OUT/$name.err" "$OUT/$name.cmd"
}
jid() { tr -d ' \n' < "$OUT/$1.out"; }

# (absolute paths: Slurm runs a copy of the batch script from its spool directory)
cat > "$WORK/wait.sh" <<SCRIPT
#!/bin/sh
# waits for a flag file, then exits with \$1 (default 0); prints the batch variables it got
env | grep -E '^(PBS_|SLURM_JOB_ID|SLURM_ARRAY_|SLURM_JOB_NAME)' | sort
while [ ! -e "$WORK/go" ]; do sleep 0.2; done
exit "\${1:-0}"
SCRIPT
chmod 755 "$WORK/wait.sh"
printf '#!/bin/sh\nexec %s 3\n' "$WORK/wait.sh" > "$WORK/fail3.sh"; chmod 755 "$WORK/fail3.sh"

cd "$WORK"
rec qsub-plain "one job: qsub prints the Slurm job id" \
  qsub -N jim.rec-plain.0 -j oe -o "$WORK/plain.out" -r n -q debug "$WORK/wait.sh"
rec qsub-fail3 "a job that will exit 3" \
  qsub -N jim.rec-fail.0 -j oe -o "$WORK/fail3.out" -r n "$WORK/fail3.sh"
rec qsub-array "-t 0-2: prints the array job id; its tasks get ids of their own, one shared name" \
  qsub -N jim.rec-array.0 -t 0-2 -j oe -o "$WORK/array.out-%a" "$WORK/wait.sh"
rec qsub-held "-h: held (qstat still says Q)" \
  qsub -N jim.rec-held.0 -h -j oe -o "$WORK/held.out" -l walltime=00:10:00 "$WORK/wait.sh"
rec qsub-bad-queue "unknown queue: rc 1, the error on STDOUT" \
  qsub -N jim.rec-bad.0 -q nosuchqueue "$WORK/wait.sh"
rec qsub-sbatchline "--sbatchline: the shell command qsub would run (arguments are not quoted)" \
  qsub --sbatchline -N jim.rec-x.0 -j oe -o "$WORK/a b/out" -r n "$WORK/wait.sh"
rec qstat-version "qstat --version: not an option (usage, rc 2): how auto-detection tells the wrappers apart" \
  qstat --version
rec qstat-unknown-id "an unknown id: rc 153, nothing printed" qstat 99999999

PLAIN=$(jid qsub-plain); FAIL=$(jid qsub-fail3); ARRAY=$(jid qsub-array); HELD=$(jid qsub-held)
sleep 3   # everything that can start has started
# this run's jobs: the array's tasks got ids of their own (not printed by qsub): from squeue
IDS=$(squeue -h -r -t all -o '%A %j' | awk -v min="$PLAIN" '$2 ~ /^jim\.rec-/ && $1 >= min {print $1}' | sort -n | tr '\n' ' ')
# shellcheck disable=SC2086
rec qstat-f-mix "qstat -f of the recorded jobs: running (plain, fail, array tasks) and held (Q)" qstat -f $IDS
# shellcheck disable=SC2086
rec qstat-brief-mix "brief format: names cut to 16 characters" qstat $IDS
# shellcheck disable=SC2086
rec qstat-a-mix "-a (as -u): the one-line format, names cut to 20 characters" qstat -a $IDS
touch "$WORK/go"
sleep 3
rec qdel-held "qdel of the held job" qdel "$HELD"
rec qdel-done "qdel of a job that has ended: rc 1, silent" qdel "$PLAIN"
rec qdel-unknown "qdel of an unknown id: rc 1, silent" qdel 99999999
sleep 1
# shellcheck disable=SC2086
rec qstat-f-final "after the end: every job C, no exit status anywhere (plain exited 0, fail 3)" qstat -f $IDS
cp "$WORK/plain.out" "$OUT/job-env-plain.out"
cat "$WORK"/array.out-* > "$OUT/job-env-array.out"

printf '{"plain": "%s", "fail3": "%s", "array": "%s", "held": "%s", "all": "%s"}\n' \
  "$PLAIN" "$FAIL" "$ARRAY" "$HELD" "${IDS% }" > "$OUT/jobs.json"
echo "recorded into $OUT"
