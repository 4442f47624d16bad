#!/usr/bin/env bash
# Runs jim's whole test suite against real services.
#
#   scripts/test.sh [pytest args...]
#
# Sets up .venv, runs the quality gates (scripts/check.sh: ruff, ruff format,
# mypy; a finding fails the run), starts the test services the suite needs (a
# Slurm cluster, a GRAM5 gatekeeper, ... from tests/services/*/start.sh; root
# needed), then runs pytest. With CI=true a service that cannot be started
# fails the run; otherwise its tests are skipped with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/check.sh
export PATH="$PWD/.venv/bin:$PATH"
export JIM_TEST_OUTPUT="${JIM_TEST_OUTPUT:-$PWD/test-output}"
mkdir -p "$JIM_TEST_OUTPUT"

ci=false
case "${CI:-}" in 1|true|TRUE|yes) ci=true ;; esac

for start in tests/services/*/start.sh; do
    [ -e "$start" ] || continue
    name=$(basename "$(dirname "$start")")
    [ "$name" = slurm-cluster ] && continue   # started by its tests' fixture, stopped after them
    case " ${JIM_TEST_SKIP_SERVICES:-} " in *" $name "*) echo "== service $name: skipped by JIM_TEST_SKIP_SERVICES"; continue ;; esac
    echo "== starting test service: $name"
    if [ "$(id -u)" != 0 ]; then
        if $ci; then echo "service $name needs root" >&2; exit 1; fi
        echo "   (not root: $name not started; its tests will be skipped)"
        continue
    fi
    if ! "$start" >"$JIM_TEST_OUTPUT/service-$name.log" 2>&1; then
        tail -40 "$JIM_TEST_OUTPUT/service-$name.log" >&2
        if $ci; then echo "service $name failed to start" >&2; exit 1; fi
        echo "   $name failed to start (see $JIM_TEST_OUTPUT/service-$name.log); its tests will be skipped"
    fi
done

exec python -m pytest -p no:cacheprovider "$@"
