#!/bin/bash
# SPDX-License-Identifier: MIT
# make bench: every benchmark of the project, one after the other.
set -euo pipefail
cd "$(dirname "$0")"
for b in proxy.sh memory.sh sim.sh events.sh duties.sh; do
  if [ -x "$b" ]; then
    echo "=== bench/$b"
    "./$b"
  fi
done
