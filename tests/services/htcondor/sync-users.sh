#!/usr/bin/env bash
# Copy host accounts (uid >= 1000) and their primary groups into the chroot with the same ids:
# jobs and blahpd run there as the submitting account. Run again after creating test accounts.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
need_root
getent passwd | awk -F: '$3 >= 1000 && $3 < 65534' | while IFS=: read -r name _ uid gid gecos home _; do
  g=$(getent group "$gid" | cut -d: -f1)
  if [ -n "$g" ] && ! grep -q "^$g:" "$ROOT/etc/group"; then echo "$g:x:$gid:" >> "$ROOT/etc/group"; fi
  grep -q "^$name:" "$ROOT/etc/passwd" || echo "$name:x:$uid:$gid:$gecos:$home:/bin/sh" >> "$ROOT/etc/passwd"
done
