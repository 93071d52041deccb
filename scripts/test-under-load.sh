#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs `make test` RUNS times in a row (default 5) on a fresh clone of this checkout's HEAD,
# with two busy CPU loops (`yes >/dev/null`, at the tests' own nice level) running beside
# it the whole time, and stops at the first red run. The integration tests measure timing
# against real slot clocks: a test that fails only when the machine is busy is a real bug
# (in the code or in the test), and this is how the project shows it has none it knows of
# (docs/testing.md). Each run's log is kept in DIR (default /tmp/bm-under-load).
#   scripts/test-under-load.sh [RUNS] [DIR]
set -eu
RUNS=${1:-5}
DIR=${2:-/tmp/bm-under-load}
SRC=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$DIR"
mkdir -p "$DIR"
git clone -q "$SRC" "$DIR/clone"
commit=$(git -C "$DIR/clone" rev-parse --short HEAD)

yes >/dev/null &
y1=$!
yes >/dev/null &
y2=$!
trap 'kill $y1 $y2 2>/dev/null' EXIT INT TERM

echo "make test x$RUNS on $commit beside two busy loops; logs in $DIR"
i=1
while [ "$i" -le "$RUNS" ]; do
  start=$(date +%s)
  if (cd "$DIR/clone" && make test) >"$DIR/run$i.log" 2>&1; then
    result=green
  else
    result=RED
  fi
  took=$(($(date +%s) - start))
  echo "run $i: $result in ${took}s, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ "$result" = RED ]; then
    grep -E 'Failed|FAIL:|ERROR:' "$DIR/run$i.log" | head -n 20
    exit 1
  fi
  i=$((i + 1))
done
echo "all $RUNS green"
