#!/bin/sh
# SPDX-License-Identifier: MIT
# Installs exactly the Debian 12 packages that building, testing, fuzzing, the demo and the
# benchmarks need. Does nothing when they are all present; uses sudo when not root.
# Usage: scripts/install-deps.sh [build|bench|observe|package|image]
#   bench adds wrk, nginx and haproxy; observe adds prometheus and promtool, chromium and
#   chromedriver (the tests of /metrics and of the web dashboard); package adds what builds
#   and checks the .deb (dpkg-dev for dpkg-shlibdeps, lintian); image adds podman and
#   buildah for the container image. Each test installs its own through this script.
set -eu

PACKAGES="cmake ninja-build pkg-config gcc make python3 \
  libuv1-dev libhttp-parser-dev libcurl4-openssl-dev libssl-dev libjson-c-dev libyaml-dev \
  libhiredis-dev zlib1g-dev libcmocka-dev clang-14 libclang-rt-14-dev curl openssl \
  redis-server"
case "${1:-build}" in
  bench) PACKAGES="$PACKAGES wrk nginx-light haproxy util-linux procps valgrind strace" ;;
  observe) PACKAGES="$PACKAGES prometheus chromium chromium-driver" ;;
  package) PACKAGES="$PACKAGES dpkg-dev lintian fakeroot" ;;
  image) PACKAGES="$PACKAGES dpkg-dev podman buildah ca-certificates" ;;
esac

missing=""
for p in $PACKAGES; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case "$status" in
    "install ok installed") ;;
    *) missing="$missing $p" ;;
  esac
done
[ -z "$missing" ] && exit 0

echo "install-deps: installing:$missing"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "install-deps: not root and no sudo; install these packages:$missing" >&2
    exit 1
  fi
fi
# A fresh machine has a stale package index: refresh it before installing.
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
# shellcheck disable=SC2086
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
