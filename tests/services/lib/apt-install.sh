#!/bin/bash
# apt-install.sh NAME PKG... -- install Debian packages for a test service.
#
# The packages' postinst scripts would start the distro's own daemons on the
# stock ports: a policy-rc.d that exits 101 tells invoke-rc.d not to; one is
# added only if there is none, only for the duration of the install. The
# install is tried with the current package lists first; on a fresh machine
# (no lists) or with stale lists (404) it fails: then apt-get update and retry.
# On failure the tail of the log goes to stderr and the exit status is 1.
set -euo pipefail
name=$1; shift
export DEBIAN_FRONTEND=noninteractive
APT=(apt-get -o DPkg::Lock::Timeout=900 -o Dpkg::Options::=--force-confdef
     -o Dpkg::Options::=--force-confold -y -q)
made_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d; made_policy=1
fi
aptlog="$(mktemp "/tmp/jim-test-$name-apt.XXXXXX")"
rc=0
if ! "${APT[@]}" install --no-install-recommends "$@" >"$aptlog" 2>&1; then
  echo "[jim-test-$name] apt-get install failed with the current lists: apt-get update, retry" >&2
  { "${APT[@]}" update && "${APT[@]}" install --no-install-recommends "$@"; } >>"$aptlog" 2>&1 || rc=$?
fi
[ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
if [ "$rc" != 0 ]; then
  tail -25 "$aptlog" >&2
  echo "[jim-test-$name] apt-get failed (log: $aptlog)" >&2
  exit 1
fi
rm -f "$aptlog"
