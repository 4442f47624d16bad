#!/usr/bin/env bash
# Make the Debian package test service's chroots (see README.md): a pristine Debian 13 (trixie)
# minbase made with debootstrap ($STATE/base), and a copy of it with Debian's packaging tools
# ($STATE/build). Idempotent: what exists is kept, missing packages are added. Needs root.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
need_root
mkdir -p "$STATE"
# (the debootstrap, name resolution, no daemon starts, the host's CA bundle and pip.conf, under a lock:
#  the same steps as the HTCondor pool's chroot, on trees of our own)
JIM_TEST_HTC_MIRROR=$MIRROR
. "$HERE/../lib/trixie.sh"
t0=$SECONDS
TRIXIE_ROOT=$BASE trixie_ensure
if [ ! -x "$BUILD/usr/bin/apt-get" ]; then
    log "copying $BASE to $BUILD"
    fresh_copy "$BASE" "$BUILD"
fi
TRIXIE_ROOT=$BUILD trixie_ensure "${BUILD_PACKAGES[@]}"
log "ready in $((SECONDS - t0)) s: $(in_root "$BUILD" dpkg-query -W -f='dh-python ${Version}, ' dh-python)$(in_root "$BUILD" python3 --version)"
