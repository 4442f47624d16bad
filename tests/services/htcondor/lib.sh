# Shared settings of the HTCondor test service (sourced by its scripts).
#
#   JIM_TEST_HTC_ROOT   the trixie chroot the pool runs in   (default /var/lib/jim-htcondor/root)
#   JIM_TEST_HTC_STATE  state on the host: pid file, client config, logs (default /var/lib/jim-htcondor/state)
#   JIM_TEST_HTC_PORT   collector and shared port            (default 9618)
#   JIM_TEST_HTC_CPUS   CPUs of the one execute machine       (default 4)
#   JIM_TEST_HTC_BINDS  host directories mounted at the same path in the chroot (default "/home /tmp")
#   JIM_TEST_HTC_USER   the unprivileged account the tests submit as (default jimtest-condor)
#   JIM_TEST_HTC_MIRROR Debian mirror for debootstrap         (default http://deb.debian.org/debian)
ROOT=${JIM_TEST_HTC_ROOT:-/var/lib/jim-htcondor/root}
STATE=${JIM_TEST_HTC_STATE:-/var/lib/jim-htcondor/state}
PORT=${JIM_TEST_HTC_PORT:-9618}
CPUS=${JIM_TEST_HTC_CPUS:-4}
BINDS=${JIM_TEST_HTC_BINDS:-/home /tmp}
TEST_USER=${JIM_TEST_HTC_USER:-jimtest-condor}
MIRROR=${JIM_TEST_HTC_MIRROR:-http://deb.debian.org/debian}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
# jim inside the chroot (what blahpd runs), and this repository mounted there to install it from
CHROOT_VENV=/opt/jim-venv
CHROOT_SRC=/opt/jim-src

log() { echo "[jim-test-htcondor] $*"; }
die() { echo "[jim-test-htcondor] ERROR: $*" >&2; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot, mounts)"; }
in_root() { chroot "$ROOT" "$@"; }
