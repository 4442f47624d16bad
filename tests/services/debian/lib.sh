# Shared settings and helpers of the Debian package test service (sourced by its scripts).
#
#   JIM_TEST_DEB_STATE   where the chroots and the built package live (default /var/lib/jim-deb)
#   JIM_TEST_DEB_MIRROR  Debian mirror for debootstrap and apt       (default http://deb.debian.org/debian)
#
# Three Debian 13 (trixie) trees, none of them the HTCondor pool's (/var/lib/jim-htcondor/root, which
# other tests run in):
#   $STATE/base     debootstrap --variant=minbase trixie; never changed once made
#   $STATE/build    a copy of base with Debian's packaging tools: where the package is built
#   $STATE/install  a fresh copy of base for every install.sh: where the package is installed with apt
STATE=${JIM_TEST_DEB_STATE:-/var/lib/jim-deb}
MIRROR=${JIM_TEST_DEB_MIRROR:-http://deb.debian.org/debian}
BASE=$STATE/base
BUILD=$STATE/build
INSTALL=$STATE/install
OUT=$STATE/out
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
#: what the package's build needs (debian/control's Build-Depends and dpkg-buildpackage's own)
BUILD_PACKAGES=(build-essential dpkg-dev debhelper dh-python pybuild-plugin-pyproject python3-all python3-setuptools
                python3-build python3-installer python3-wheel)

log() { echo "[jim-test-debian] $*"; }
die() { echo "[jim-test-debian] ERROR: $*" >&2; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot, mounts)"; }

# in_root ROOT CMD...: CMD in the chroot ROOT, with a clean environment
in_root() {
    local root=$1; shift
    chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

# mount_root ROOT: /proc and /dev in it (rslave: nothing unmounted there reaches the host)
mount_root() {
    local r=$1
    mountpoint -q "$r/proc" || mount -t proc proc "$r/proc"
    if ! mountpoint -q "$r/dev"; then mount --rbind /dev "$r/dev"; mount --make-rslave "$r/dev"; fi
}

# kill_in_root ROOT: SIGKILL every process whose root directory is ROOT (what a test left running there)
kill_in_root() {
    local r pid left tries=0
    r=$(readlink -f "$1")
    while :; do
        left=0
        for pid in $(ls /proc | grep -E '^[0-9]+$'); do
            [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$r" ] || continue
            kill -KILL "$pid" 2>/dev/null && left=1
        done
        [ "$left" = 0 ] && return 0
        tries=$((tries + 1))
        [ "$tries" -lt 50 ] || die "processes in $r do not die"
        sleep 0.1
    done
}

# umount_root ROOT: its processes killed, then every mount below it gone
umount_root() {
    local r m
    r=$(readlink -f "$1")
    [ -d "$r" ] || return 0
    kill_in_root "$r"
    for m in $(awk -v r="$r/" 'index($5, r) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
        umount -l "$m" 2>/dev/null || true
    done
    ! grep -q " $r/" /proc/self/mountinfo || die "$r still has mounts"
}

# fresh_copy SRC DST: DST becomes a copy of the tree SRC (an older DST, unmounted, is removed first)
fresh_copy() {
    local src=$1 dst=$2
    if [ -e "$dst" ]; then
        umount_root "$dst"
        rm -rf --one-file-system "$dst"
    fi
    cp -a "$src" "$dst.tmp.$$"
    mv "$dst.tmp.$$" "$dst"
}
