#!/usr/bin/env bash
# Make the HTCondor test pool's userland: Debian 13 (trixie) in a chroot, with its `condor`
# package (23.9: every daemon, condor_gridmanager, condor_job_router, blahpd and BLAHP's
# scripts). Debian 12 has no HTCondor and PyPI's wheel holds only the bindings; trixie's
# package needs glibc 2.38, hence the chroot. Idempotent; about a minute on a fresh machine.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
need_root
if ! command -v debootstrap >/dev/null; then
  log "installing debootstrap"
  "$HERE/../lib/apt-install.sh" htcondor debootstrap
fi
if [ ! -x "$ROOT/usr/sbin/condor_master" ]; then
  if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
    log "debootstrap trixie into $ROOT"
    rm -rf "$ROOT"; mkdir -p "$ROOT"
    debootstrap --variant=minbase trixie "$ROOT" "$MIRROR" > "$ROOT.debootstrap.log" 2>&1 \
      || { tail -20 "$ROOT.debootstrap.log" >&2; die "debootstrap failed"; }
  fi
  cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
  mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
  log "installing condor in the chroot"
  in_root sh -c 'export DEBIAN_FRONTEND=noninteractive; apt-get update -q >/dev/null &&
    apt-get install -y -q --no-install-recommends condor python3-venv ca-certificates procps >/dev/null' \
    || die "apt-get in the chroot failed"   # (its postinst calls systemctl, absent there: harmless)
  umount "$ROOT/proc"
fi
# pip inside the chroot (jim's install) needs the host's CA bundle and pip.conf (a site CA, a
# registry mirror); copied every time: an install that runs update-ca-certificates rewrites the bundle.
cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$ROOT/etc/pip.conf"
in_root condor_version | head -1
