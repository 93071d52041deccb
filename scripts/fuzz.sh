#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs every libFuzzer harness built by the fuzz preset for SECONDS each (default 30), or to
# RUNS executions each when RUNS (the second argument) is given, SECONDS then being the
# bound of each (e.g. `make fuzz FUZZ_RUNS=10000000 FUZZ_SECONDS=7200`), then
# prints a table: per harness its result, executions, executions per second, new inputs
# found and peak memory, from libFuzzer's final stats (-print_final_stats=1).
# New inputs go to a scratch corpus first so the checked-in seeds stay small; crashes are
# written to fuzz/artifacts/ and fail the run (their log is kept and named).
# FUZZ_HARNESSES (names without fuzz_, e.g. "sse config") runs only those, so that long runs
# can be split over the cores: one `make fuzz` per core, each with its own list.
set -eu
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-30}
RUNS=${2:-}
mkdir -p fuzz/artifacts
status=0
rows=""

# The value of the last "stat::NAME: value" line of a libFuzzer log, or "-".
stat() {
  v=$(sed -n "s/^stat::$1: *//p" "$2" | tail -n 1)
  echo "${v:--}"
}

if [ -n "${FUZZ_HARNESSES:-}" ]; then
  bins=""
  for name in $FUZZ_HARNESSES; do
    if [ ! -x "build/fuzz/fuzz_$name" ]; then
      echo "fuzz.sh: no harness build/fuzz/fuzz_$name (FUZZ_HARNESSES=\"$FUZZ_HARNESSES\")" >&2
      exit 2
    fi
    bins="$bins build/fuzz/fuzz_$name"
  done
else
  bins=$(echo build/fuzz/fuzz_*)
fi

for bin in $bins; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin" | sed 's/^fuzz_//')
  scratch=$(mktemp -d "/tmp/bm-fuzz-$name.XXXXXX")
  log="$scratch.log"
  echo "=== fuzz_$name for ${SECONDS_EACH}s (seeds: fuzz/corpus/$name)"
  if "$bin" -max_total_time="$SECONDS_EACH" ${RUNS:+-runs="$RUNS"} -print_final_stats=1 \
       -artifact_prefix="fuzz/artifacts/$name-" "$scratch" "fuzz/corpus/$name" 2>"$log"; then
    result=ok
  else
    result=FAILED
    status=1
    echo "fuzz_$name FAILED; see fuzz/artifacts/ and $log" >&2
    tail -n 30 "$log" >&2
  fi
  rows="$rows$(printf '%-22s %-7s %12s %10s %6s %8s' "fuzz_$name" "$result" \
    "$(stat number_of_executed_units "$log")" "$(stat average_exec_per_sec "$log")" \
    "$(stat new_units_added "$log")" "$(stat peak_rss_mb "$log")")
"
  [ "$result" = ok ] && rm -f "$log"
  rm -rf "$scratch"
done

echo
echo "=== executions per harness (${SECONDS_EACH}s each)"
printf '%-22s %-7s %12s %10s %6s %8s\n' harness result runs runs/s new rss_mb
printf '%s' "$rows"
exit $status
