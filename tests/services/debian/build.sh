#!/usr/bin/env bash
# Build jim's Debian package from this checkout, the Debian way, in the build chroot ($STATE/build,
# made by setup.sh):
#   1. the checkout's files as git knows them (tracked, and new ones git does not ignore) go to /build/src;
#   2. the sdist is built there (python3 -m build --sdist, Debian's setuptools) and becomes the upstream
#      tarball, jim-jobmanager_<version>.orig.tar.gz; debian/ is added to its unpacked tree;
#   3. dpkg-buildpackage -us -uc builds the source package and the binary package (debian/rules:
#      dh --with python3 --buildsystem=pybuild).
# The results go to $STATE/out; the last line printed is the path of the .deb. Needs root.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
need_root
[ -x "$BUILD/usr/bin/dpkg-buildpackage" ] || die "no build chroot in $BUILD: run setup.sh first"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/pyproject.toml" | head -1)
deb_version=$(sed -n '1s/^[^ ]* (\([^)]*\)).*/\1/p' "$REPO/debian/changelog")
[ -n "$version" ] || die "no version in pyproject.toml"
[ "${deb_version%-*}" = "$version" ] || die "debian/changelog is at $deb_version, pyproject.toml at $version"
git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1 || die "$REPO is not a git checkout"

t0=$SECONDS
work=$BUILD/build
umount_root "$BUILD"
rm -rf --one-file-system "$work"
mkdir -p "$work/src" "$work/dist"
# (a tracked file deleted in the work tree is left out: what is built is what is there)
(cd "$REPO" && git ls-files -z --cached --others --exclude-standard) \
    | while IFS= read -r -d '' f; do [ -f "$REPO/$f" ] && printf '%s\0' "$f"; done \
    | tar -C "$REPO" --null -T - -cf - | tar -C "$work/src" -xf -

trap 'umount_root "$BUILD"' EXIT
mount_root "$BUILD"
log "sdist (python3 -m build --sdist --no-isolation)"
in_root "$BUILD" sh -c 'cd /build/src && python3 -m build --sdist --no-isolation --outdir /build/dist' \
    > "$work/sdist.log" 2>&1 || { tail -30 "$work/sdist.log" >&2; die "the sdist failed (log: $work/sdist.log)"; }
sdist=$(ls "$work"/dist/*.tar.gz)
cp "$sdist" "$work/jim-jobmanager_$version.orig.tar.gz"
tar -C "$work" -xzf "$sdist"
mv "$work/$(basename "$sdist" .tar.gz)" "$work/jim-jobmanager-$version"
cp -a "$work/src/debian" "$work/jim-jobmanager-$version/debian"

log "dpkg-buildpackage -us -uc (dh --with python3 --buildsystem=pybuild)"
t1=$SECONDS
in_root "$BUILD" sh -c "cd /build/jim-jobmanager-$version && dpkg-buildpackage -us -uc" \
    > "$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; die "dpkg-buildpackage failed (log: $work/build.log)"; }
log "dpkg-buildpackage took $((SECONDS - t1)) s"

rm -rf "$OUT"
mkdir -p "$OUT"
cp "$work"/jim-jobmanager_* "$work/build.log" "$OUT/"
deb=$OUT/jim-jobmanager_${deb_version}_all.deb
[ -f "$deb" ] || die "no $deb after the build"
log "built in $((SECONDS - t0)) s"
echo "$deb"
