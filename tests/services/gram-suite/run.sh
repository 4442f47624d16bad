#!/bin/bash
# run.sh CONTACT LRM OUTDIR -- run the GRAM job-manager test suite built by
# start.sh against one job-manager contact of the test gatekeeper, as the
# submitting account with its proxy (tests/services/gram/start.sh), and
# write each driver's TAP output to OUTDIR/<driver>.tap and its exit status
# to OUTDIR/<driver>.rc. LRM is what the suite calls CONTACT_LRM (its
# per-LRM skip lists: "fork" for the stock fork module, "jim" for jim).
#
#   run.sh localhost:2219/jobmanager-fork fork /tmp/suite-fork
#   run.sh localhost:2219/jobmanager-jim  jim  /tmp/suite-jim
#
# Environment: JIM_GRAM_TEST_STATE (default /var/lib/jim-gram-test),
#   JIM_GRAM_SUITE_TIMEOUT (seconds per driver, default 900),
#   JIM_GRAM_SUITE_ONLY (space-separated driver names to run, default all),
#   JIM_GRAM_SUITE_PARALLEL (drivers run at once, default 8; the long Perl
#   drivers are cut into parts with their own case-range arguments).
set -euo pipefail

contact=${1:?usage: run.sh CONTACT LRM OUTDIR}
lrm=${2:?usage: run.sh CONTACT LRM OUTDIR}
out=${3:?usage: run.sh CONTACT LRM OUTDIR}
STATE=${JIM_GRAM_TEST_STATE:-/var/lib/jim-gram-test}
SUITE=$STATE/suite
TIMEOUT=${JIM_GRAM_SUITE_TIMEOUT:-900}
PARALLEL=${JIM_GRAM_SUITE_PARALLEL:-8}
AS_SUBMITTER=$STATE/bin/as-submitter

[ -x "$SUITE/client/register-test" ] || { echo "run.sh: no suite in $SUITE (run start.sh)" >&2; exit 2; }
[ -x "$AS_SUBMITTER" ] || { echo "run.sh: no GRAM test site in $STATE" >&2; exit 2; }
case "$contact$lrm" in *[!A-Za-z0-9.:/_-]*) echo "run.sh: unexpected characters in CONTACT or LRM" >&2; exit 2 ;; esac

# The drivers, as the upstream Makefiles list them (the longest first): DIR NAME COMMAND...
DRIVERS=(
    "jobmanager job-manager-script-test perl job-manager-script-test.pl"
    "jobmanager/submit_test submit-test-1 perl globus-gram-job-manager-submit-test.pl 1-14"
    "jobmanager/submit_test submit-test-2 perl globus-gram-job-manager-submit-test.pl 15-28"
    "jobmanager/submit_test submit-test-3 perl globus-gram-job-manager-submit-test.pl 29-42"
    "jobmanager/submit_test submit-test-4 perl globus-gram-job-manager-submit-test.pl 43-53"
    "jobmanager/stdio_test stdio-test perl globus-gram-job-manager-stdio-test.pl"
    "jobmanager/failure_test failure-test-1 perl globus-gram-job-manager-failure-test.pl 1-27"
    "jobmanager/failure_test failure-test-2 perl globus-gram-job-manager-failure-test.pl 28-54"
    "jobmanager/rsl_size_test rsl-size-test perl globus-gram-job-manager-rsl-size-test.pl"
    "jobmanager/user_test user-test perl globus-gram-job-manager-user-test.pl"
    "client cancel-test ./cancel-test"
    "client failed-job-two-phase-commit perl failed-job-two-phase-commit.pl"
    "client nonblocking-register-test perl nonblocking-register-test.pl"
    "client ping-test perl ping-test.pl"
    "client refresh-credentials-test ./refresh-credentials-test"
    "client register-callback-test perl register-callback-test.pl"
    "client register-cancel-test ./register-cancel-test"
    "client register-ping-test perl register-ping-test.pl"
    "client register-refresh-credentials-test ./register-refresh-credentials-test"
    "client register-test perl register-test.pl"
    "client status-test ./status-test"
    "client two-phase-commit-test perl two-phase-commit-test.pl"
    "client job-status-with-info-test ./job-status-with-info-test"
    "client local-stdio-size-test ./local-stdio-size-test"
    "client register-version-test ./register-version-test"
    "client restart-to-new-url-test ./restart-to-new-url-test"
    "client set-credentials-test ./set-credentials-test"
    "client stdio-size-test ./stdio-size-test"
    "client stdio-update-after-failure-test ./stdio-update-after-failure-test"
    "client stdio-update-test ./stdio-update-test"
    "client version-test ./version-test"
)

mkdir -p "$out"
chown "$(stat -c %u "$SUITE")" "$out" 2>/dev/null || true
work=$(mktemp -d /tmp/jim-gram-suite.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

run_driver() {
    local dir=$1 name=$2; shift 2
    local t0 rc=0 tap=$work/$name.tap
    t0=$(date +%s)
    # As the submitter, into its own file in $work, then copied to $out by root.
    touch "$tap" && chown jimsubmit "$tap"
    timeout -k 10 "$TIMEOUT" "$AS_SUBMITTER" env CONTACT_STRING="$contact" CONTACT_LRM="$lrm" \
        TEST_DATA_DIR="$SUITE/$dir" sh -c 'cd "$1" && tap=$2 && shift 2 && exec "$@" >"$tap" 2>&1' \
        sh "$SUITE/$dir" "$tap" "$@" || rc=$?
    cp "$tap" "$out/$name.tap"
    echo "$rc" > "$out/$name.rc"
    echo "$name: rc=$rc, $(( $(date +%s) - t0 )) s, $(grep -c '^ok' "$out/$name.tap" || true) ok," \
         "$(grep -c '^not ok' "$out/$name.tap" || true) not ok"
}

running=0
for entry in "${DRIVERS[@]}"; do
    read -r dir name cmd <<<"$entry"
    if [ -n "${JIM_GRAM_SUITE_ONLY:-}" ]; then
        case " $JIM_GRAM_SUITE_ONLY " in *" $name "*) ;; *) continue ;; esac
    fi
    read -r -a argv <<<"$cmd"
    if [ "$running" -ge "$PARALLEL" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    run_driver "$dir" "$name" "${argv[@]}" &
    running=$((running + 1))
done
wait
