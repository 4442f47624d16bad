#!/usr/bin/env bash
# Make the HTCondor test pool's userland: Debian 13 (trixie) in a chroot, with its `condor`
# package (23.9: every daemon, condor_gridmanager, condor_job_router, blahpd and BLAHP's
# scripts). Debian 12 has no HTCondor and PyPI's wheel holds only the bindings; trixie's
# package needs glibc 2.38, hence the chroot. Idempotent; about a minute on a fresh machine.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
need_root
# the chroot itself (debootstrap, name resolution, no daemon starts, the host's CA bundle and
# pip.conf) is shared with the ARC 7 CE: tests/services/lib/trixie.sh
JIM_TEST_HTC_ROOT=$ROOT JIM_TEST_HTC_MIRROR=$MIRROR
. "$HERE/../lib/trixie.sh"
# (condor's postinst calls systemctl, absent there: harmless)
trixie_ensure condor python3-venv ca-certificates procps
in_root condor_version | head -1
