#!/bin/bash
# setup.sh -- install and prepare the ARC CE test service. Idempotent; root.
#
#   1. Debian's A-REX 6.17 and the ARC client (tests/services/lib/apt-install.sh).
#      The arex postinst creates a test CA *with its private key* in
#      /etc/grid-security/certificates (trusted by anything that reads that
#      directory, the GRAM gatekeeper too): when this run installed the
#      package, "arcctl test-ca cleanup" removes exactly what it created.
#   2. The accounts: $MAPPED (grid jobs run as it; it runs the test venv's jim)
#      and $CLIENT (runs arcproxy/arcsub/...), both without a password.
#   3. A throwaway CA in $STATE/ca, its trust directory $STATE/certificates, a
#      host certificate for localhost and a user certificate for $CLIENT.
#   4. $CLIENT's ~/.arc/client.conf pointing at them.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
[ "$(id -u)" = 0 ] || arc_die "setup.sh must run as root"

# -- 1. packages
need=()
for p in nordugrid-arc-arex nordugrid-arc-client nordugrid-arc-plugins-arcrest openssl procps iproute2; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    # the arex postinst fails (package left unconfigured) without a resolvable name
    hostname -f >/dev/null 2>&1 || arc_die "'hostname -f' does not resolve; the A-REX package needs it"
    had_testca=0
    [ -e /etc/grid-security/testCA-hostcert.pem ] && had_testca=1
    arc_say "installing ${need[*]}"
    "$HERE/../lib/apt-install.sh" arc "${need[@]}"
    if [ "$had_testca" = 0 ] && [ -e /etc/grid-security/testCA-hostcert.pem ]; then
        arcctl test-ca cleanup >/dev/null 2>&1 \
            || arc_die "could not remove the package's test CA from /etc/grid-security (arcctl test-ca cleanup)"
        arc_say "removed the test CA the A-REX package added to /etc/grid-security"
    fi
fi

# -- 2. accounts
for u in "$MAPPED" "$CLIENT"; do
    id "$u" >/dev/null 2>&1 || { useradd -m -s /bin/bash "$u"; arc_say "created account $u"; }
done
chmod 700 "$(arc_home "$MAPPED")"
CLIENT_HOME=$(arc_home "$CLIENT")

install -d -m 755 "$STATE" "$STATE/run" "$STATE/log" "$STATE/etc" "$STATE/certificates"
install -d -m 700 "$STATE/ca" "$STATE/host"
install -d -m 1777 "$STATE/tmp"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# -- 3. certificates
subject_of() { openssl x509 -noout -subject -nameopt compat -in "$1" 2>/dev/null | sed 's/^subject=//'; }
valid() {   # valid CERT SUBJECT: issued by our CA to SUBJECT, good for a day more
    [ -s "$1" ] && [ "$(subject_of "$1")" = "$2" ] \
        && openssl verify -CAfile "$STATE/ca/cacert.pem" "$1" >/dev/null 2>&1 \
        && openssl x509 -noout -checkend 86400 -in "$1" >/dev/null 2>&1
}
if ! openssl x509 -noout -checkend 86400 -in "$STATE/ca/cacert.pem" >/dev/null 2>&1 \
   || [ "$(subject_of "$STATE/ca/cacert.pem")" != "$CA_SUBJECT" ]; then
    rm -f "$STATE"/certificates/*
    openssl req -x509 -new -newkey rsa:2048 -nodes -sha256 -days 730 -subj "$CA_SUBJECT" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -keyout "$STATE/ca/cakey.pem" -out "$STATE/ca/cacert.pem" 2>/dev/null
    chmod 600 "$STATE/ca/cakey.pem"
    arc_say "new CA $CA_SUBJECT"
fi
hash=$(openssl x509 -noout -hash -in "$STATE/ca/cacert.pem")
install -m 644 "$STATE/ca/cacert.pem" "$STATE/certificates/$hash.0"
# A-REX checks a Globus signing policy for every CA it trusts
printf "access_id_CA X509 '%s'\npos_rights globus CA:sign\ncond_subjects globus '\"/O=Grid/OU=jim-test-arc/*\"'\n" \
    "$CA_SUBJECT" > "$STATE/certificates/$hash.signing_policy"
chmod 644 "$STATE/certificates/$hash.signing_policy"

issue() {   # issue SUBJECT KEYOUT CERTOUT EXTENSIONS...
    local subj=$1 key=$2 cert=$3; shift 3
    printf '%s\n' "$@" > "$work/ext"
    openssl req -new -newkey rsa:2048 -nodes -subj "$subj" -keyout "$key" -out "$work/req" 2>/dev/null
    openssl x509 -req -in "$work/req" -CA "$STATE/ca/cacert.pem" -CAkey "$STATE/ca/cakey.pem" \
        -set_serial "0x$(openssl rand -hex 8)" -days 365 -sha256 -extfile "$work/ext" -out "$cert" 2>/dev/null
}
if ! valid "$STATE/host/hostcert.pem" "$HOST_SUBJECT"; then
    issue "$HOST_SUBJECT" "$work/hostkey.pem" "$work/hostcert.pem" \
        "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
        "extendedKeyUsage=serverAuth,clientAuth" "subjectAltName=DNS:localhost,IP:127.0.0.1"
    install -m 600 "$work/hostkey.pem" "$STATE/host/hostkey.pem"
    install -m 644 "$work/hostcert.pem" "$STATE/host/hostcert.pem"
    arc_say "new host certificate $HOST_SUBJECT"
fi
UG="$CLIENT_HOME/.globus"
install -d -o "$CLIENT" -g "$CLIENT" -m 700 "$UG"
if ! valid "$UG/usercert.pem" "$USER_SUBJECT"; then
    issue "$USER_SUBJECT" "$work/userkey.pem" "$work/usercert.pem" \
        "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment,dataEncipherment" \
        "extendedKeyUsage=clientAuth"
    install -o "$CLIENT" -g "$CLIENT" -m 400 "$work/userkey.pem" "$UG/userkey.pem"
    install -o "$CLIENT" -g "$CLIENT" -m 644 "$work/usercert.pem" "$UG/usercert.pem"
    arc_say "new user certificate $USER_SUBJECT for $CLIENT"
fi

# -- 4. the client's configuration
install -d -o "$CLIENT" -g "$CLIENT" -m 700 "$CLIENT_HOME/.arc"
cat > "$work/client.conf" <<CONF
[common]
certificatepath=$UG/usercert.pem
keypath=$UG/userkey.pem
cacertificatesdirectory=$STATE/certificates
proxypath=$CLIENT_HOME/.arc/proxy.pem
joblist=$CLIENT_HOME/.arc/jobs.dat
timeout=30
CONF
install -o "$CLIENT" -g "$CLIENT" -m 644 "$work/client.conf" "$CLIENT_HOME/.arc/client.conf"
arc_say "setup done: $(dpkg-query -W -f='${Package} ${Version}' nordugrid-arc-arex)"
