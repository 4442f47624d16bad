#!/bin/bash
# start.sh -- bring up jim's GRAM5 test site on this machine and leave its
# gatekeeper running. Idempotent: every step checks before it acts, so a
# second run only (re)starts what is missing. Run as root; Debian 12.
#
#   1. apt-installs the Grid Community Toolkit GRAM5 packages of bookworm;
#   2. creates the accounts jimsubmit (submits: holds the user certificate
#      and proxy, runs the clients) and jimgrid (mapped: jobs, the job
#      manager and jim run as it);
#   3. creates a throwaway CA, a host certificate for DNS:localhost and a
#      user certificate, and maps the user's DN to jimgrid;
#   4. installs jim into a venv readable by everybody (unless JIM_COMMAND
#      names a jim to use) and runs `jim gram-install` with it;
#   5. starts globus-gatekeeper on a loopback port with a clean environment,
#      makes a proxy for jimsubmit, and writes $STATE/env.sh for the tests.
#
# Environment (all optional):
#   JIM_COMMAND           jim executable to use (must be runnable by jimgrid);
#                         default: $JIM_TEST_VENV/bin/jim, built from this repo
#   JIM_TEST_VENV         venv for the repo's jim (default /opt/jim-test-venv)
#   JIM_GRAM_TEST_STATE   state directory (default /var/lib/jim-gram-test)
#   JIM_GRAM_PORT         gatekeeper port (default 2219)
#   JIM_GRAM_JIM_CONFIG   jim configuration for the mapped user's jim
#                         (default: $STATE/jim.toml, the fork adapter)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
STATE=${JIM_GRAM_TEST_STATE:-/var/lib/jim-gram-test}
PORT=${JIM_GRAM_PORT:-2219}
VENV=${JIM_TEST_VENV:-/opt/jim-test-venv}
SUBMIT_USER=jimsubmit
MAPPED_USER=jimgrid
SEG_DIR=/var/lib/jim/seg
CA_SUBJECT="cn=JIM Test CA, ou=jim-test, o=Grid"
CA_PASS=globus                          # throwaway CA
HOST_DN="/O=Grid/OU=jim-test/CN=localhost"
USER_DN="/O=Grid/OU=jim-test/CN=jim test user"
GK=/usr/sbin/globus-gatekeeper
PACKAGES=(
    globus-gatekeeper
    globus-gram-job-manager
    globus-gram-job-manager-scripts
    globus-gram-job-manager-fork
    globus-gram-job-manager-fork-setup-poll
    globus-gram-client-tools
    globus-simple-ca
    globus-proxy-utils
    globus-gsi-cert-utils-progs
    globus-gass-server-ez-progs
    globus-gass-copy-progs
    openssl
    python3-venv
)

if [ "$(id -u)" -ne 0 ]; then
    echo "start.sh: must run as root (the gatekeeper switches to the mapped user)" >&2
    exit 1
fi
t0=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
step() { printf '== %s\n' "$*"; }
umask 022
install -d -m 755 "$STATE" "$STATE/run" "$STATE/log" "$STATE/bin"

# ---------------------------------------------------------------- packages
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    step "installing ${missing[*]}"
    ti=$(date +%s.%N)
    # globus-gatekeeper ships a DISABLED service on port 2119; nothing enables it.
    export DEBIAN_FRONTEND=noninteractive
    { apt-get -o DPkg::Lock::Timeout=900 update -qq &&
      apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${missing[@]}"; } \
        > "$STATE/log/apt.log" 2>&1 || { tail -40 "$STATE/log/apt.log" >&2; exit 1; }
    echo "   packages installed in $(elapsed "$ti") s"
fi

# ---------------------------------------------------------------- accounts
for u in "$SUBMIT_USER" "$MAPPED_USER"; do
    id "$u" >/dev/null 2>&1 || { useradd -m -s /bin/bash "$u"; step "created account $u"; }
done
SUBMIT_HOME=$(getent passwd "$SUBMIT_USER" | cut -d: -f6)
MAPPED_HOME=$(getent passwd "$MAPPED_USER" | cut -d: -f6)

# ---------------------------------------------------------------- CA and certificates
CA="$STATE/ca"
if [ ! -s "$CA/cacert.pem" ] || [ ! -s "$CA/private/cakey.pem" ]; then
    step "creating the test CA"
    rm -rf "$CA"
    grid-ca-create -noint -dir "$CA" -subject "$CA_SUBJECT" -days 3650 -bits 2048 \
        -pass "$CA_PASS" -nobuild > "$STATE/log/grid-ca-create.log" 2>&1 \
        || { cat "$STATE/log/grid-ca-create.log" >&2; exit 1; }
fi
CA_HASH=$(openssl x509 -noout -hash -in "$CA/cacert.pem")
CERTDIR=/etc/grid-security/certificates
install -d -m 755 "$CERTDIR"
cmp -s "$CA/cacert.pem" "$CERTDIR/$CA_HASH.0" 2>/dev/null || {
    install -m 644 "$CA/cacert.pem" "$CERTDIR/$CA_HASH.0"
    install -m 644 "$CA/signing-policy" "$CERTDIR/$CA_HASH.signing_policy"
}

sign_cert() {       # REQ OUT EXTFILE
    openssl x509 -req -in "$1" -CA "$CA/cacert.pem" -CAkey "$CA/private/cakey.pem" \
        -passin "pass:$CA_PASS" -set_serial "0x$(openssl rand -hex 8)" \
        -days 3650 -sha256 -extfile "$3" -out "$2" 2>/dev/null
}
ours() {            # CERT DN: ours, by this CA, valid for another day
    [ -s "$1" ] || return 1
    [ "$(openssl x509 -noout -subject -nameopt compat -in "$1" 2>/dev/null | sed 's/^subject=//')" = "$2" ] \
        || return 1
    openssl verify -CAfile "$CA/cacert.pem" "$1" >/dev/null 2>&1 \
        && openssl x509 -noout -checkend 86400 -in "$1" >/dev/null 2>&1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The host credential stays in $STATE and is given to OUR gatekeeper only:
# /etc/grid-security/hostcert.pem (another gatekeeper's) is left alone.
HOSTCERT="$STATE/hostcert.pem"
HOSTKEY="$STATE/hostkey.pem"
if ! { ours "$HOSTCERT" "$HOST_DN" && [ -s "$HOSTKEY" ]; }; then
    step "issuing host certificate $HOST_DN (DNS:localhost)"
    printf '%s\n' "basicConstraints=critical,CA:FALSE" \
        "keyUsage=critical,digitalSignature,keyEncipherment" \
        "extendedKeyUsage=serverAuth,clientAuth" \
        "subjectAltName=DNS:localhost,IP:127.0.0.1" > "$tmp/host.ext"
    openssl req -new -newkey rsa:2048 -nodes -keyout "$tmp/hostkey.pem" \
        -subj "$HOST_DN" -out "$tmp/host.req" 2>/dev/null
    sign_cert "$tmp/host.req" "$tmp/hostcert.pem" "$tmp/host.ext"
    install -m 600 "$tmp/hostkey.pem" "$HOSTKEY"
    install -m 644 "$tmp/hostcert.pem" "$HOSTCERT"
fi

UDIR="$SUBMIT_HOME/.globus"
install -d -o "$SUBMIT_USER" -g "$SUBMIT_USER" -m 700 "$UDIR"
if ! { ours "$UDIR/usercert.pem" "$USER_DN" && [ -s "$UDIR/userkey.pem" ]; }; then
    step "issuing user certificate $USER_DN for $SUBMIT_USER"
    printf '%s\n' "basicConstraints=critical,CA:FALSE" \
        "keyUsage=critical,digitalSignature,keyEncipherment,dataEncipherment" \
        "extendedKeyUsage=clientAuth" > "$tmp/user.ext"
    openssl req -new -newkey rsa:2048 -nodes -keyout "$tmp/userkey.pem" \
        -subj "$USER_DN" -out "$tmp/user.req" 2>/dev/null
    sign_cert "$tmp/user.req" "$tmp/usercert.pem" "$tmp/user.ext"
    install -o "$SUBMIT_USER" -g "$SUBMIT_USER" -m 400 "$tmp/userkey.pem" "$UDIR/userkey.pem"
    install -o "$SUBMIT_USER" -g "$SUBMIT_USER" -m 644 "$tmp/usercert.pem" "$UDIR/usercert.pem"
    rm -f "$UDIR/x509_proxy"
fi

GRIDMAP=/etc/grid-security/grid-mapfile
line="\"$USER_DN\" $MAPPED_USER"
touch "$GRIDMAP"
if ! grep -qxF "$line" "$GRIDMAP"; then
    step "mapping $USER_DN -> $MAPPED_USER in $GRIDMAP"
    { grep -vF "\"$USER_DN\"" "$GRIDMAP" || true; echo "$line"; } > "$tmp/gridmap"
    install -m 644 "$tmp/gridmap" "$GRIDMAP"
fi

# ---------------------------------------------------------------- services
# stock fork LRM in poll mode, for comparison runs
[ -L /etc/grid-services/jobmanager-fork ] \
    || globus-gatekeeper-admin -e jobmanager-fork-poll -n jobmanager-fork

# ---------------------------------------------------------------- jim
if [ -z "${JIM_COMMAND:-}" ]; then
    JIM_COMMAND="$VENV/bin/jim"
    "$HERE/../lib/jim-venv.sh" "$VENV" "$STATE/log"
fi
JIM_CONFIG_FILE=${JIM_GRAM_JIM_CONFIG:-$STATE/jim.toml}
if [ -z "${JIM_GRAM_JIM_CONFIG:-}" ] && [ ! -s "$JIM_CONFIG_FILE" ]; then
    printf '%s\n' "# jim configuration for the GRAM test site (tests/services/gram/start.sh)" \
        "[batch]" 'adapter = "fork"' \
        "# the fork backend's core slots: more than this small host's, as a test cluster declares" \
        'cores = 8' > "$JIM_CONFIG_FILE"
fi
chmod 644 "$JIM_CONFIG_FILE"

install_args=(--jim-command "$JIM_COMMAND" --timeout 30 --seg-dir "$SEG_DIR"
              --jim-config "$JIM_CONFIG_FILE" --log-levels 'FATAL|ERROR|WARN|INFO|DEBUG|TRACE')
if "$JIM_COMMAND" gram-install --help >/dev/null 2>&1; then
    "$JIM_COMMAND" gram-install "${install_args[@]}" > "$STATE/log/gram-install.log" 2>&1 \
        || { cat "$STATE/log/gram-install.log" >&2; exit 1; }
else
    # jim's CLI does not offer gram-install (yet): the installer needs only
    # the standard library, so run it straight from the repository.
    echo "   note: '$JIM_COMMAND gram-install' unavailable; using python3 -m jim.gram from $REPO"
    PYTHONPATH="$REPO" /usr/bin/python3 -m jim.gram "${install_args[@]}" \
        > "$STATE/log/gram-install.log" 2>&1 || { cat "$STATE/log/gram-install.log" >&2; exit 1; }
fi
grep -v '^unchanged\|^enabled .*(already)' "$STATE/log/gram-install.log" | sed 's/^/   /' || true

# ---------------------------------------------------------------- helpers for tests
cat > "$STATE/bin/as-submitter" <<EOF
#!/bin/sh
# Run a command as $SUBMIT_USER with a clean environment and its proxy (written by start.sh).
exec runuser -u $SUBMIT_USER -- env -i HOME=$SUBMIT_HOME USER=$SUBMIT_USER LOGNAME=$SUBMIT_USER \\
    PATH=/usr/bin:/bin LANG=C.UTF-8 GLOBUS_HOSTNAME=localhost \\
    X509_USER_PROXY=$UDIR/x509_proxy sh -c 'cd "\$HOME" && exec "\$@"' sh "\$@"
EOF
cat > "$STATE/bin/as-mapped" <<EOF
#!/bin/sh
# Run a command as $MAPPED_USER, with the environment the job manager gives jim (written by start.sh).
exec runuser -u $MAPPED_USER -- env -i HOME=$MAPPED_HOME USER=$MAPPED_USER LOGNAME=$MAPPED_USER \\
    PATH=/usr/bin:/bin LANG=C.UTF-8 JIM_CONFIG=$JIM_CONFIG_FILE sh -c 'cd "\$HOME" && exec "\$@"' sh "\$@"
EOF
chmod 755 "$STATE/bin/as-submitter" "$STATE/bin/as-mapped"

if ! "$STATE/bin/as-submitter" grid-proxy-info -exists -valid 4:0 >/dev/null 2>&1; then
    step "creating a 24 h proxy for $SUBMIT_USER"
    "$STATE/bin/as-submitter" grid-proxy-init -q -hours 24 -out "$UDIR/x509_proxy"
fi

# ---------------------------------------------------------------- gatekeeper
PIDFILE="$STATE/run/gatekeeper.pid"
is_ours() { [ -n "${1:-}" ] && [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$GK" ]; }
if [ -f "$PIDFILE" ] && is_ours "$(cat "$PIDFILE")"; then
    echo "gatekeeper already running (pid $(cat "$PIDFILE"), port $(cat "$STATE/run/port"))"
else
    rm -f "$PIDFILE" "$STATE/run/gatekeeper.selfpid"
    # Clean environment: the job manager copies its PATH into every job.
    # (a plain background command: no subshell keeps the caller's stdout open)
    cd /
    setsid env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root \
        GLOBUS_HOSTNAME=localhost \
        "$GK" -f -p "$PORT" -l "$STATE/log/gatekeeper.log" \
            -pidfile "$STATE/run/gatekeeper.selfpid" \
            -grid_services /etc/grid-services -gridmap "$GRIDMAP" \
            -x509_cert_dir "$CERTDIR" -x509_user_cert "$HOSTCERT" -x509_user_key "$HOSTKEY" \
        < /dev/null > "$STATE/log/gatekeeper.stdout" 2>&1 &
    pid=
    for _ in $(seq 1 100); do
        [ -s "$STATE/run/gatekeeper.selfpid" ] && { pid=$(cat "$STATE/run/gatekeeper.selfpid"); break; }
        sleep 0.1
    done
    if ! is_ours "$pid"; then
        echo "start.sh: the gatekeeper did not start:" >&2
        cat "$STATE/log/gatekeeper.stdout" >&2 || true
        tail -20 "$STATE/log/gatekeeper.log" >&2 || true
        exit 1
    fi
    echo "$pid" > "$PIDFILE"
    echo "$PORT" > "$STATE/run/port"
    for _ in $(seq 1 100); do
        grep -q 'GRAM contact' "$STATE/log/gatekeeper.stdout" 2>/dev/null && break
        sleep 0.1
    done
    step "gatekeeper started (pid $pid, port $PORT)"
fi

# ---------------------------------------------------------------- env.sh
CONTACT="localhost:$(cat "$STATE/run/port")"
cat > "$STATE/env.sh" <<EOF
# Written by tests/services/gram/start.sh: what a test needs to use the GRAM test site.
# Shell: . $STATE/env.sh     Python: KEY='value' lines, no escapes.
JIM_GRAM_STATE='$STATE'
JIM_GRAM_CONTACT='$CONTACT'
JIM_GRAM_POLL_SERVICE='$CONTACT/jobmanager-jim'
JIM_GRAM_PUSH_SERVICE='$CONTACT/jobmanager-jim-seg'
JIM_GRAM_FORK_SERVICE='$CONTACT/jobmanager-fork'
JIM_GRAM_SUBMIT_USER='$SUBMIT_USER'
JIM_GRAM_MAPPED_USER='$MAPPED_USER'
JIM_GRAM_MAPPED_HOME='$MAPPED_HOME'
JIM_GRAM_PROXY='$UDIR/x509_proxy'
JIM_GRAM_AS_SUBMITTER='$STATE/bin/as-submitter'
JIM_GRAM_AS_MAPPED='$STATE/bin/as-mapped'
JIM_GRAM_JIM='$JIM_COMMAND'
JIM_GRAM_JIM_CONFIG='$JIM_CONFIG_FILE'
JIM_GRAM_SEG_DIR='$SEG_DIR/$MAPPED_USER'
JIM_GRAM_GATEKEEPER_PID='$(cat "$PIDFILE")'
JIM_GRAM_GATEKEEPER_LOG='$STATE/log/gatekeeper.log'
JIM_GRAM_JM_LOG_POLL='/var/log/globus/gram_jim_$MAPPED_USER.log'
JIM_GRAM_JM_LOG_PUSH='/var/log/globus/gram_jimseg_$MAPPED_USER.log'
EOF
chmod 644 "$STATE/env.sh"

echo "ready in $(elapsed "$t0") s: $CONTACT/jobmanager-jim (poll), $CONTACT/jobmanager-jim-seg (push)," \
     "$CONTACT/jobmanager-fork; env in $STATE/env.sh"
echo "try: $STATE/bin/as-submitter globus-job-run $CONTACT/jobmanager-jim -x '(jimtype=montecarlo)(events=10)' /bin/hostname"
