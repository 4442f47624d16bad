#!/bin/bash
# arc-rtes.sh [--chroot ROOT] RUNTIMEDIR ARC_CONF -- the test CEs' runtime environments.
# Run by tests/services/arc/start.sh (A-REX 6.17 on the host) and tests/services/arc7/start.sh
# (A-REX 7 in the trixie chroot: --chroot, the paths as the chroot sees them); root.
#
#   - ARC's own shipped ENV/PROXY (/usr/share/arc/rte/ENV/PROXY) enabled;
#   - every tests/services/lib/rtes/<name>.sh installed as RUNTIMEDIR/ENV/JIMTEST/<NAME upper-cased>
#     (RUNTIMEDIR is [arex] runtimedir of ARC_CONF) and enabled; one whose file is gone is disabled
#     and removed;
#   - ENV/JIMTEST/DEFAULT made a default RTE ("arcctl rte default"): A-REX adds it to every job, so
#     every ARC job of the suite goes through RTE processing (stage 0 on the CE, 1 and 2 around
#     the job).
# "arcctl rte enable/default" link the files into <controldir>/rte/{enabled,default}: arcctl runs
# where A-REX runs (in the chroot for ARC 7), so the links point at paths A-REX sees.
# Idempotent (-f: an RTE already enabled is enabled again).
set -euo pipefail
ROOT=""
if [ "${1:-}" = --chroot ]; then ROOT=$2; shift 2; fi
[ $# = 2 ] || { echo "usage: $0 [--chroot ROOT] RUNTIMEDIR ARC_CONF" >&2; exit 2; }
RTEDIR=$1
CONF=$2
SRC=$(cd "$(dirname "$0")" && pwd)/rtes
say() { echo "[jim-test-arc-rtes] $*"; }

arcctl_() {
    if [ -n "$ROOT" ]; then
        chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root \
            ARC_CONFIG="$CONF" arcctl -c "$CONF" "$@"
    else
        env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root ARC_CONFIG="$CONF" arcctl -c "$CONF" "$@"
    fi
}

[ -f "$ROOT/usr/share/arc/rte/ENV/PROXY" ] || { echo "ARC's ENV/PROXY is missing in $ROOT/usr/share/arc/rte" >&2; exit 1; }
[ -f "$SRC/default.sh" ] || { echo "$SRC/default.sh is missing (ENV/JIMTEST/DEFAULT)" >&2; exit 1; }
dest=$ROOT$RTEDIR/ENV/JIMTEST
install -d -m 755 "$ROOT$RTEDIR" "$ROOT$RTEDIR/ENV" "$dest"
names=()
for f in "$SRC"/*.sh; do
    n=$(basename "$f" .sh | tr '[:lower:]' '[:upper:]')
    cmp -s "$f" "$dest/$n" || install -m 644 "$f" "$dest/$n"
    names+=("ENV/JIMTEST/$n")
done
for f in "$dest"/*; do
    [ -e "$f" ] || continue
    n=ENV/JIMTEST/$(basename "$f")
    case " ${names[*]} " in *" $n "*) continue ;; esac
    arcctl_ rte undefault "$n" >/dev/null 2>&1 || true
    arcctl_ rte disable "$n" >/dev/null 2>&1 || true
    rm -f "$f"
    say "removed $n (no $SRC/$(basename "$f" | tr '[:upper:]' '[:lower:]').sh)"
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
arcctl_ rte enable -f ENV/PROXY "${names[@]}" > "$out" 2>&1 || { cat "$out" >&2; exit 1; }
arcctl_ rte default -f ENV/JIMTEST/DEFAULT > "$out" 2>&1 || { cat "$out" >&2; exit 1; }
say "enabled ENV/PROXY ${names[*]}; default ENV/JIMTEST/DEFAULT"
