#!/bin/bash
# setup.sh -- prepare the ARC 7 CE test service in the trixie chroot. Idempotent (a second run
# only fills in what is missing, about a second); root. Run by start.sh.
#
#   1. the chroot (tests/services/lib/trixie.sh: debootstrap when the HTCondor pool has not made
#      it yet) with A-REX 7.0 and the ARC 7 client; /proc, /sys, /dev mounted in it.
#   2. the chroot-only accounts $MAPPED ($MAPPED_UID: grid jobs) and $CLIENT ($CLIENT_UID: the
#      client), homes under $STATE/home.
#   3. a test CA made with "arcctl test-ca --ca-dir $STATE/certificates" (PITFALL: arcctl keeps the
#      CA's private key inside that trusted directory, mode 0400: fine for a throwaway CE, never
#      point a real service at it), a host certificate for localhost and a user certificate for
#      $CLIENT. The A-REX postinst also makes a test CA in the chroot's /etc/grid-security and
#      /etc/arc.conf.d: unused (ARC_CONFIG is $STATE/etc/arc.conf).
#   4. a JWT issuer ("arcctl test-jwt", new in ARC 7) trusted by A-REX: its JWKS deployed into
#      control/tokenissuers ("arcctl deploy jwt-issuer"), so A-REX never fetches the issuer's
#      (non-existent) URL. PITFALL: the issuer URL holds the hostname of the arc.conf arcctl reads:
#      every test-jwt call gets -c $JWTCONF (hostname=localhost).
#   5. $CLIENT's ~/.arc/client.conf.
#   6. jim in $CHROOT_VENV from this repository, bind-mounted at $CHROOT_SRC
#      (tests/services/lib/jim-venv.sh: reinstalled only when the sources changed).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
[ "$(id -u)" = 0 ] || arc7_die "setup.sh must run as root"
t0=$(date +%s.%N)

# -- 1. the chroot
for u in $MAPPED_UID $CLIENT_UID; do
    if getent passwd "$u" >/dev/null; then
        arc7_die "uid $u is a host account ($(getent passwd "$u" | cut -d: -f1)); the chroot's accounts need uids of their own"
    fi
done
JIM_TEST_HTC_ROOT=$ROOT
. "$HERE/../lib/trixie.sh"
trixie_ensure "${PKGS[@]}"
trixie_mount
inroot hostname -f >/dev/null 2>&1 || arc7_die "'hostname -f' fails in the chroot; fix $ROOT/etc/hosts"

# -- 2. accounts (chroot only)
install -d -m 755 "$ROOT$STATE" "$ROOT$STATE/home"
for spec in "$MAPPED:$MAPPED_UID" "$CLIENT:$CLIENT_UID"; do
    u=${spec%%:*}; id=${spec##*:}
    if ! inroot id "$u" >/dev/null 2>&1; then
        inroot groupadd -g "$id" "$u"
        inroot useradd -m -d "$STATE/home/$u" -u "$id" -g "$id" -s /bin/bash "$u"
        arc7_say "created account $u ($id) in the chroot"
    fi
    chmod 700 "$ROOT$STATE/home/$u"
done
CH=$STATE/home/$CLIENT

# -- 3. state dir and certificates
install -d -m 755 "$ROOT$STATE"/{etc,run,log,host,certificates,control,session,rte}
install -d -m 1777 "$ROOT$STATE/tmp"
TESTCA=(arcctl test-ca --ca-dir "$STATE/certificates" --ca-id "$CA_ID")
if [ ! -s "$ROOT$STATE/certificates/ARC-TestCA-$CA_ID.pem" ]; then
    inroot "${TESTCA[@]}" init -v 3650 >/dev/null
    rm -f "$ROOT$STATE/host/"*.pem "$ROOT$CH/.globus/"user*.pem
    arc7_say "test CA 'ARC TestCA $CA_ID' in $STATE/certificates"
fi
if [ ! -s "$ROOT$STATE/host/host-localhost-cert.pem" ]; then
    # (hostcert -n writes host-<name>-{cert,key}.pem into the working directory)
    chroot "$ROOT" /usr/bin/env -i -C "$STATE/host" PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root \
        "${TESTCA[@]}" hostcert -n localhost -v 3650 -f > "$ROOT$STATE/log/hostcert.out" 2>&1 \
        || { cat "$ROOT$STATE/log/hostcert.out" >&2; arc7_die "arcctl test-ca hostcert failed"; }
fi
if [ ! -s "$ROOT$CH/.globus/usercert.pem" ]; then
    inroot "${TESTCA[@]}" usercert -n "$USER_CN" -i "$CLIENT" -v 3650 --no-auth -f > "$ROOT$STATE/log/usercert.out" 2>&1 \
        || { cat "$ROOT$STATE/log/usercert.out" >&2; arc7_die "arcctl test-ca usercert failed"; }
    # (arcctl writes into the account's home as it finds it in the chroot's passwd)
    [ -s "$ROOT$CH/.globus/usercert.pem" ] || arc7_die "arcctl test-ca usercert wrote no $CH/.globus/usercert.pem"
    arc7_say "user certificate '$USER_DN' for $CLIENT"
fi
echo "$USER_DN" > "$ROOT$STATE/etc/user-dn"

# -- 4. the JWT issuer
printf '# for arcctl test-jwt / deploy jwt-issuer only\n[common]\nhostname=localhost\n\n[arex]\ncontroldir=%s/control\n' \
    "$STATE" > "$ROOT$JWTCONF"
jwt_iss() { inroot arcctl -c "$JWTCONF" test-jwt info 2>&1 | sed -n 's/.*JWKS for JWT Issuer \(https[^]]*\)\].*/\1/p' | head -1; }
iss=$(jwt_iss || true)
if [ -z "$iss" ]; then
    inroot arcctl -c "$JWTCONF" test-jwt init >/dev/null 2>&1 || arc7_die "arcctl test-jwt init failed"
    iss=$(jwt_iss || true)
fi
[ -n "$iss" ] || arc7_die "no test JWT issuer (arcctl test-jwt info)"
if ! grep -qsx "$iss" "$ROOT$STATE"/control/tokenissuers/*/issuer; then
    url=$(inroot arcctl -c "$JWTCONF" test-jwt export 2>/dev/null | grep -o 'test-jwt://[^ ]*' | tail -1)
    inroot arcctl -c "$JWTCONF" deploy jwt-issuer "$url" > "$ROOT$STATE/log/jwt-deploy.out" 2>&1 \
        || { cat "$ROOT$STATE/log/jwt-deploy.out" >&2; arc7_die "arcctl deploy jwt-issuer failed"; }
    arc7_say "test JWT issuer $iss trusted (control/tokenissuers)"
fi
echo "$iss" > "$ROOT$STATE/etc/jwt-issuer"

# -- 5. the client's configuration (REST is the ARC 7 client's default interface)
install -d -o "$CLIENT_UID" -g "$CLIENT_UID" -m 700 "$ROOT$CH/.arc" "$ROOT$CH/jobs"
cat > "$ROOT$CH/.arc/client.conf" <<EOF
[common]
certificatepath=$CH/.globus/usercert.pem
keypath=$CH/.globus/userkey.pem
cacertificatesdirectory=$STATE/certificates
proxypath=$CH/.arc/proxy.pem
joblist=$CH/.arc/jobs.dat
timeout=30
EOF
chown "$CLIENT_UID:$CLIENT_UID" "$ROOT$CH/.arc/client.conf"

# -- 6. jim, from this checkout
install -d "$ROOT$CHROOT_SRC"
if mountpoint -q "$ROOT$CHROOT_SRC" && [ "$(stat -c %d:%i "$ROOT$CHROOT_SRC")" != "$(stat -c %d:%i "$REPO")" ]; then
    umount -l "$ROOT$CHROOT_SRC"   # another clone of jim was mounted there
fi
mountpoint -q "$ROOT$CHROOT_SRC" || mount --bind "$REPO" "$ROOT$CHROOT_SRC"
inroot "$CHROOT_SRC/tests/services/lib/jim-venv.sh" "$CHROOT_VENV" /var/log/jim-venv \
    || arc7_die "installing jim in the chroot failed (see $ROOT/var/log/jim-venv/pip.log)"
arc7_say "setup done in $(elapsed "$t0") s: $(inroot dpkg-query -W -f='${Package} ${Version} ' nordugrid-arc-arex nordugrid-arc-client)"
