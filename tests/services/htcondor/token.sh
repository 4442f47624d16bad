#!/usr/bin/env bash
# token.sh USER: an IDTOKEN for USER@<host>, signed with the pool's key, in ~USER/.condor/tokens.d/
# (0600, the account's own). The htcondor2 bindings and tools on the host find it there.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
need_root
u=${1:?usage: token.sh USER}
home=$(getent passwd "$u" | cut -d: -f6)
install -d -m 700 -o "$u" "$home/.condor" "$home/.condor/tokens.d"
tok=$home/.condor/tokens.d/jim-test-pool
in_root condor_token_create -identity "$u@$(hostname)" -key POOL > "$tok.new"
chown "$u" "$tok.new"; chmod 600 "$tok.new"; mv -f "$tok.new" "$tok"
