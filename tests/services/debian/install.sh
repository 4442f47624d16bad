#!/usr/bin/env bash
# install.sh DEB: a fresh Debian 13 ($STATE/install, a copy of the pristine $STATE/base) with the
# package DEB installed by apt, its dependencies from Debian's archive (no recommends: no condor).
# /proc and /dev stay mounted there for what runs next (stop.sh unmounts). The last line printed is
# the chroot's path. Needs root.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
need_root
deb=${1:?usage: install.sh PACKAGE.deb}
[ -f "$deb" ] || die "no such package: $deb"
[ -x "$BASE/usr/bin/apt-get" ] || die "no base chroot in $BASE: run setup.sh first"
t0=$SECONDS
fresh_copy "$BASE" "$INSTALL"
mkdir -p "$INSTALL/var/cache/jim-deb"
cp "$deb" "$INSTALL/var/cache/jim-deb/"
mount_root "$INSTALL"
log "apt-get install ./$(basename "$deb")"
{ in_root "$INSTALL" apt-get -o DPkg::Lock::Timeout=900 update -q \
    && in_root "$INSTALL" apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends \
        "/var/cache/jim-deb/$(basename "$deb")"; } > "$STATE/install.log" 2>&1 \
    || { tail -30 "$STATE/install.log" >&2; die "apt-get failed (log: $STATE/install.log)"; }
log "installed in $((SECONDS - t0)) s"
echo "$INSTALL"
