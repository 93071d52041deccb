#!/bin/sh
# SPDX-License-Identifier: MIT
# Installs Lodestar v1.5.1 (the `lodestar` CLI of @chainsafe/lodestar) for the e2e devnet,
# reproducibly: `npm ci` from the committed e2e/lodestar/package-lock.json into a cache dir.
#
#   e2e/install.sh            install (does nothing when already installed)
#   e2e/install.sh --force    reinstall
#   e2e/install.sh --path     print the path of lodestar's entry point (install first)
#
# Cache dir: $BM_E2E_CACHE, default e2e/.cache/ (git-ignored). Lodestar ends up in
# $BM_E2E_CACHE/lodestar-1.5.1/node_modules/@chainsafe/lodestar/lib/index.js.
# Needs node >= 18 with npm, and python3, make and g++ for the native addons (node-gyp
# builds some of them from source; the headers come from /usr/include/node, nothing is
# downloaded but the npm packages). Missing Debian packages are installed with apt-get.
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${BM_E2E_CACHE:-$HERE/.cache}
DEST=$CACHE/lodestar-1.5.1
ENTRY=$DEST/node_modules/@chainsafe/lodestar/lib/index.js
STAMP=$DEST/.bm-installed

if [ "${1:-}" = --path ]; then
  echo "$ENTRY"
  exit 0
fi

log() { echo "e2e/install: $*" >&2; }

# --- Debian packages -------------------------------------------------------------------
need=""
command -v node >/dev/null 2>&1 || need="$need nodejs libnode-dev"
command -v npm >/dev/null 2>&1 || need="$need npm"
command -v python3 >/dev/null 2>&1 || need="$need python3"
command -v make >/dev/null 2>&1 || need="$need make"
command -v g++ >/dev/null 2>&1 || need="$need g++"
command -v curl >/dev/null 2>&1 || need="$need curl"
if [ -n "$need" ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { log "not root and no sudo; install:$need"; exit 1; }
    SUDO=sudo
  fi
  log "installing Debian packages:$need"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  # shellcheck disable=SC2086
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need
fi

node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 18 ]; then
  log "node $(node --version) is too old: Lodestar v1.5.1 needs node >= 18"
  exit 1
fi

# --- idempotence: the stamp records what was installed with which node ------------------
want=$(cat "$HERE/lodestar/package.json" "$HERE/lodestar/package-lock.json" | sha256sum | cut -d' ' -f1)
want="$want node-$(node -p 'process.versions.modules')"
if [ "${1:-}" != --force ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -f "$ENTRY" ]; then
  log "Lodestar v1.5.1 already installed in $DEST"
  exit 0
fi

# --- npm ci ------------------------------------------------------------------------------
mkdir -p "$DEST"
rm -f "$STAMP"
cp "$HERE/lodestar/package.json" "$HERE/lodestar/package-lock.json" "$DEST/"
# node-gyp would download the node headers; use the ones the nodejs package installed.
if [ -z "${npm_config_nodedir:-}" ] && [ -f /usr/include/node/node.h ]; then
  npm_config_nodedir=/usr
  export npm_config_nodedir
fi
log "npm ci in $DEST (about 2 minutes on 2 cores; native addons are compiled)"
start=$(date +%s)
(cd "$DEST" && npm ci --no-audit --no-fund --update-notifier=false >"$DEST/npm-ci.log" 2>&1) || {
  log "npm ci failed; the last lines of $DEST/npm-ci.log:"
  tail -n 30 "$DEST/npm-ci.log" >&2
  exit 1
}

# --- check that it runs ------------------------------------------------------------------
version=$(node --no-warnings "$ENTRY" --version 2>/dev/null | sed -n 's/.*Version: *//p' | head -n 1)
case "$version" in
  v1.5.1*) ;;
  *) log "installed, but 'lodestar --version' printed '$version', not v1.5.1"; exit 1 ;;
esac
echo "$want" >"$STAMP"
log "Lodestar $version installed in $DEST in $(( $(date +%s) - start )) s"
