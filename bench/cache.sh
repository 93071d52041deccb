#!/bin/bash
# SPDX-License-Identifier: MIT
# Cache benchmark, in one run:
#   1. cache-hit throughput and latency: wrk at 64 connections on one immutable read
#      (GET /eth/v2/beacon/blocks/0x<root>, an ~8 KiB JSON body) answered from beaconmux's
#      cache, from nginx with proxy_cache on the same route, and directly by the upstream;
#      servers on core 0, wrk on core 1, runs interleaved (BENCH_RUNS, default 3), medians
#      and the spread printed; also with Accept-Encoding: gzip (beaconmux serves the stored
#      gzip form, nginx's cache stores the identity body and gzips per hit with gzip on);
#   2. memory per cached entry: resident memory of beaconmux before and after filling its
#      cache with BENCH_ENTRIES distinct blocks, divided by the entries stored;
#   3. coalescing (bench/coalesce.py): 1,000 concurrent identical reads -> upstream requests.
# The machine may be shared: the load average is printed with the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
. bench/upstream.sh

BIN=${BM_BIN:-build/release/beaconmux}
DURATION=${BENCH_SECONDS:-5}
CONNS=${BENCH_CONNECTIONS:-64}
RUNS=${BENCH_RUNS:-3}
ENTRIES=${BENCH_ENTRIES:-4000}
bench_start cache

UP_PORT=$(free_port); MUX_PORT=$(free_port); NGX_PORT=$(free_port)
mkdir -p "$WORK/up" "$WORK/ngx" "$WORK/ngx/cache"
bench_upstream_conf "$UP_PORT" "$WORK/up"
taskset -c 0 nginx -c "$WORK/up/nginx.conf" -p "$WORK/up" 2>"$WORK/up/stderr" & PIDS+=($!)
wait_port "$UP_PORT"

ROOT=0x$(printf 'ab%.0s' $(seq 1 32))
CACHE_PATH=/eth/v2/beacon/blocks/$ROOT

taskset -c 0 "$BIN" --listen "127.0.0.1:$MUX_PORT" --upstream "http://127.0.0.1:$UP_PORT" \
  --log-level warn 2>"$WORK/beaconmux.log" & MUXPID=$!; PIDS+=($MUXPID)
wait_port "$MUX_PORT"
wait_http "$MUX_PORT" /healthz 100

cat > "$WORK/ngx/nginx.conf" <<CONF
worker_processes 1; daemon off; pid $WORK/ngx/nginx.pid; error_log $WORK/ngx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off; keepalive_requests 1000000; keepalive_timeout 300s;
  client_body_temp_path $WORK/ngx; proxy_temp_path $WORK/ngx; fastcgi_temp_path $WORK/ngx;
  uwsgi_temp_path $WORK/ngx; scgi_temp_path $WORK/ngx;
  proxy_cache_path $WORK/ngx/cache levels=1:2 keys_zone=beacon:16m max_size=64m inactive=60m;
  gzip on; gzip_types application/json; gzip_min_length 1024; gzip_comp_level 6;
  upstream beacon { server 127.0.0.1:$UP_PORT; keepalive 128; }
  server {
    listen 127.0.0.1:$NGX_PORT;
    location / {
      proxy_pass http://beacon; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_cache beacon; proxy_cache_valid 200 60m; proxy_cache_lock on;
      proxy_cache_key \$request_uri;
    }
  }
}
CONF
taskset -c 0 nginx -c "$WORK/ngx/nginx.conf" -p "$WORK/ngx" & PIDS+=($!)
wait_port "$NGX_PORT"

names=(direct beaconmux nginx-cache); ports=("$UP_PORT" "$MUX_PORT" "$NGX_PORT")
results=()
run_wrk() { # name port label [header]
  local name=$1 port=$2 label=$3 hdr=${4:-} out
  local args=(-t1 -c"$CONNS" --latency)
  [ -n "$hdr" ] && args+=(-H "$hdr")
  taskset -c 1 wrk "${args[@]}" -d2s "http://127.0.0.1:$port$CACHE_PATH" >/dev/null
  out=$(taskset -c 1 wrk "${args[@]}" -d"${DURATION}s" "http://127.0.0.1:$port$CACHE_PATH")
  local rps p50 p99 errs
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  errs=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')
  results+=("$label|$name|$rps|$p50|$p99|$errs")
}
for _ in $(seq 1 "$RUNS"); do
  for i in "${!names[@]}"; do
    run_wrk "${names[$i]}" "${ports[$i]}" identity
    run_wrk "${names[$i]}" "${ports[$i]}" gzip "Accept-Encoding: gzip"
  done
done
body=$(curl -fs "http://127.0.0.1:$MUX_PORT$CACHE_PATH" | wc -c)
hit=$(curl -fsi "http://127.0.0.1:$MUX_PORT$CACHE_PATH" | tr -d '\r' | awk -F': ' 'tolower($1)=="x-beaconmux-cache" {print $2}')
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$RUNS" "$CONNS" "$body" "$hit" "$LOAD" "${results[@]}" <<'PY'
import statistics, sys
def ms(v):
    if not v: return float("nan")
    for suf, mul in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if v.endswith(suf):
            return float(v[:-len(suf)]) * mul
    return float(v)
runs, conns, body, hit, load = sys.argv[1:6]
rows = {}
order = []
for r in sys.argv[6:]:
    label, name, rps, p50, p99, errs = r.split("|")
    k = (label, name)
    if k not in rows:
        order.append(k); rows[k] = []
    rows[k].append((float(rps), ms(p50), ms(p99), errs.strip()))
print("\ncache-hit benchmark: wrk -t1 -c%s on GET /eth/v2/beacon/blocks/0x<root> (%s-byte JSON, "
      "beaconmux answer: X-Beaconmux-Cache %s); median of %s runs, load average %s"
      % (conns, body, hit or "?", runs, load))
print("%-9s %-12s %12s %10s %10s %9s  %s" % ("encoding", "target", "requests/s", "p50 ms",
                                             "p99 ms", "vs nginx", "requests/s per run"))
for label in ("identity", "gzip"):
    med = {n: [statistics.median(c) for c in list(zip(*rows[(label, n)]))[:3]]
           for (l, n) in order if l == label}
    base = med.get("nginx-cache", [float("nan")])[0]
    for (l, n) in order:
        if l != label: continue
        rps, p50, p99 = med[n]
        per = " ".join("%.0f" % x[0] for x in rows[(l, n)])
        errs = " ".join(sorted({e for *_, e in rows[(l, n)] if e}))
        print("%-9s %-12s %12.0f %10.3f %10.3f %9.2f  %s %s" % (label, n, rps, p50, p99,
                                                                rps / base, per, errs))
PY

# ---- memory per cached entry ----------------------------------------------------------
rss() { awk '/^VmRSS/ {print $2}' "/proc/$MUXPID/status"; }
before=$(rss)
python3 - "$MUX_PORT" "$ENTRIES" <<'PY'
import http.client, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
for i in range(n):
    c.request("GET", "/eth/v2/beacon/blocks/0x%064x" % (i + 1))
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
PY
after=$(rss)
curl -fs "http://127.0.0.1:$MUX_PORT/beaconmux/v1/status" > "$WORK/status.json"
python3 - "$before" "$after" "$WORK/status.json" <<'PY'
import json, sys
before, after = int(sys.argv[1]), int(sys.argv[2])
c = json.load(open(sys.argv[3]))["cache"]
n = c["entries"] - 1  # the benchmark's own entry was there before
print("\nmemory per cached entry: %d entries stored (~8 KiB JSON + its gzip form each); "
      "resident +%d KiB = %.0f bytes per entry; the store counts %.0f bytes per entry "
      "(body %s, gzip form, key, fields, 256 bytes of bookkeeping)"
      % (n, after - before, (after - before) * 1024.0 / n, c["bytes"] / c["entries"],
         "identity"))
PY

python3 bench/coalesce.py
