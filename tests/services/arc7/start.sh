#!/bin/bash
# start.sh [jim-fork|fork] -- the ARC 7 CE test service: A-REX 7.0 in the trixie chroot on
# https://localhost:$PORT/arex (loopback only), jobs mapped to the chroot account $MAPPED.
#     jim-fork  (default) LRMS jim, installed by "jim arc-install" from the chroot's venv; jim runs
#               its local jobs on its fork backend (its embedded default)
#     fork      A-REX's own fork LRMS (for comparison)
# Runs setup.sh first (which makes the chroot when the HTCondor pool has not yet: whichever of the
# two starts first). Already running in that mode: setup.sh (jim reinstalled when the checkout
# changed) and nothing else; another mode: restarted. Writes $ENV_FILE for the tests. Root.
#
# Pitfalls (ARC 7 vs the 6.17 service in tests/services/arc):
#  - arc-config-check is gone: the start scripts run "arcctl config verify", which accepts
#    lrms=<name> only when /usr/share/arc/submit-<name>-job exists: jim arc-install runs first.
#    A foreign option in [lrms] is refused; [custom:*] is skipped.
#  - x509_cert_policy (new, default grid): "system" would ignore x509_cert_dir. Set to grid.
#  - the token handler is always on; [authgroup:...] authtokens= names the test JWT issuer.
#  - arc-arex-start moves an ARC 6 control directory (flat job.<id>.* files) into the ARC 7 layout
#    (control/jobs/abc/def/ghi/<rest>/<sfx>) and touches control/version2.
#  - unchanged from 6.17, same workarounds: the web service binds every address (a copy of
#    arc-arex-ws-start adds <tcp:Interface>127.0.0.1</tcp:Interface>); it runs
#    "openssl dhparam 4096" for minutes without control/dhparam.pem (pre-written, RFC 7919 group);
#    the info-provider period is 60 s (a copy of arc-arex-start sets InfoproviderWakeupPeriod);
#    A-REX hands its environment to the LRMS scripts (started with env -i).
#  - the chroot: the start scripts run inside it (setsid chroot ... env -i), the pid files hold host
#    PIDs, the port is a host port (the 6.17 CE uses 40450).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
[ "$(id -u)" = 0 ] || arc7_die "start.sh must run as root"
MODE=${1:-${JIM_TEST_ARC7_MODE:-jim-fork}}
case "$MODE" in jim-fork|fork) ;; *) arc7_die "unknown mode '$MODE' (jim-fork, fork)" ;; esac
PERIOD=${ARC_INFOPROVIDER_PERIOD:-5}
# every queue's benchmark: A-REX's accounting records it with each job (tests/test_arc_accounting.py)
BENCHMARK="HEPSPEC 12.5"
t0=$(date +%s.%N)

"$HERE/setup.sh"
S=$ROOT$STATE
write_env() {
    install -d -m 755 "$(dirname "$ENV_FILE")"
    cat > "$ENV_FILE" <<ENV
JIM_TEST_ARC7_ENDPOINT=https://localhost:$PORT/arex
JIM_TEST_ARC7_MODE=$MODE
JIM_TEST_ARC7_ROOT=$(readlink -f "$ROOT")
JIM_TEST_ARC7_STATE=$STATE
JIM_TEST_ARC7_MAPPED=$MAPPED
JIM_TEST_ARC7_CLIENT=$CLIENT
JIM_TEST_ARC7_JWTCONF=$JWTCONF
JIM_TEST_ARC7_TOKEN_SUBJECT=$TOKEN_SUBJECT
JIM_TEST_ARC7_VENV=$CHROOT_VENV
JIM_TEST_ARC7_VERSION=$(inroot dpkg-query -W -f='${Version}' nordugrid-arc-arex)
JIM_TEST_ARC7_INFOPROVIDER_PERIOD=$PERIOD
ENV
}
if arched_running "$AREX_PID" && arched_running "$WS_PID"; then
    if [ "$(cat "$S/run/mode" 2>/dev/null)" = "$MODE" ] && grep -qx "benchmark=$BENCHMARK" "$S/etc/arc.conf"; then
        write_env
        arc7_say "already running in mode $MODE on https://localhost:$PORT/arex"
        exit 0
    fi
    arc7_say "running in mode $(cat "$S/run/mode" 2>/dev/null || echo '?'): restarting in mode $MODE"
fi
"$HERE/stop.sh" --keep-mounts >/dev/null
if ss -ltnH "sport = :$PORT" | grep -q .; then arc7_die "port $PORT is taken: $(ss -ltnpH "sport = :$PORT")"; fi
install -d -m 755 "$S"/{run,log,etc,control,session,rte}
install -d -m 1777 "$S/tmp"

lrms_blocks=$'[lrms]\nlrms=fork'
tail_blocks=$'[queue:fork]\ncomment=A-REX fork LRMS'
if [ "$MODE" = jim-fork ]; then
    jim=$CHROOT_VENV/bin/jim
    [ -x "$ROOT$jim" ] || arc7_die "$jim missing in the chroot"
    jconf=$STATE/etc/jim-fork.toml
    {
        printf '# jim for the ARC 7 CE test service (%s), written by start.sh\n' "$MODE"
        printf '[site]\nrecommended_cpu_per_job = 3600\nmax_local_jobs = 500\ndefault_events_per_job = 250\n\n'
        printf '[monitor]\ninterval = 0.5\nlost_grace = 120.0\nidle_exit = 60.0\n\n'
        printf '[deadlines]\ncancel_grace = 3.0\n\n[retry]\nmax_attempts = 1\n'
        # (the fork backend's core slots: more than this small host's, as a test cluster declares;
        # JIM_TEST_ARC7_FORK_CORES: more, for bench/bench_arc7.py's N local jobs at once)
        printf '\n[batch]\nadapter = "fork"\ncores = %s\n' "${JIM_TEST_ARC7_FORK_CORES:-16}"
    } > "$ROOT$jconf"
    chmod 644 "$ROOT$jconf"
    inroot "$jim" arc-install --prefix /usr/share/arc --jim "$jim" --home-pattern '~/.jim-arc-fork' \
        --config "$jconf" --write-conf "$STATE/etc/jim-blocks.conf" > "$S/log/arc-install.out" 2>&1 \
        || { cat "$S/log/arc-install.out" >&2; arc7_die "jim arc-install failed"; }
    # arc.conf wants [lrms] before [arex]; the queue and custom blocks go last
    lrms_blocks=$(awk '/^\[/ { keep = ($0 == "[lrms]") } keep' "$S/etc/jim-blocks.conf")
    tail_blocks=$(awk '/^\[/ { keep = ($0 != "[lrms]") } keep' "$S/etc/jim-blocks.conf")
    grep -q '^lrms *= *jim' <<< "$lrms_blocks" || arc7_die "jim arc-install wrote no [lrms] lrms=jim block"
fi

tail_blocks=$(sed "/^\[queue:/a benchmark=$BENCHMARK" <<< "$tail_blocks")
JWT_ISS=$(cat "$S/etc/jwt-issuer")
cat > "$S/etc/arc.conf" <<EOF
# ARC 7 CE test service, mode $MODE, written by tests/services/arc7/start.sh
[common]
hostname=localhost
x509_host_key=$STATE/host/host-localhost-key.pem
x509_host_cert=$STATE/host/host-localhost-cert.pem
x509_cert_policy=grid
x509_cert_dir=$STATE/certificates

[authgroup:jimtest]
subject=$USER_DN

[authgroup:jimtestjwt]
authtokens=* $JWT_ISS * * *

[mapping]
map_to_user=jimtest $MAPPED:$MAPPED
map_to_user=jimtestjwt $MAPPED:$MAPPED

$lrms_blocks

[arex]
loglevel=${ARC_LOGLEVEL:-3}
logfile=$STATE/log/arex.log
joblog=$STATE/log/arex-jobs.log
helperlog=$STATE/log/job.helper.errors
pidfile=$AREX_PID
controldir=$STATE/control
sessiondir=$STATE/session
tmpdir=$STATE/tmp
runtimedir=$STATE/rte

[arex/ws]
wsurl=https://localhost:$PORT/arex
logfile=$STATE/log/ws-interface.log
pidfile=$WS_PID

[arex/ws/jobs]
allowaccess=jimtest
allowaccess=jimtestjwt

[infosys]
logfile=$STATE/log/infoprovider.log
loglevel=3

[infosys/glue2]
admindomain_name=jim-test-arc7

[infosys/cluster]
alias=jim-test-arc7

$tail_blocks
EOF

# runtime environments: jim's job types (A-REX refuses a job naming an RTE that is not enabled:
# "jim arc-install" wrote them into /usr/share/arc/rte/ENV/JIM), ENV/PROXY and the suite's own
if [ "$MODE" = jim-fork ]; then
    rtes=()
    for f in "$ROOT"/usr/share/arc/rte/ENV/JIM/*; do [ -f "$f" ] && rtes+=("ENV/JIM/$(basename "$f")"); done
    [ ${#rtes[@]} -gt 0 ] || arc7_die "jim arc-install wrote no ENV/JIM runtime environment"
    inroot env ARC_CONFIG="$CONF" arcctl -c "$CONF" rte enable -f "${rtes[@]}" > "$S/log/rte-enable.out" 2>&1 \
        || { cat "$S/log/rte-enable.out" >&2; arc7_die "arcctl rte enable failed"; }
fi
"$HERE/../lib/arc-rtes.sh" --chroot "$ROOT" "$STATE/rte" "$CONF"

[ -s "$S/control/dhparam.pem" ] || (umask 077; inroot openssl genpkey -genparam -algorithm DH \
    -pkeyopt group:ffdhe4096 -out "$STATE/control/dhparam.pem" 2>/dev/null)
tenths=$(awk -v s="$PERIOD" 'BEGIN { printf "%d", s * 10 }')
sed "s#<arex:gmconfig>\$ARC_RUNTIME_CONFIG</arex:gmconfig>#&<arex:InfoproviderWakeupPeriod>$tenths</arex:InfoproviderWakeupPeriod>#" \
    "$ROOT/usr/share/arc/arc-arex-start" > "$S/run/arc-arex-start"
sed 's#<tcp:Listen><tcp:Port>#<tcp:Listen><tcp:Interface>127.0.0.1</tcp:Interface><tcp:Port>#' \
    "$ROOT/usr/share/arc/arc-arex-ws-start" > "$S/run/arc-arex-ws-start"
chmod 755 "$S/run/arc-arex-start" "$S/run/arc-arex-ws-start"
grep -q InfoproviderWakeupPeriod "$S/run/arc-arex-start" || arc7_die "could not patch arc-arex-start"
grep -q '<tcp:Interface>127.0.0.1' "$S/run/arc-arex-ws-start" || arc7_die "could not patch arc-arex-ws-start"

launch() {   # launch NAME SCRIPT PIDFILE
    rm -f "$ROOT$3"
    (cd / && setsid chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
        HOME=/root ARC_CONFIG="$CONF" "$2" < /dev/null > "$S/log/$1-start.out" 2>&1) \
        || { cat "$S/log/$1-start.out" >&2; arc7_die "$1 did not start"; }
    for _ in $(seq 300); do arched_running "$3" && return 0; sleep 0.1; done
    cat "$S/log/$1-start.out" >&2
    arc7_die "$1 wrote no live pid to $3"
}
launch arc-arex "$STATE/run/arc-arex-start" "$AREX_PID"
launch arc-arex-ws "$STATE/run/arc-arex-ws-start" "$WS_PID"
for _ in $(seq 100); do ss -ltnH "sport = :$PORT" | grep -q . && break; sleep 0.1; done
ss -ltnH "sport = :$PORT" | grep -q '127.0.0.1:' || arc7_die "A-REX does not listen on 127.0.0.1:$PORT"
if ss -ltnH "sport = :$PORT" | grep -vq '127.0.0.1:'; then arc7_die "A-REX listens beyond loopback"; fi
echo "$MODE" > "$S/run/mode"
write_env
arc7_say "A-REX $(inroot dpkg-query -W -f='${Version}' nordugrid-arc-arex), mode $MODE on https://localhost:$PORT/arex in $(elapsed "$t0") s"
