# lib.sh -- shared settings of the ARC 7 CE test service (sourced by setup.sh, start.sh, stop.sh).
#
# A-REX 7.0 and the ARC 7 client run inside the trixie chroot the HTCondor pool runs in
# (tests/services/lib/trixie.sh: $ROOT). Everything of this service lives in $STATE *inside* it
# (the chroot's path; on the host: $ROOT$STATE): etc/arc.conf, run/, log/, control/, session/,
# rte/, certificates/ (its own test CA), host/, home/ (the two accounts' homes).
#
# PITFALLS of a chroot (it shares the host's PID and network namespaces):
#   - its processes show in the host's ps, the pid files hold host PIDs, its port is a host port;
#     every signal is checked against /proc/PID/root (and exe/uid), never sent by name;
#   - the accounts exist in the chroot only, with uids (41001, 41002) no host account has (setup.sh
#     checks): a host script that kills "every process of uid N" never hits them;
#   - their homes are under $STATE/home, not /home: the HTCondor pool bind-mounts the host's /home
#     (and /tmp) over the chroot's.
ROOT=${JIM_TEST_HTC_ROOT:-/var/lib/jim-htcondor/root}
STATE=${JIM_TEST_ARC7_STATE:-/var/lib/jim-arc7}
PORT=${JIM_TEST_ARC7_PORT:-41443}
# the file the tests read (on the host), as tests/services/arc writes /var/tmp/jim-test-arc/env.sh
ENV_FILE=${JIM_TEST_ARC7_ENV:-/var/tmp/jim-test-arc7/env.sh}
MAPPED=jimtest-arc7user     # grid jobs are mapped to it; it runs jim
MAPPED_UID=41001
CLIENT=jimtest-arc7client   # runs arcproxy/arcsub/... inside the chroot
CLIENT_UID=41002
CA_ID=jimarc7               # arcctl test-ca --ca-id: "ARC TestCA jimarc7"
USER_CN="jim arc7 user"
USER_DN="/DC=org/DC=nordugrid/DC=ARC/O=TestCA/CN=$USER_CN"
TOKEN_SUBJECT="jim arc7 token user"
# jim inside the chroot: the venv the HTCondor pool's blahpd uses too, installed from this
# repository mounted at $CHROOT_SRC (tests/services/lib/jim-venv.sh)
CHROOT_VENV=/opt/jim-venv
CHROOT_SRC=/opt/jim-src
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
ARCHED=/usr/sbin/arched
AREX_PID=$STATE/run/arex.pid
WS_PID=$STATE/run/arex-ws.pid
CONF=$STATE/etc/arc.conf
JWTCONF=$STATE/etc/arcctl-jwt.conf
# the packages A-REX 7 and its client need in the chroot (the REST client plugin is in
# nordugrid-arc-plugins-needed, pulled in by the client: there is no -plugins-arcrest in trixie)
PKGS=(nordugrid-arc-arex nordugrid-arc-client openssl procps iproute2 python3 python3-venv ca-certificates)

arc7_say() { echo "[jim-test-arc7] $*"; }
arc7_die() { echo "[jim-test-arc7] ERROR: $*" >&2; exit 1; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# inroot CMD...: CMD in the chroot as root, with a small known environment
inroot() {
    chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}
# asuser USER CMD...: CMD in the chroot as USER (its own uid and gid)
asuser() {
    local u=$1; shift
    local home; home=$(awk -F: -v u="$u" '$1 == u { print $6 }' "$ROOT/etc/passwd")
    chroot --userspec="$u:$u" "$ROOT" /usr/bin/env -i -C "$home" PATH=/usr/local/bin:/usr/bin:/bin \
        HOME="$home" USER="$u" LOGNAME="$u" LANG=C.UTF-8 "$@"
}
# in_our_root PID: the process runs in this chroot
in_our_root() { [ "$(readlink "/proc/$1/root" 2>/dev/null)" = "$(readlink -f "$ROOT")" ]; }
# arched_pid_ok PID: a live arched of this chroot (never signal anything else)
arched_pid_ok() {
    local pid=${1:-}
    [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
    in_our_root "$pid" || return 1
    case "$(readlink "/proc/$pid/exe" 2>/dev/null)" in
        "$ARCHED"|"$ROOT$ARCHED") return 0 ;;
    esac
    return 1
}
arched_running() { [ -s "$ROOT$1" ] && arched_pid_ok "$(cat "$ROOT$1")"; }
