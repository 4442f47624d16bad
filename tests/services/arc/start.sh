#!/bin/bash
# start.sh -- the ARC CE test service: A-REX 6.17 on https://localhost:$PORT/arex
# (loopback only), jobs mapped to $MAPPED, handed to an LRMS:
#
#   start.sh [jim-fork|jim-slurm|fork]     (default: $JIM_TEST_ARC_MODE, else jim-fork)
#     jim-fork   LRMS jim; the mapped user's jim runs its local jobs on the fork backend
#     jim-slurm  LRMS jim; jim submits to the test Slurm (tests/services/slurm must run)
#     fork       A-REX's own fork LRMS (for comparison)
#
# Runs setup.sh and tests/services/users/start.sh (the test venv whose bin/jim
# the mapped user runs) first. For jim it runs
#   jim arc-install --prefix /usr/share/arc --jim $VENV/bin/jim --home-pattern ~/.jim-arc-<batch>
#       --config $STATE/etc/jim-<batch>.toml --write-conf $STATE/etc/jim-blocks.conf
# and puts those blocks into arc.conf. Two arched processes are started without
# systemd (job processing, and the web service from a copy of its start script
# that binds 127.0.0.1 only); the info provider runs every $ARC_INFOPROVIDER_PERIOD
# seconds (default 5; A-REX's own is 60 s and arcstat is only as fresh as it).
# Already running in the same mode: nothing to do; in another mode: restarted.
# Writes $STATE/env.sh (the endpoint, the accounts, the mode) for the tests.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
[ "$(id -u)" = 0 ] || arc_die "start.sh must run as root (A-REX switches to the mapped user)"
MODE=${1:-${JIM_TEST_ARC_MODE:-jim-fork}}
case "$MODE" in jim-fork|jim-slurm|fork) ;; *) arc_die "unknown mode '$MODE' (jim-fork, jim-slurm, fork)" ;; esac
PERIOD=${ARC_INFOPROVIDER_PERIOD:-5}
# every queue's benchmark: A-REX's accounting records it with each job (tests/test_arc_accounting.py)
BENCHMARK="HEPSPEC 12.5"
t0=$(date +%s.%N)

# the venv whose jim the mapped user runs follows this checkout even while A-REX runs
"$HERE/../users/start.sh"
if arc_running "$AREX_PIDFILE" && arc_running "$WS_PIDFILE"; then
    if [ "$(cat "$STATE/run/mode" 2>/dev/null)" = "$MODE" ] && grep -qx "benchmark=$BENCHMARK" "$STATE/etc/arc.conf"; then
        arc_say "already running in mode $MODE on https://localhost:$PORT/arex"
        exit 0
    fi
    arc_say "running in mode $(cat "$STATE/run/mode" 2>/dev/null || echo '?'): restarting in mode $MODE"
fi
"$HERE/stop.sh" >/dev/null
"$HERE/setup.sh"
[ -x "$JIM" ] || arc_die "$JIM missing"
if ss -ltnH "sport = :$PORT" | grep -q .; then arc_die "port $PORT is taken"; fi

install -d -m 755 "$STATE/run" "$STATE/log" "$STATE/etc" "$STATE/control" "$STATE/session"
install -d -m 1777 "$STATE/tmp"
CONF="$STATE/etc/arc.conf"
extra_env=()
lrms_blocks=""; tail_blocks=""
if [ "$MODE" = fork ]; then
    lrms_blocks=$'[lrms]\nlrms=fork'
    tail_blocks=$'[queue:fork]\ncomment=A-REX fork LRMS'
else
    batch=${MODE#jim-}
    jconf="$STATE/etc/jim-$batch.toml"
    {
        printf '# jim for the ARC CE test service (%s), written by start.sh\n' "$MODE"
        printf '[site]\nrecommended_cpu_per_job = 3600\nmax_local_jobs = 500\ndefault_events_per_job = 250\n\n'
        printf '[monitor]\ninterval = 0.5\nlost_grace = 120.0\nidle_exit = 60.0\n\n'
        printf '[deadlines]\ncancel_grace = 3.0\n\n[retry]\nmax_attempts = 1\n'
        if [ "$batch" = slurm ]; then
            slurm_env=/var/tmp/jim-test-slurm/env.sh
            [ -r "$slurm_env" ] || arc_die "jim-slurm needs the test Slurm (tests/services/slurm/start.sh): no $slurm_env"
            # shellcheck disable=SC1090
            SLURM_CONF=$(. "$slurm_env"; echo "$SLURM_CONF")
            extra_env=("SLURM_CONF=$SLURM_CONF")
            printf '\n[batch]\nadapter = "slurm"\npartition = "debug"\ncache_interval = 1.0\n'
            printf 'python = "%s"\ncommand_timeout = 20\n' "$VENV/bin/python"
        else  # (the fork backend's core slots: more than this small host's, as a test cluster declares)
            printf '\n[batch]\nadapter = "fork"\ncores = 16\n'
        fi
    } > "$jconf"
    chmod 644 "$jconf"
    "$JIM" arc-install --prefix "$ARC_SHARE" --jim "$JIM" --home-pattern "~/.jim-arc-$batch" \
        --config "$jconf" --write-conf "$STATE/etc/jim-blocks.conf" > "$STATE/log/arc-install.out" 2>&1 \
        || { cat "$STATE/log/arc-install.out" >&2; arc_die "jim arc-install failed"; }
    # arc.conf wants [lrms] before [arex]; the queue and custom blocks go last
    lrms_blocks=$(awk '/^\[/ { keep = ($0 == "[lrms]") } keep' "$STATE/etc/jim-blocks.conf")
    tail_blocks=$(awk '/^\[/ { keep = ($0 != "[lrms]") } keep' "$STATE/etc/jim-blocks.conf")
    grep -q '^lrms *= *jim' <<< "$lrms_blocks" || arc_die "jim arc-install wrote no [lrms] lrms=jim block"
fi

tail_blocks=$(sed "/^\[queue:/a benchmark=$BENCHMARK" <<< "$tail_blocks")

cat > "$CONF" <<CONF
# ARC CE test service, mode $MODE, written by tests/services/arc/start.sh
[common]
hostname=localhost
x509_host_key=$STATE/host/hostkey.pem
x509_host_cert=$STATE/host/hostcert.pem
x509_cert_dir=$STATE/certificates

[authgroup:jimtest]
subject=$USER_SUBJECT

[mapping]
map_to_user=jimtest $MAPPED:$MAPPED

$lrms_blocks

[arex]
loglevel=${ARC_LOGLEVEL:-3}
logfile=$STATE/log/arex.log
joblog=$STATE/log/arex-jobs.log
helperlog=$STATE/log/job.helper.errors
pidfile=$AREX_PIDFILE
controldir=$STATE/control
sessiondir=$STATE/session
tmpdir=$STATE/tmp
runtimedir=$STATE/rte

[arex/ws]
wsurl=https://localhost:$PORT/arex
logfile=$STATE/log/ws-interface.log
pidfile=$WS_PIDFILE

[arex/ws/jobs]
allowaccess=jimtest

[infosys]
logfile=$STATE/log/infoprovider.log
loglevel=3

[infosys/glue2]

[infosys/cluster]
alias=jim-test-arc

$tail_blocks
CONF

# jim's job types as runtime environments (ENV/JIM/MONTECARLO "events=1000" ...):
# A-REX accepts a job asking for an RTE only when that RTE is enabled. The
# scripts do nothing on the node: the jim LRMS reads the name and options from
# the grami file.
for t in GENERIC MONTECARLO REPROCESSING CONCAT PARAMETRIC; do
    install -d -m 755 "$STATE/rte/ENV/JIM"
    printf '# jim job type %s: the jim LRMS turns it and its options into the grid job'"'"'s\n# attributes; nothing to do here.\ntrue\n' \
        "$(echo "$t" | tr A-Z a-z)" > "$STATE/rte/ENV/JIM/$t"
    chmod 644 "$STATE/rte/ENV/JIM/$t"
done
ARC_CONFIG="$CONF" arcctl rte enable -f ENV/JIM/GENERIC ENV/JIM/MONTECARLO ENV/JIM/REPROCESSING \
    ENV/JIM/CONCAT ENV/JIM/PARAMETRIC > "$STATE/log/rte-enable.out" 2>&1 \
    || { cat "$STATE/log/rte-enable.out" >&2; arc_die "arcctl rte enable failed"; }
# ARC's ENV/PROXY and the suite's own ENV/JIMTEST/* (ENV/JIMTEST/DEFAULT a default RTE: every job
# goes through RTE processing), as on the ARC 7 CE
"$HERE/../lib/arc-rtes.sh" "$STATE/rte" "$CONF"

# Without this file the web service's start script runs "openssl dhparam 4096"
# (minutes of CPU); a standard RFC 7919 group is accepted as it is.
[ -s "$STATE/control/dhparam.pem" ] || (umask 077; openssl genpkey -genparam -algorithm DH \
    -pkeyopt group:ffdhe4096 -out "$STATE/control/dhparam.pem" 2>/dev/null)

# The stock scripts can neither bind one address nor set the info-provider
# period: start patched copies (checked, so a changed package fails loudly).
tenths=$(awk -v s="$PERIOD" 'BEGIN { printf "%d", s * 10 }')
sed "s#<arex:gmconfig>\$ARC_RUNTIME_CONFIG</arex:gmconfig>#&<arex:InfoproviderWakeupPeriod>$tenths</arex:InfoproviderWakeupPeriod>#" \
    "$ARC_SHARE/arc-arex-start" > "$STATE/run/arc-arex-start"
sed 's#<tcp:Listen><tcp:Port>#<tcp:Listen><tcp:Interface>127.0.0.1</tcp:Interface><tcp:Port>#' \
    "$ARC_SHARE/arc-arex-ws-start" > "$STATE/run/arc-arex-ws-start"
chmod 755 "$STATE/run/arc-arex-start" "$STATE/run/arc-arex-ws-start"
grep -q InfoproviderWakeupPeriod "$STATE/run/arc-arex-start" || arc_die "could not patch arc-arex-start"
grep -q '<tcp:Interface>127.0.0.1' "$STATE/run/arc-arex-ws-start" || arc_die "could not patch arc-arex-ws-start"

# A-REX hands its environment to the LRMS scripts: keep it small and known.
launch() {   # launch NAME SCRIPT PIDFILE
    cd /
    setsid env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root ARC_CONFIG="$CONF" \
        "${extra_env[@]}" "$2" < /dev/null > "$STATE/log/$1-start.out" 2>&1 \
        || { cat "$STATE/log/$1-start.out" >&2; arc_die "$1 did not start"; }
    for _ in $(seq 200); do arc_running "$3" && return 0; sleep 0.1; done
    cat "$STATE/log/$1-start.out" >&2
    arc_die "$1 wrote no live pid to $3"
}
launch arc-arex "$STATE/run/arc-arex-start" "$AREX_PIDFILE"
launch arc-arex-ws "$STATE/run/arc-arex-ws-start" "$WS_PIDFILE"
for _ in $(seq 100); do ss -ltnH "sport = :$PORT" | grep -q . && break; sleep 0.1; done
ss -ltnH "sport = :$PORT" | grep -q '127.0.0.1:' || arc_die "A-REX does not listen on 127.0.0.1:$PORT"
if ss -ltnH "sport = :$PORT" | grep -vq '127.0.0.1:'; then arc_die "A-REX listens beyond loopback"; fi
echo "$MODE" > "$STATE/run/mode"
cat > "$STATE/env.sh" <<ENV
JIM_TEST_ARC_ENDPOINT=https://localhost:$PORT/arex
JIM_TEST_ARC_MODE=$MODE
JIM_TEST_ARC_MAPPED=$MAPPED
JIM_TEST_ARC_CLIENT=$CLIENT
JIM_TEST_ARC_STATE=$STATE
JIM_TEST_ARC_INFOPROVIDER_PERIOD=$PERIOD
ENV
arc_say "mode $MODE on https://localhost:$PORT/arex in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
