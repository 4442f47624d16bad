#!/usr/bin/env bash
# Stop the pool start.sh started (SIGTERM to its master: it stops its daemons and jobs), then,
# when nothing else runs in the chroot, unmount everything under it, deepest first.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
need_root
if [ -s "$STATE/master.pid" ]; then
  pid=$(cat "$STATE/master.pid")
  kill "$pid" 2>/dev/null
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  rm -f "$STATE/master.pid"
fi
# the chroot is shared (tests/services/arc7 runs A-REX 7 in it): its mounts stay while anything runs there
r=$(readlink -f "$ROOT")
for p in /proc/[0-9]*; do
  [ "$(readlink "$p/root" 2>/dev/null)" = "$r" ] || continue
  [ "$(awk '{ print $3 }' "$p/stat" 2>/dev/null)" = Z ] && continue
  log "stopped; other processes run in $ROOT (A-REX 7?): mounts kept"
  exit 0
done
for m in $(awk -v r="$r" '$2 ~ "^"r"/" {print $2}' /proc/mounts | sort -r); do umount -l "$m" 2>/dev/null; done
log "stopped"
