#!/bin/bash
# SPDX-License-Identifier: MIT
# make demo: beaconsim runs three simulated beacon nodes (node 0, the first configured,
# imports every block 5 s late, past the 4 s attestation deadline of a 12 s slot);
# beaconmux listens in front of them on 127.0.0.1:5555 (or a free port when that one is
# taken). The script prints what to open and what to try, then scores every slot: the root
# a validator would attest to through beaconmux versus straight to the lagging node.
# Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BM_BIN_DIR:-build/release}
SLOT_MS=${DEMO_SLOT_MS:-12000}
WORK=$(mktemp -d /tmp/bm-demo.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

"$BIN/beaconsim" --nodes 3 --base-port 0 --slot-ms "$SLOT_MS" --slots-per-epoch 8 \
  --node 0:client=prysm,lag=5000 --node 1:client=lighthouse --node 2:client=teku \
  --log-level warn >"$WORK/sim.out" 2>"$WORK/sim.log" &
PIDS+=($!)
for _ in $(seq 1 100); do grep -q '^control ' "$WORK/sim.out" 2>/dev/null && break; sleep 0.05; done
mapfile -t NODES < <(awk '$1=="node" {print $3}' "$WORK/sim.out")
CONTROL=$(awk '$1=="control" {print $2}' "$WORK/sim.out")
[ "${#NODES[@]}" -eq 3 ] || { echo "demo: beaconsim did not start:"; cat "$WORK/sim.log"; exit 1; }

PORT=5555
if python3 -c "import socket;socket.create_connection(('127.0.0.1',$PORT),0.2)" 2>/dev/null; then
  PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
fi
"$BIN/beaconmux" --listen "127.0.0.1:$PORT" --upstream "${NODES[0]}" --upstream "${NODES[1]}" \
  --upstream "${NODES[2]}" --log-level info 2>"$WORK/beaconmux.log" &
PIDS+=($!)
MUX="http://127.0.0.1:$PORT"
for _ in $(seq 1 100); do curl -fs "$MUX/eth/v1/beacon/genesis" >/dev/null 2>&1 && break; sleep 0.1; done

cat <<TXT

  beaconmux demo
  ==============
  beaconsim: three simulated beacon nodes, ${SLOT_MS} ms slots
    node0 ${NODES[0]}  (prysm, imports every block 5 s late: past the attestation deadline;
                                 configured first, as a single "primary" node would be)
    node1 ${NODES[1]}  (lighthouse, on time)
    node2 ${NODES[2]}  (teku, on time)
    control API ${CONTROL}
  beaconmux: ${MUX}   (log: $WORK/beaconmux.log)

  Open:
    curl -s ${MUX}/beaconmux/v1/status | python3 -m json.tool     # every node, its state, latency
    curl -s ${MUX}/healthz
    curl -s ${MUX}/eth/v1/beacon/genesis
  Try:
    take node1 down:   curl -s -X PUT ${CONTROL}/sim/v1/nodes/1 -d '{"down":true}'
    hang it instead:   curl -s -X PUT ${CONTROL}/sim/v1/nodes/1 -d '{"down":false,"hang":true}'
    make node2 fail:   curl -s -X PUT ${CONTROL}/sim/v1/nodes/2 -d '{"error_rate":1}'
    fork node2:        curl -s -X PUT ${CONTROL}/sim/v1/nodes/2 -d '{"error_rate":0,"fork":true}'
    put them right:    curl -s -X PUT ${CONTROL}/sim/v1/nodes/1 -d '{"reset":true}'
    the truth:         curl -s ${CONTROL}/sim/v1/truth
    the cluster's events: curl -sN "${MUX}/eth/v1/events?topics=head,chain_reorg"
  Point a validator client at ${MUX} (see README.md). Ctrl-C stops the demo.

  Every slot, at the attestation deadline, a validator asks for attestation data:
TXT
python3 scripts/demo_watch.py "$MUX" "${NODES[0]}" "$CONTROL"
