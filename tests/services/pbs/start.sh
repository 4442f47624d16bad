#!/usr/bin/env bash
# Provide Slurm's PBS/Torque-style wrappers (Debian's slurm-wlm-torque: perl
# qsub, qstat, qdel, qhold, qrls, qalter, qrerun, pbsnodes over the Slurm perl
# API) for jim's PBS adapter tests, OFF the system PATH.
#
# The package Conflicts: gridengine-client (both ship qsub/qstat/qdel), so it
# is never installed: only its perl dependencies are (libslurm-perl,
# libslurmdb-perl, libswitch-perl); the .deb is fetched with `apt-get
# download` and unpacked with `dpkg -x` into $JIM_TEST_PBS_STATE (default
# /var/tmp/jim-test-pbs). The wrappers run ${FindBin::Bin}/sbatch (the
# directory they were called from), hence the sbatch/srun/salloc symlinks in
# bin/. They talk to whatever cluster SLURM_CONF names: the tests point them
# at tests/services/slurm's cluster, which this script does NOT need (service
# start order is alphabetical: pbs < slurm), so it only unpacks; the tests
# check that Slurm answers.
#
# Idempotent and quick (< 0.1 s when done). Needs root only to install.
# Afterwards:  . /var/tmp/jim-test-pbs/env.sh   (exports JIM_PBS_BIN)
set -euo pipefail
export PATH="/usr/sbin:/usr/bin:/sbin:/bin:$PATH"
STATE="${JIM_TEST_PBS_STATE:-/var/tmp/jim-test-pbs}"
case "$STATE" in /*) ;; *) echo "JIM_TEST_PBS_STATE must be an absolute path" >&2; exit 2;; esac
log() { printf '[jim-test-pbs %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
WRAPPERS=(qsub qstat qdel qhold qrls qalter qrerun pbsnodes)
DEPS=(libslurm-perl libslurmdb-perl libswitch-perl)

deps_ok() {
  [ "$(dpkg-query -W -f='${Status}\n' "${DEPS[@]}" 2>/dev/null | grep -c 'install ok installed' || true)" = "${#DEPS[@]}" ]
}
ready() {
  deps_ok || return 1
  local f
  for f in "${WRAPPERS[@]}"; do [ -x "$STATE/bin/$f" ] || return 1; done
  for f in sbatch srun salloc; do [ -L "$STATE/bin/$f" ] || return 1; done
  [ -s "$STATE/env.sh" ]
}

if ready; then
  log "PBS wrappers present in $STATE/bin"
  exit 0
fi
[ "$(id -u)" = 0 ] || die "the PBS wrappers are missing and installing them needs root"
# Slurm's clients may not be installed yet (tests/services/slurm/start.sh runs after this one and
# installs them): link to where Debian puts them; the links work once they are there.
SLURM_BIN="$(dirname "$(command -v sbatch 2>/dev/null || echo /usr/bin/sbatch)")"

APT=(apt-get -o DPkg::Lock::Timeout=900 -q)
export DEBIAN_FRONTEND=noninteractive
if ! deps_ok; then
  log "installing ${DEPS[*]}"
  { "${APT[@]}" -y install --no-install-recommends "${DEPS[@]}" >/dev/null 2>&1; } \
    || { "${APT[@]}" update >/dev/null 2>&1 && "${APT[@]}" -y install --no-install-recommends "${DEPS[@]}" >/dev/null; } \
    || die "apt-get install ${DEPS[*]} failed"
fi

tmp="$(mktemp -d "${STATE%/*}/.jim-test-pbs.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/deb" "$tmp/bin"
( cd "$tmp/deb" && "${APT[@]}" download slurm-wlm-torque >/dev/null 2>&1 ) \
  || { "${APT[@]}" update >/dev/null 2>&1 && ( cd "$tmp/deb" && "${APT[@]}" download slurm-wlm-torque >/dev/null ); } \
  || die "apt-get download slurm-wlm-torque failed"
dpkg -x "$tmp"/deb/slurm-wlm-torque_*.deb "$tmp/root"
for f in "${WRAPPERS[@]}"; do
  [ -f "$tmp/root/usr/bin/$f" ] || die "slurm-wlm-torque has no usr/bin/$f"
  ln -s "$STATE/root/usr/bin/$f" "$tmp/bin/$f"
done
for f in sbatch srun salloc; do ln -s "$SLURM_BIN/$f" "$tmp/bin/$f"; done
dpkg-deb -f "$tmp"/deb/slurm-wlm-torque_*.deb Version > "$tmp/VERSION"
printf '# source me: Slurm'"'"'s PBS/Torque-style wrappers (off the system PATH)\nexport JIM_PBS_BIN=%s\n' \
  "$STATE/bin" > "$tmp/env.sh"
chmod 755 "$tmp"
rm -rf "$STATE"
mv "$tmp" "$STATE"
trap - EXIT
# (perl -c runs the Slurm module's initialisation, which needs a cluster
# configuration: checked against a real one by the tests, not here)
log "PBS wrappers $(cat "$STATE/VERSION") in $STATE/bin"
