#!/bin/bash
# start.sh -- build the Grid Community Toolkit's own GRAM job-manager test
# suite (globus-gram-job-manager 15.8, directory test/ of its upstream
# tarball) for the GRAM test site of tests/services/gram. Idempotent: a
# second run with the same source does nothing. Run as root, after
# tests/services/gram/start.sh. Nothing of the suite is kept in this
# repository: the source comes from Debian's archive at build time.
#
#   1. apt-installs the headers and tools the suite's C clients need;
#   2. adds a deb-src entry for bookworm (its own file), updates the lists
#      (all of them: an update restricted to one file drops the others) and
#      fetches the source package with `apt-get source --download-only`
#      (only the upstream tarball is used);
#   3. compiles test/client/*.c against the installed libraries with
#      pkg-config (the upstream build uses libtool's preloading, which the
#      tests do not need: the one LTDL_SET_PRELOADED_SYMBOLS line is left
#      out of the compiled copy), copies the Perl drivers and the RSL data
#      of test/jobmanager/, and makes it all readable by the submitting
#      account.
#
# Result: $STATE/suite/{client,jobmanager}/ and $STATE/suite/VERSION.
# run.sh runs it against a job-manager contact.
#
# Environment: JIM_GRAM_TEST_STATE (default /var/lib/jim-gram-test),
#   JIM_GRAM_SUITE_VERSION (default 15.8).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
LIB=$(cd "$HERE/../lib" && pwd)
STATE=${JIM_GRAM_TEST_STATE:-/var/lib/jim-gram-test}
VERSION=${JIM_GRAM_SUITE_VERSION:-15.8}
SUITE=$STATE/suite
SRC=$STATE/suite-src
PKG=globus-gram-job-manager
SOURCES=/etc/apt/sources.list.d/jim-test-bookworm-src.sources
CLIENT_MODULES=(globus-common globus-gram-protocol globus-io globus-rsl globus-gss-assist
                globus-gram-client globus-gass-server-ez globus-gass-transfer globus-gssapi-gsi)
PACKAGES=(gcc libc6-dev pkg-config libltdl-dev perl
          libglobus-common-dev libglobus-gram-protocol-dev libglobus-io-dev libglobus-rsl-dev
          libglobus-gss-assist-dev libglobus-gram-client-dev libglobus-gass-server-ez-dev
          libglobus-gass-transfer-dev libglobus-gssapi-gsi-dev)

if [ "$(id -u)" -ne 0 ]; then
    echo "start.sh: must run as root" >&2
    exit 1
fi
if [ -f "$SUITE/VERSION" ] && [ "$(cat "$SUITE/VERSION")" = "$VERSION" ] \
   && [ -x "$SUITE/client/register-test" ]; then
    echo "== GRAM job-manager suite $VERSION already built in $SUITE"
    exit 0
fi

echo "== packages for the suite's C clients"
"$LIB/apt-install.sh" gram-suite "${PACKAGES[@]}"

echo "== source of $PKG $VERSION"
mkdir -p "$SRC"
tarball=$SRC/${PKG}_$VERSION.orig.tar.gz
if [ ! -s "$tarball" ]; then
    if [ ! -e "$SOURCES" ]; then
        cat > "$SOURCES" <<SRCEOF
# Added by jim's tests/services/gram-suite/start.sh: source packages, for the
# GRAM job-manager test suite.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRCEOF
    fi
    apt-get -q update >"$SRC/apt-update.log" 2>&1 || { tail -20 "$SRC/apt-update.log" >&2; exit 1; }
    # The Debian part may be missing from a snapshot mirror; only the upstream
    # tarball is needed, so the answer of apt-get is judged by that file.
    (cd "$SRC" && apt-get source --download-only "$PKG=$VERSION-2" >"$SRC/apt-source.log" 2>&1) \
        || (cd "$SRC" && apt-get source --download-only "$PKG" >>"$SRC/apt-source.log" 2>&1) || true
    if [ ! -s "$tarball" ]; then
        tail -20 "$SRC/apt-source.log" >&2
        echo "start.sh: apt-get source did not fetch $tarball" >&2
        exit 1
    fi
fi
rm -rf "$SRC/tree" && mkdir -p "$SRC/tree"
tar -xzf "$tarball" -C "$SRC/tree"
test_dir=$(echo "$SRC"/tree/*/test)
[ -d "$test_dir/client" ] && [ -d "$test_dir/jobmanager" ] || { echo "start.sh: no test/ in $tarball" >&2; exit 1; }

echo "== build"
rm -rf "$SUITE.new" && mkdir -p "$SUITE.new/client" "$SUITE.new/build"
read -r -a cflags <<<"$(pkg-config --cflags "${CLIENT_MODULES[@]}")"
read -r -a libs <<<"$(pkg-config --libs "${CLIENT_MODULES[@]}")"
for c in "$test_dir"/client/*.c; do
    name=$(basename "$c" .c)
    sed '/LTDL_SET_PRELOADED_SYMBOLS();/d' "$c" > "$SUITE.new/build/$name.c"
    gcc -O1 -w -I"$test_dir/.." "${cflags[@]}" -o "$SUITE.new/client/$name" \
        "$SUITE.new/build/$name.c" "${libs[@]}" -lltdl
done
cp "$test_dir"/client/*.pl "$SUITE.new/client/"
cp -r "$test_dir/jobmanager" "$SUITE.new/jobmanager"
find "$SUITE.new/jobmanager" -name 'Makefile*' -delete
find "$SUITE.new/jobmanager" -name '*.pl.in' -exec sh -c 'mv "$1" "${1%.in}"' sh {} \;
rm -rf "$SUITE.new/build"
echo "$VERSION" > "$SUITE.new/VERSION"
chmod -R a+rX,go-w "$SUITE.new"
rm -rf "$SUITE" && mv "$SUITE.new" "$SUITE"
echo "== GRAM job-manager suite $VERSION built in $SUITE ($(ls "$SUITE/client" | wc -l) client files)"
