#!/usr/bin/env bash
# Stop the pool start.sh started (SIGTERM to its master: it stops its daemons and jobs), then
# unmount everything under the chroot, deepest first.
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
for m in $(awk -v r="$ROOT" '$2 ~ "^"r"/" {print $2}' /proc/mounts | sort -r); do umount -l "$m" 2>/dev/null; done
log "stopped"
