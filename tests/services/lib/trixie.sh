# trixie.sh -- the Debian 13 ("trixie") chroot the HTCondor pool (tests/services/htcondor) and the
# ARC 7 CE (tests/services/arc7) share: one debootstrap for both. Sourced, never run:
#
#   . tests/services/lib/trixie.sh
#   trixie_root                      # the chroot's path (JIM_TEST_HTC_ROOT, default /var/lib/jim-htcondor/root)
#   trixie_ensure [PKG...]           # debootstrap it when missing, then apt-get install what is missing
#   trixie_mount                     # /proc, /sys, /dev in it (left mounted: the services use them)
#
# Every step is idempotent and runs under one lock ($ROOT.lock), so two services may call it at once.
# What the chroot gets besides the packages:
#   - /etc/resolv.conf and /etc/hosts of the host (the A-REX postinst runs "hostname -f" and leaves
#     its package unconfigured when the name does not resolve);
#   - a policy-rc.d that exits 101: no package's postinst starts a daemon inside the chroot (the
#     services start theirs themselves, on their own ports);
#   - the host's CA bundle and pip.conf (pip inside the chroot installs jim through the same site CA
#     and registry mirror as the host), copied on every call: an install that runs
#     update-ca-certificates in the chroot rewrites the bundle.
# Needs root and debootstrap (installed on the host when missing).

TRIXIE_ROOT=${JIM_TEST_HTC_ROOT:-/var/lib/jim-htcondor/root}
TRIXIE_MIRROR=${JIM_TEST_HTC_MIRROR:-http://deb.debian.org/debian}
_TRIXIE_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

trixie_root() { echo "$TRIXIE_ROOT"; }
_trixie_say() { echo "[jim-test-trixie] $*"; }
_trixie_die() { echo "[jim-test-trixie] ERROR: $*" >&2; return 1; }

# trixie_mount: /proc, /sys and /dev inside the chroot (rslave: unmounting there never reaches the host)
trixie_mount() {
    local r=$TRIXIE_ROOT
    [ -d "$r/proc" ] || { _trixie_die "$r is no chroot"; return 1; }
    mountpoint -q "$r/proc" || mount -t proc proc "$r/proc"
    if ! mountpoint -q "$r/sys"; then mount --rbind /sys "$r/sys"; mount --make-rslave "$r/sys"; fi
    if ! mountpoint -q "$r/dev"; then mount --rbind /dev "$r/dev"; mount --make-rslave "$r/dev"; fi
}

_trixie_in() {
    chroot "$TRIXIE_ROOT" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

_trixie_ensure_locked() {
    local r=$TRIXIE_ROOT p log
    if [ ! -x "$r/usr/bin/apt-get" ]; then
        if ! command -v debootstrap >/dev/null; then
            _trixie_say "installing debootstrap on the host"
            "$_TRIXIE_LIB/apt-install.sh" trixie debootstrap || return 1
        fi
        _trixie_say "debootstrap --variant=minbase trixie $r"
        # (a half-made root from an interrupted run: nothing else can be in it yet)
        if [ -e "$r" ]; then
            grep -q " $r/" /proc/self/mountinfo && { _trixie_die "$r is incomplete but has mounts"; return 1; }
            rm -rf "$r"
        fi
        mkdir -p "$r"
        local t0=$SECONDS
        debootstrap --variant=minbase trixie "$r" "$TRIXIE_MIRROR" > "$r.debootstrap.log" 2>&1 \
            || { tail -20 "$r.debootstrap.log" >&2; _trixie_die "debootstrap failed (log: $r.debootstrap.log)"; return 1; }
        _trixie_say "debootstrap took $((SECONDS - t0)) s"
    fi
    cp /etc/resolv.conf "$r/etc/resolv.conf"
    [ -s "$r/etc/hosts" ] || cp /etc/hosts "$r/etc/hosts"
    grep -qw localhost "$r/etc/hosts" || echo "127.0.0.1 localhost" >> "$r/etc/hosts"
    local host; host=$(hostname)
    grep -qw "$host" "$r/etc/hosts" || echo "127.0.0.1 $host" >> "$r/etc/hosts"
    printf '#!/bin/sh\n# jim test services: no package starts a daemon in this chroot\nexit 101\n' > "$r/usr/sbin/policy-rc.d"
    chmod 755 "$r/usr/sbin/policy-rc.d"
    cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/ca-certificates.crt" 2>/dev/null || true
    [ -f /etc/pip.conf ] && cp /etc/pip.conf "$r/etc/pip.conf"
    local need=()
    for p in "$@"; do
        _trixie_in dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
    done
    [ ${#need[@]} -gt 0 ] || return 0
    local we_mounted=0
    mountpoint -q "$r/proc" || { mount -t proc proc "$r/proc"; we_mounted=1; }
    log="$r.apt.log"
    _trixie_say "apt-get install in the chroot: ${need[*]}"
    local t1=$SECONDS rc=0
    { _trixie_in apt-get -o DPkg::Lock::Timeout=900 update -q \
        && _trixie_in apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${need[@]}"; } \
        > "$log" 2>&1 || rc=$?
    [ "$we_mounted" = 1 ] && umount "$r/proc"
    # (the packages' postinst may call systemctl, absent in the chroot: harmless; the bundle is ours again)
    cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/ca-certificates.crt" 2>/dev/null || true
    if [ "$rc" != 0 ]; then tail -25 "$log" >&2; _trixie_die "apt-get in the chroot failed (log: $log)"; return 1; fi
    _trixie_say "apt took $((SECONDS - t1)) s"
}

# trixie_ensure [PKG...]: the chroot exists and has these packages
trixie_ensure() {
    mkdir -p "$(dirname "$TRIXIE_ROOT")"
    (
        exec 8>"$TRIXIE_ROOT.lock"
        flock 8
        _trixie_ensure_locked "$@"
    )
}
