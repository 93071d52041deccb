#!/bin/bash
# SPDX-License-Identifier: MIT
# The cluster event stream under 5,000 subscribers (release build): beaconsim with three
# nodes lagging 0 / 300 / 2000 ms behind beaconmux; bench/events_client.c (built here with
# cc) opens N subscriptions to beaconmux and one directly to the fastest node, and reports
# each head's delivery delay against that direct subscriber (kernel receive timestamps),
# heads missing or duplicated, and whether one extra subscriber that never reads was cut.
# Also beaconmux's resident memory before the subscribers, at its peak with them, its CPU
# time per slot (a figure the machine's other load does not distort), and the log line of
# the drop. Baseline, first: the same N subscribers directly on the fastest beaconsim node
# (its own fan-out, also one libuv loop), measured the same way. subscriberMaxPending is set to 16 KiB here so that the stalled
# subscriber is cut within the run (the default, 1 MiB, would take minutes at a few KB of
# events per slot); the other subscribers never come near it.
#
#   N=5000 SECONDS_RUN=30 bench/events.sh
#
# On one machine both ends of every connection share the process limit of open files
# (here 20,000): 5,000 is what fits with the baseline run; the figures per subscriber
# (memory, CPU per slot) give larger counts.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BIN=${BM_BIN_DIR:-build/release}
N=${N:-5000}
RUN=${SECONDS_RUN:-30}
if [ ! -x "$BIN/beaconmux" ] || [ ! -x "$BIN/beaconsim" ]; then
  cmake --preset release >/dev/null && cmake --build --preset release >/dev/null
fi
bench_start events
cc -O2 -std=c17 -D_GNU_SOURCE -Wall -Wextra -Werror -o "$WORK/events_client" bench/events_client.c

"$BIN/beaconsim" --nodes 3 --base-port 0 --slot-ms 1000 --slots-per-epoch 8 --log-level warn \
  --node 1:lag=300 --node 2:lag=2000 >"$WORK/sim.out" 2>"$WORK/sim.err" &
PIDS+=($!)
for _ in $(seq 1 100); do grep -q '^control ' "$WORK/sim.out" && break; sleep 0.05; done
mapfile -t NODES < <(awk '/^node /{print $3}' "$WORK/sim.out")
NODE0_PORT=${NODES[0]##*:}
{
  echo "events:"
  echo "  subscriberMaxPending: 16KiB"
  echo "server:"
  echo "  maxConnections: $((N + 100))"
  echo "  maxConnectionsPerClient: $((N + 100))"  # every subscriber comes from 127.0.0.1
  echo "upstreams:"
  for i in "${!NODES[@]}"; do echo "  - id: n$i"; echo "    url: ${NODES[$i]}"; done
} >"$WORK/mux.yaml"
"$BIN/beaconmux" --config "$WORK/mux.yaml" --listen 127.0.0.1:0 --log-level warn \
  2>"$WORK/mux.log" &
MUXPID=$!
PIDS+=($MUXPID)
# the port: warn level hides the "listening" line, so ask the kernel
PORT=""
for _ in $(seq 1 100); do
  PORT=$(ss -ltnpH 2>/dev/null | awk -v pid="pid=$MUXPID," '$0 ~ pid {split($4, a, ":"); print a[2]; exit}')
  [ -n "$PORT" ] && break
  sleep 0.05
done
[ -n "$PORT" ] || { echo "beaconmux did not listen"; cat "$WORK/mux.log"; exit 1; }
for _ in $(seq 1 150); do
  if curl -fs "http://127.0.0.1:$PORT/beaconmux/v1/status" | grep -q '"cluster_head":{'; then break; fi
  sleep 0.1
done
rss() { awk '/^VmRSS/ {print $2}' "/proc/$MUXPID/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
SIMPID=${PIDS[0]}
# baseline: the fastest node's own fan-out to N subscribers (beaconsim refuses a bare
# `Accept: text/event-stream` with 406, hence the wider Accept)
S0=$(cpu_ticks "$SIMPID")
"$WORK/events_client" --mux "$NODE0_PORT" --node "$NODE0_PORT" --n "$N" --seconds "$RUN" \
  --accept "text/event-stream, */*;q=0.1" >"$WORK/base.out" || true
S1=$(cpu_ticks "$SIMPID")
RSS0=$(rss)
C0=$(cpu_ticks "$MUXPID")
"$WORK/events_client" --mux "$PORT" --node "$NODE0_PORT" --n "$N" --seconds "$RUN" --stall \
  >"$WORK/client.out" &
CLIENT=$!
PIDS+=($CLIENT)
PEAK=$RSS0
while kill -0 "$CLIENT" 2>/dev/null; do
  r=$(rss)
  [ "$r" -gt "$PEAK" ] && PEAK=$r
  sleep 0.5
done
set +e
wait "$CLIENT"
RC=$?
set -e
RSS1=$(rss)
C1=$(cpu_ticks "$MUXPID")
HZ=$(getconf CLK_TCK)
echo "beaconmux + beaconsim (3 nodes, lag 0/300/2000 ms, 1 s slots), $N subscribers for ${RUN} s;" \
  "2 cores shared with the client, the sim and other work (load average $(cut -d' ' -f1 /proc/loadavg))"
echo "topics: head, head_v2, block, block_gossip, payload_attributes, finalized_checkpoint"
echo "--- baseline: $N subscribers directly on the fastest beaconsim node"
sed 's/^/  /' "$WORK/base.out"
echo "  beaconsim CPU: $(( (S1 - S0) * 1000 / HZ )) ms over ${RUN} s (3 nodes)"
echo "--- $N subscribers on beaconmux (+1 that never reads)"
sed 's/^/  /' "$WORK/client.out"
echo "  beaconmux CPU: $(( (C1 - C0) * 1000 / HZ )) ms over ${RUN} s, i.e." \
  "$(( (C1 - C0) * 1000 / HZ / RUN )) ms per 1 s slot"
echo "beaconmux resident memory: ${RSS0} KiB before the subscribers, peak ${PEAK} KiB with them" \
  "($(( (PEAK - RSS0) * 1024 / N )) bytes per subscriber), ${RSS1} KiB after they left"
grep -m1 "dropped" "$WORK/mux.log" | sed 's/^/beaconmux log: /' || echo "beaconmux log: no drop logged"
if [ "$RC" -ne 0 ]; then
  echo "FAILED (events_client exit $RC)"
  tail -20 "$WORK/mux.log"
  exit 1
fi
