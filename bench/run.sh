#!/bin/bash
# SPDX-License-Identifier: MIT
# make bench: every benchmark of the project, one after the other.
set -euo pipefail
cd "$(dirname "$0")"
# every benchmark measures the release build
export BM_BIN_DIR="${BM_BIN_DIR:-$(cd .. && pwd)/build/release}"
for b in proxy.sh memory.sh sim.sh events.sh duties.sh broadcast.py readpath.py cache.sh metrics.py shared.py; do
  if [ -x "$b" ]; then
    echo "=== bench/$b"
    "./$b"
  fi
done
# instructions and system calls per proxied request, for beaconmux and the two proxies it is
# compared with (callgrind counts do not depend on what else runs on the machine)
for t in ${BENCH_COST_TARGETS:-beaconmux nginx haproxy}; do
  echo "=== bench/cost.sh ($t)"
  COST_TARGET=$t ./cost.sh
done
