#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs every libFuzzer harness built by the fuzz preset for SECONDS each (default 30).
# New inputs go to a scratch corpus first so the checked-in seeds stay small; crashes are
# written to fuzz/artifacts/ and fail the run.
set -eu
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-30}
mkdir -p fuzz/artifacts
status=0
for bin in build/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin" | sed 's/^fuzz_//')
  scratch=$(mktemp -d "/tmp/bm-fuzz-$name.XXXXXX")
  echo "=== fuzz_$name for ${SECONDS_EACH}s (seeds: fuzz/corpus/$name)"
  if ! "$bin" -max_total_time="$SECONDS_EACH" -print_final_stats=1 \
       -artifact_prefix="fuzz/artifacts/$name-" "$scratch" "fuzz/corpus/$name" 2>"$scratch.log"; then
    echo "fuzz_$name FAILED; see fuzz/artifacts/ and $scratch.log" >&2
    tail -n 30 "$scratch.log" >&2
    status=1
  else
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$scratch.log" | sed 's/^/  /'
  fi
  rm -rf "$scratch"
done
exit $status
