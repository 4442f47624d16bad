# description: jim test runtime environment ENV/JIMTEST/STAGES: shows that each stage ran
# ARC sources an RTE with the stage as $1 (0 on the CE before the LRMS submit, 1 on the node before
# the job, 2 on the node after it) and the job's options for it after that. Installed by
# tests/services/lib/arc-rtes.sh; read by tests/test_arc_rte.py and tests/test_arc_proxy.py.
#
#   stage 0: adds JIMTEST_STAGE0=<its options, or "yes"> to the job's environment (joboption_env_N);
#   stage 1: appends "stage1 <options>" to jimtest-stages.log in the session directory and exports
#            JIMTEST_STAGE1=yes, which the job's command sees;
#   stage 2: appends "stage2 <options>" there (and exports JIMTEST_STAGE2=yes).
# The session directory is $RUNTIME_JOB_DIR on the node (the current directory, if unset).
jimtest_stage=${1:-}
shift 2>/dev/null || true
case "$jimtest_stage" in
    0)
        jimtest_i=0
        while eval "[ -n \"\${joboption_env_${jimtest_i}+yes}\" ]"; do
            jimtest_i=$((jimtest_i + 1))
        done
        jimtest_value=${*:-yes}
        eval "joboption_env_${jimtest_i}=\"JIMTEST_STAGE0=\$jimtest_value\""
        unset jimtest_i jimtest_value
        ;;
    1|2)
        printf 'stage%s %s\n' "$jimtest_stage" "$*" >> "${RUNTIME_JOB_DIR:-.}/jimtest-stages.log" || return 1
        export "JIMTEST_STAGE${jimtest_stage}=yes"
        ;;
esac
unset jimtest_stage
true
