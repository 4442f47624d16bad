#!/usr/bin/env bash
# Stop what runs in the Debian package test service's chroots (a test's jim monitor, local jobs) and
# unmount them. stop.sh --wipe: remove every chroot and the built package too. Idempotent. Needs root.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
need_root
for root in "$INSTALL" "$BUILD" "$BASE"; do
    umount_root "$root"
done
if [ "${1:-}" = --wipe ]; then
    rm -rf --one-file-system "$STATE"
    log "removed $STATE"
fi
