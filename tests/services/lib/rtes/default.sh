# description: jim test runtime environment ENV/JIMTEST/DEFAULT, a default RTE of the test CEs
# ("arcctl rte default"): A-REX (and jim) add it to every job. Stage 1 exports
# JIMTEST_DEFAULT_RTE=1, which the job's command sees; stages 0 and 2 do nothing.
# Installed by tests/services/lib/arc-rtes.sh.
if [ "${1:-}" = 1 ]; then
    export JIMTEST_DEFAULT_RTE=1
fi
true
