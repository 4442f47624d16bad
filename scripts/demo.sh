#!/usr/bin/env bash
# The jim demo: one Monte Carlo grid job of 3000 events, split by the site's
# CPU limits into local jobs on the embedded fork backend, polled to DONE the
# way a gatekeeper would, with live progress; then the status and the output tar.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
export JIM_HOME="${JIM_HOME:-$PWD/demo-home}"
export JIM_CONFIG="$PWD/examples/demo.toml"
RSL="&(executable=$PWD/examples/mc_driver.py)(arguments=--seconds-per-event 0.03)
      (jimtype=montecarlo)(events=3000)(cpuperevent=0.02)(outputs=*.dat)(jobname=\"demo: D0 MC 3000 events\")"

echo "== jim plan --dry-run"
# the whole plan: the header lines, then a row per local job (12 here)
jim plan --dry-run --rsl "$RSL"
echo
echo "== jim submit"
out=$(jim submit --rsl "$RSL")
echo "$out"
ID=$(sed -n 's/^JOB_ID=//p' <<<"$out")
[ -n "$ID" ] || { echo "submit failed" >&2; exit 1; }

echo
echo "== jim poll every 2 s (as the gatekeeper does every 10 s), with progress"
while :; do
    state=$(jim poll --job-id "$ID" | tr '\n' ' ')
    progress=$(jim status "$ID" | sed -n 's/^  progress *//p')
    printf '%s  %s  %s\n' "$(date +%T)" "$state" "$progress"
    case "$state" in *DONE*|*FAILED*) break ;; esac
    sleep 2
done
echo
echo "== jim status $ID"
jim status "$ID"
tar=$(jim status "$ID" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["outputTar"])')
echo "== output tar: $tar"
tar tzf "$tar" | sed -n '1,12p'
echo "   ... $(tar tzf "$tar" | wc -l) files"
echo
echo "The database record: $JIM_HOME/db/$ID.xml"
echo "In a browser: JIM_HOME=$JIM_HOME jim serve, then /jobs/$ID or /db/$ID.html (rendered on the server)"
case "$state" in *DONE*) exit 0 ;; *) exit 1 ;; esac
