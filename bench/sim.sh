#!/bin/bash
# SPDX-License-Identifier: MIT
# beaconsim's cost: CPU of three idle nodes with 12 s slots over IDLE_SECONDS (default 60),
# and wrk at 64 connections on one node's attestation_data (beaconsim on core 0, wrk on
# core 1), JSON and SSZ.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BIN=${BM_BIN_DIR:-build/release}
IDLE=${IDLE_SECONDS:-60}
DURATION=${BENCH_SECONDS:-10}
bench_start simbench

start_sim() { # slot_ms
  "$BIN/beaconsim" --nodes 3 --base-port 0 --slot-ms "$1" --log-level warn >"$WORK/sim.out" 2>"$WORK/sim.err" &
  SIMPID=$!; PIDS+=($SIMPID)
  for _ in $(seq 1 100); do grep -q '^control ' "$WORK/sim.out" 2>/dev/null && break; sleep 0.05; done
  NODE0=$(awk '$1=="node" && $2=="0" {print $3}' "$WORK/sim.out")
  CONTROL=$(awk '$1=="control" {print $2}' "$WORK/sim.out")
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

start_sim 12000
HZ=$(getconf CLK_TCK)
t0=$(ticks "$SIMPID"); s0=$(date +%s.%N)
sleep "$IDLE"   # measuring idle CPU over a fixed window, not waiting for a condition
t1=$(ticks "$SIMPID"); s1=$(date +%s.%N)
python3 - "$t0" "$t1" "$s0" "$s1" "$HZ" <<'PY'
import sys
t0, t1, s0, s1, hz = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
cpu = (t1 - t0) / hz
print("beaconsim idle, 3 nodes, 12 s slots: %.3f CPU-seconds in %.0f s = %.3f%% of a core (goal < 1%%)"
      % (cpu, s1 - s0, 100.0 * cpu / (s1 - s0)))
PY
kill "$SIMPID"; wait "$SIMPID" 2>/dev/null || true

taskset -c 0 true
start_sim 12000
taskset -cp 0 "$SIMPID" >/dev/null
SLOT=$(curl -fs "$CONTROL/sim/v1/truth" | python3 -c 'import json,sys;print(json.load(sys.stdin)["current_slot"])')
URL="$NODE0/eth/v1/validator/attestation_data?slot=$SLOT&committee_index=0"
for mode in json ssz; do
  hdr=()
  [ "$mode" = ssz ] && hdr=(-H "Accept: application/octet-stream")
  taskset -c 1 wrk -t1 -c64 -d2s "${hdr[@]}" "$URL" >/dev/null
  out=$(taskset -c 1 wrk -t1 -c64 -d"${DURATION}s" --latency "${hdr[@]}" "$URL")
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  echo "beaconsim attestation_data ($mode), wrk -t1 -c64: $rps requests/s, p99 $p99"
done
