#!/bin/bash
# SPDX-License-Identifier: MIT
# CPU cost of one attestation_data answer served from a race, the counterpart of
# bench/cost.sh for the duty path: beaconsim runs three nodes with long slots (the slot
# does not change during the measurement), beaconmux runs under callgrind in front of them
# with instrumentation switched on only while bench/load.py sends COST_REQUESTS keep-alive
# GETs of the current slot's attestation data over COST_CONNECTIONS connections. Prints
# instructions per answer, per shared object, how many upstream requests the races cost
# (identical requests share a race), then system calls per answer under strace -c.
# COST_CONNECTIONS=1 makes every request a race of its own (three upstream requests): the
# cost of one whole race, whatever the load.
# COST_KEEP=DIR keeps the callgrind output there (for callgrind_annotate).
# Instruction counts do not depend on the machine's load; how many requests share a race
# does (it depends on how long a race runs), so it is printed next to them.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BM_BIN:-build/release/beaconmux}
SIM=${BM_SIM:-build/release/beaconsim}
N=${COST_REQUESTS:-4000}
C=${COST_CONNECTIONS:-16}
SLOT_MS=${COST_SLOT_MS:-600000}
WORK=$(mktemp -d /tmp/bm-cost-race.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
# get PORT PATH: the body of a GET, or nothing
get() { curl -s --max-time 5 "http://127.0.0.1:$1$2" || true; }

# the sim: genesis a few seconds ago would put slot 0 at start; with long slots the
# current slot stays the same for the whole run
"$SIM" --nodes 3 --base-port 0 --slot-ms "$SLOT_MS" --log-level warn >"$WORK/sim.out" 2>"$WORK/sim.err" &
PIDS+=($!)
for _ in $(seq 100); do grep -q '^control' "$WORK/sim.out" 2>/dev/null && break; sleep 0.1; done
mapfile -t NODES < <(awk '$1 == "node" {print $3}' "$WORK/sim.out")
CPORT=$(awk '$1 == "control" {print $2}' "$WORK/sim.out" | sed 's/.*://')
{
  echo "upstreams:"
  for i in "${!NODES[@]}"; do echo "  - {id: n$i, url: \"${NODES[$i]}\"}"; done
} >"$WORK/mux.yaml"

slot() { get "$CPORT" /sim/v1/truth | python3 -c 'import json,sys; print(json.load(sys.stdin)["current_slot"])'; }
# wait_ready PORT: every node ready and the cluster head on the current slot
wait_ready() {
  for _ in $(seq 600); do
    if get "$1" /beaconmux/v1/status | python3 -c '
import json, sys
s = json.load(sys.stdin)
ok = s.get("cluster_head") and all(u["state"] == "ready" for u in s["upstreams"])
sys.exit(0 if ok and int(s["cluster_head"]["slot"]) == int(sys.argv[1]) else 1)' "$(slot)" 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  echo "cost_race: beaconmux did not become ready" >&2
  exit 1
}
upstream_requests() {
  local t=0 i v
  for i in "${!NODES[@]}"; do
    v=$(get "$CPORT" "/sim/v1/nodes/$i/requests" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["data"].get("produceAttestationData", 0))')
    t=$((t + v))
  done
  echo "$t"
}

# --- instructions per answer (callgrind) ---
MUX_PORT=$(free_port)
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$WORK/cg.out" \
  "$BIN" --listen "127.0.0.1:$MUX_PORT" --config "$WORK/mux.yaml" --log-level warn \
  >"$WORK/cg.stdout" 2>"$WORK/cg.log" & VG=$!; PIDS+=($VG)
wait_ready "$MUX_PORT"
P="/eth/v1/validator/attestation_data?slot=$(slot)&committee_index=0"
python3 bench/load.py "$MUX_PORT" "$P" 200 "$C"   # warm-up: connections, pools
before=$(upstream_requests)
callgrind_control -i on "$VG" >/dev/null 2>&1
python3 bench/load.py "$MUX_PORT" "$P" "$N" "$C"
callgrind_control -i off "$VG" >/dev/null 2>&1
ups=$(( $(upstream_requests) - before ))
kill -TERM "$VG"; wait "$VG" 2>/dev/null || true
[ -n "${COST_KEEP:-}" ] && mkdir -p "$COST_KEEP" && cp "$WORK/cg.out" "$COST_KEEP/"
callgrind_annotate --inclusive=no --threshold=100 "$WORK/cg.out" 2>/dev/null | python3 -c '
import re, sys
n, ups = int(sys.argv[1]), int(sys.argv[2]); total = None; per = {}
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) \(.*\)\s+PROGRAM TOTALS", line) or re.match(r"\s*([\d,]+)\s+PROGRAM TOTALS", line)
    if m: total = int(m.group(1).replace(",", "")); continue
    m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+\S+:\S+.*\[(.*)\]", line)
    if m:
        obj = m.group(2).split("/")[-1].split(".so")[0]
        per[obj] = per.get(obj, 0) + int(m.group(1).replace(",", ""))
print("beaconmux: instructions per attestation_data answer: %.0f  (%d answers, %d upstream requests: %.1f answers per upstream request)" % (total / n, n, ups, n / max(1, ups)))
for obj, ir in sorted(per.items(), key=lambda kv: -kv[1]):
    if ir / n >= 100: print("  %-22s %8.0f" % (obj, ir / n))
' "$N" "$ups"

# --- system calls per answer (strace -c on the plain binary) ---
MUX_PORT=$(free_port)
"$BIN" --listen "127.0.0.1:$MUX_PORT" --config "$WORK/mux.yaml" --log-level warn \
  >"$WORK/mux.stdout" 2>"$WORK/mux.log" & MUX=$!; PIDS+=($MUX)
wait_ready "$MUX_PORT"
python3 bench/load.py "$MUX_PORT" "$P" 200 "$C"
strace -c -q -f -o "$WORK/strace.txt" -p "$MUX" & ST=$!
sleep 0.5 # strace attaches asynchronously
before=$(upstream_requests)
python3 bench/load.py "$MUX_PORT" "$P" "$N" "$C"
ups=$(( $(upstream_requests) - before ))
kill -INT "$ST"; wait "$ST" 2>/dev/null || true
python3 - "$N" "$ups" "$WORK/strace.txt" <<'PY'
import sys
n, ups = int(sys.argv[1]), int(sys.argv[2]); rows = []
for line in open(sys.argv[3]):
    f = line.split()
    if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
        rows.append((f[-1], int(f[3])))
print("system calls per answer: %.2f  (%.1f answers per upstream request)" % (
    sum(c for _, c in rows) / n, n / max(1, ups)))
for name, calls in sorted(rows, key=lambda r: -r[1]):
    if calls / n >= 0.01: print("  %-14s %6.2f" % (name, calls / n))
PY
