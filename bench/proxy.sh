#!/bin/bash
# SPDX-License-Identifier: MIT
# Proxy benchmark: wrk at 64 connections against one small GET served by a local upstream
# (nginx returning a fixed ~300-byte JSON body), measured directly, through beaconmux,
# through nginx as a plain reverse proxy and through haproxy. The servers (upstream and
# proxy) are pinned to core 0 and wrk to core 1, so the figures compare the server-side
# cost of a request. Prints requests/s, p50 and p99 of each and the ratio to direct.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BM_BIN:-build/release/beaconmux}
DURATION=${BENCH_SECONDS:-10}
CONNS=${BENCH_CONNECTIONS:-64}
PATH_UNDER_TEST=/eth/v1/beacon/states/head/finality_checkpoints
WORK=$(mktemp -d /tmp/bm-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 200); do
    if python3 -c "import socket,sys;socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "bench: nothing listening on port $1" >&2; cat "$WORK"/*.log "$WORK"/*/stderr "$WORK"/*/error.log 2>/dev/null >&2; return 1
}

UP_PORT=$(free_port); MUX_PORT=$(free_port); NGX_PORT=$(free_port); HAP_PORT=$(free_port)
GENESIS=$(( $(date +%s) - 3600 ))
BODY='{"execution_optimistic":false,"finalized":false,"data":{"previous_justified":{"epoch":"10","root":"0x4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b"},"current_justified":{"epoch":"11","root":"0x9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c"},"finalized":{"epoch":"10","root":"0x4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b"}}}'

# The upstream: nginx answering the bench path and what beaconmux's discovery asks.
mkdir -p "$WORK/up" "$WORK/ngx" "$WORK/hap"
cat > "$WORK/up/nginx.conf" <<CONF
worker_processes 1; daemon off; pid $WORK/up/nginx.pid; error_log $WORK/up/error.log warn;
events { worker_connections 4096; }
http {
  access_log off; keepalive_requests 1000000; keepalive_timeout 300s;
  client_body_temp_path $WORK/up; proxy_temp_path $WORK/up; fastcgi_temp_path $WORK/up;
  uwsgi_temp_path $WORK/up; scgi_temp_path $WORK/up;
  server {
    listen 127.0.0.1:$UP_PORT;
    default_type application/json;
    location = $PATH_UNDER_TEST { return 200 '$BODY'; }
    location = /eth/v1/node/version { return 200 '{"data":{"version":"Lighthouse/v7.0.0/x86_64-linux"}}'; }
    location = /eth/v1/beacon/genesis { return 200 '{"data":{"genesis_time":"$GENESIS","genesis_validators_root":"0x4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b","genesis_fork_version":"0x10000000"}}'; }
    location = /eth/v1/config/spec { return 200 '{"data":{"SECONDS_PER_SLOT":"12","SLOTS_PER_EPOCH":"32","GENESIS_FORK_VERSION":"0x10000000"}}'; }
    location = /eth/v1/config/fork_schedule { return 200 '{"data":[{"previous_version":"0x10000000","current_version":"0x10000000","epoch":"0"}]}'; }
    location = /eth/v1/config/deposit_contract { return 200 '{"data":{"chain_id":"1","address":"0x00000000219ab540356cbb839cbe05303d7705fa"}}'; }
  }
}
CONF
taskset -c 0 nginx -c "$WORK/up/nginx.conf" -p "$WORK/up" 2>"$WORK/up/stderr" & PIDS+=($!)
wait_port "$UP_PORT"

results=()
run_wrk() { # name port
  local name=$1 port=$2 out
  # warm-up (connections, caches), then the measured run
  taskset -c 1 wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$port$PATH_UNDER_TEST" >/dev/null
  out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "http://127.0.0.1:$port$PATH_UNDER_TEST")
  local rps p50 p99 errs
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  errs=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')
  results+=("$name|$rps|$p50|$p99|$errs")
}

run_wrk direct "$UP_PORT"

# beaconmux
taskset -c 0 "$BIN" --listen "127.0.0.1:$MUX_PORT" --upstream "http://127.0.0.1:$UP_PORT" \
  --log-level warn 2>"$WORK/beaconmux.log" & PIDS+=($!)
wait_port "$MUX_PORT"
run_wrk beaconmux "$MUX_PORT"

# nginx as a plain reverse proxy (upstream keep-alive, one worker like beaconmux's one loop)
cat > "$WORK/ngx/nginx.conf" <<CONF
worker_processes 1; daemon off; pid $WORK/ngx/nginx.pid; error_log $WORK/ngx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off; keepalive_requests 1000000; keepalive_timeout 300s;
  client_body_temp_path $WORK/ngx; proxy_temp_path $WORK/ngx; fastcgi_temp_path $WORK/ngx;
  uwsgi_temp_path $WORK/ngx; scgi_temp_path $WORK/ngx;
  upstream beacon { server 127.0.0.1:$UP_PORT; keepalive 128; }
  server {
    listen 127.0.0.1:$NGX_PORT;
    location / { proxy_pass http://beacon; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
taskset -c 0 nginx -c "$WORK/ngx/nginx.conf" -p "$WORK/ngx" & PIDS+=($!)
wait_port "$NGX_PORT"
run_wrk nginx "$NGX_PORT"

if command -v haproxy >/dev/null; then
  cat > "$WORK/hap/haproxy.cfg" <<CONF
global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 1s
  timeout client 30s
  timeout server 30s
  http-reuse always
frontend fe
  bind 127.0.0.1:$HAP_PORT
  default_backend be
backend be
  server up 127.0.0.1:$UP_PORT
CONF
  taskset -c 0 haproxy -f "$WORK/hap/haproxy.cfg" -db >"$WORK/hap/stderr" 2>&1 & PIDS+=($!)
  wait_port "$HAP_PORT"
  run_wrk haproxy "$HAP_PORT"
fi

python3 - "${results[@]}" <<'PY'
import sys
def ms(v):
    if not v: return float("nan")
    for suf, mul in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if v.endswith(suf):
            return float(v[:-len(suf)]) * mul
    return float(v)
rows = [r.split("|") for r in sys.argv[1:]]
base = float(rows[0][1])
print("\nproxy benchmark: wrk -t1 -c64, one ~300-byte JSON GET; servers on core 0, wrk on core 1")
print("%-10s %12s %10s %10s %8s  %s" % ("target", "requests/s", "p50 ms", "p99 ms", "ratio", "errors"))
for name, rps, p50, p99, errs in rows:
    print("%-10s %12.0f %10.3f %10.3f %8.2f  %s" % (name, float(rps), ms(p50), ms(p99), float(rps) / base, errs.strip()))
PY
