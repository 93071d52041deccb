#!/bin/bash
# SPDX-License-Identifier: MIT
# Idle resident memory of beaconmux (release build) with three upstreams that answer
# discovery, measured after discovery completed and the process settled.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BIN=${BM_BIN:-build/release/beaconmux}
bench_start mem
P1=$(free_port); P2=$(free_port); P3=$(free_port); MUX=$(free_port)
GENESIS=$(( $(date +%s) - 3600 ))
cat > "$WORK/nginx.conf" <<CONF
worker_processes 1; daemon off; pid $WORK/nginx.pid; error_log $WORK/error.log warn;
events { worker_connections 256; }
http {
  access_log off; client_body_temp_path $WORK; proxy_temp_path $WORK; fastcgi_temp_path $WORK;
  uwsgi_temp_path $WORK; scgi_temp_path $WORK;
  server {
    listen 127.0.0.1:$P1; listen 127.0.0.1:$P2; listen 127.0.0.1:$P3;
    default_type application/json;
    location = /eth/v1/node/version { return 200 '{"data":{"version":"Teku/v25.1.0/linux-x86_64"}}'; }
    location = /eth/v1/beacon/genesis { return 200 '{"data":{"genesis_time":"$GENESIS","genesis_validators_root":"0x4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b","genesis_fork_version":"0x10000000"}}'; }
    location = /eth/v1/config/spec { return 200 '{"data":{"SECONDS_PER_SLOT":"12","SLOTS_PER_EPOCH":"32","GENESIS_FORK_VERSION":"0x10000000"}}'; }
    location = /eth/v1/config/fork_schedule { return 200 '{"data":[]}'; }
    location = /eth/v1/config/deposit_contract { return 200 '{"data":{"chain_id":"1","address":"0x00000000219ab540356cbb839cbe05303d7705fa"}}'; }
    location / { return 404 '{"code":404,"message":"not found"}'; }
  }
}
CONF
nginx -c "$WORK/nginx.conf" -p "$WORK" & PIDS+=($!)
"$BIN" --listen "127.0.0.1:$MUX" --upstream "http://127.0.0.1:$P1" --upstream "http://127.0.0.1:$P2" \
  --upstream "http://127.0.0.1:$P3" --log-level warn & MUXPID=$!; PIDS+=($MUXPID)
for _ in $(seq 1 100); do
  if curl -fs "http://127.0.0.1:$MUX/eth/v1/beacon/genesis" >/dev/null 2>&1; then break; fi
  sleep 0.1
done
curl -fs "http://127.0.0.1:$MUX/beaconmux/v1/status" >/dev/null
sleep 3   # settle: this is a measurement of the idle state, not synchronisation
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$MUXPID/status")
echo "idle resident memory with three upstreams: ${rss} KiB ($(awk "BEGIN{printf \"%.1f\", $rss/1024}") MiB; the libcurl-only build had 11.1 MiB: it must not grow past that)"
