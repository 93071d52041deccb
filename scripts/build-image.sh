#!/bin/sh
# SPDX-License-Identifier: MIT
# Builds the container image localhost/beaconmux:<version> offline (make image).
# Usage: scripts/build-image.sh BUILD_DIR   (where make package left the .deb)
#
# rootfs/ gets the package's files (dpkg -x), exactly the shared libraries the binaries
# load (ldd, with the dynamic loader), the CA bundle, a passwd/group naming the
# unprivileged user 65532, and the container's configuration; then podman builds
# contrib/container/Containerfile FROM scratch on it. No registry is contacted.
set -eu
build=${1:-build/release}
src=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n 's/^project(beaconmux VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
deb="$build/beaconmux_${version}-1_amd64.deb"
[ -f "$deb" ] || { echo "build-image: $deb is missing (make package)" >&2; exit 1; }
tag="localhost/beaconmux:$version"

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
root="$ctx/rootfs"
mkdir -p "$root"
dpkg -x "$deb" "$root"
# only what runs in a container: no units, maintainer docs or man pages
rm -rf "$root/lib/systemd" "$root/usr/share/man"
cp "$src/contrib/container/beaconmux.yaml" "$root/etc/beaconmux/beaconmux.yaml"

# the shared libraries, at the paths the dynamic loader looks them up (ldd's left side
# resolves through the host's symlinks: copy the files they point to under those names)
for bin in "$root/usr/bin/beaconmux" "$root/usr/bin/beaconsim"; do
  ldd "$bin" | awk '/=> \//{print $3} /^\t\/[^ ]+ \(/{print $1}'
done | sort -u | while read -r lib; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done

mkdir -p "$root/etc/ssl/certs"
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/:/nonexistent\nbeaconmux:x:65532:65532:beaconmux:/var/lib/beaconmux:/nonexistent\n' \
  > "$root/etc/passwd"
printf 'root:x:0:\nbeaconmux:x:65532:\n' > "$root/etc/group"
mkdir -p "$root/var/lib" "$root/tmp" "$ctx/state"
chmod 1777 "$root/tmp"
chmod 0700 "$ctx/state" # /var/lib/beaconmux, given to 65532 by the Containerfile

cp "$src/contrib/container/Containerfile" "$ctx/Containerfile"
podman build --pull=never --network=none -t "$tag" -f "$ctx/Containerfile" "$ctx"
echo "build-image: $tag"
