#!/bin/bash
# SPDX-License-Identifier: MIT
# TLS benchmark: what TLS on the listener costs in beaconmux, next to nginx with the same
# certificate (an ECDSA P-256 one made here) in the same run. Both proxy one ~300-byte JSON
# GET to the same local upstream (bench/upstream.sh), with one worker each, pinned to core 0;
# the clients run on core 1.
#
#  - handshakes: `openssl s_time` opens connection after connection, each a full TLS 1.3
#    handshake (-new), then each resuming the first session (-reuse, TLS 1.2); reported as
#    handshakes/s and the server's own CPU per handshake (user + system, from /proc).
#  - keep-alive requests: wrk at 64 connections over https, and over http for the cost of
#    TLS itself; requests/s and the server's CPU per request.
#
# Ratios are beaconmux / nginx (for CPU: above 1 means beaconmux spends more). The machine may
# be shared: BENCH_RUNS=N (default 3) interleaves the targets N times and prints medians.
# BENCH_SECONDS is the length of one measurement (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
. bench/upstream.sh

BIN=${BM_BIN:-build/release/beaconmux}
DURATION=${BENCH_SECONDS:-5}
CONNS=${BENCH_CONNECTIONS:-64}
RUNS=${BENCH_RUNS:-3}
bench_start bench-tls

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$WORK/tls.key" -out "$WORK/tls.crt" 2>/dev/null

UP_PORT=$(free_port); MUX_PORT=$(free_port); MUX_TLS=$(free_port); NGX_PORT=$(free_port); NGX_TLS=$(free_port)
mkdir -p "$WORK/up" "$WORK/ngx"
bench_upstream_conf "$UP_PORT" "$WORK/up"
taskset -c 0 nginx -c "$WORK/up/nginx.conf" -p "$WORK/up" 2>"$WORK/up/stderr" & PIDS+=($!)
wait_port "$UP_PORT"

cat > "$WORK/mux.yaml" <<CONF
listen: "127.0.0.1:$MUX_PORT"
log: {level: warn}
server:
  tls: {listen: "127.0.0.1:$MUX_TLS", certFile: $WORK/tls.crt, keyFile: $WORK/tls.key}
upstreams:
  - url: http://127.0.0.1:$UP_PORT
CONF
taskset -c 0 "$BIN" --config "$WORK/mux.yaml" 2>"$WORK/beaconmux.log" & PIDS+=($!)
MUX_PID=$!
wait_port "$MUX_TLS"
wait_http "$MUX_PORT" /healthz 100

# nginx: one worker, upstream keep-alive, the same certificate, its TLS defaults (tickets on)
# plus a session cache, as an operator would set it
bench_nginx_proxy_conf "$WORK/ngx" "$NGX_PORT" "$UP_PORT" "\
    listen 127.0.0.1:$NGX_TLS ssl;
    ssl_certificate $WORK/tls.crt; ssl_certificate_key $WORK/tls.key;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache shared:SSL:10m;"
taskset -c 0 nginx -c "$WORK/ngx/nginx.conf" -p "$WORK/ngx" & PIDS+=($!)
NGX_PID=$!
wait_port "$NGX_TLS"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # user + system (clock ticks)
HZ=$(getconf CLK_TCK)
results=()

run_handshakes() { # name port pid mode(new|reuse)
  local name=$1 port=$2 pid=$3 mode=$4 t0 t1 out n secs
  t0=$(ticks "$pid")
  # s_time keeps the session of its first connection before a TLS 1.3 ticket arrives, so
  # resumption is measured with TLS 1.2 (the ticket comes inside the handshake)
  local ver=()
  [ "$mode" = reuse ] && ver=(-tls1_2)
  out=$(taskset -c 1 openssl s_time -connect "127.0.0.1:$port" "-$mode" "${ver[@]}" -time "$DURATION" 2>&1 </dev/null)
  t1=$(ticks "$pid")
  n=$(awk '/connections in .* real seconds/ {print $1; exit}' <<<"$out")
  secs=$(awk '/connections in .* real seconds/ {print $4; exit}' <<<"$out")
  [ -n "$n" ] || { echo "bench: s_time against $name failed:" >&2; echo "$out" >&2; exit 1; }
  results+=("hs-$mode|$name|$(python3 -c "import sys; n,s,t,hz=map(float,sys.argv[1:]); print('%.1f|%.1f' % (n/s, t*1e6/hz/n))" "$n" "$secs" "$((t1 - t0))" "$HZ")")
}

run_wrk() { # name url pid
  local name=$1 url=$2 pid=$3 t0 t1 out n rps
  taskset -c 1 wrk -t1 -c"$CONNS" -d1s "$url" >/dev/null
  t0=$(ticks "$pid")
  out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" "$url")
  t1=$(ticks "$pid")
  n=$(awk '/ requests in / {print $1}' <<<"$out")
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  if grep -q "Non-2xx\|Socket errors" <<<"$out"; then echo "bench: errors from $url:" >&2; echo "$out" >&2; exit 1; fi
  results+=("$name|$(python3 -c "import sys; r,t,n,hz=map(float,sys.argv[1:]); print('%.0f|%.2f' % (r, t*1e6/hz/n))" "$rps" "$((t1 - t0))" "$n" "$HZ")")
}

for _ in $(seq 1 "$RUNS"); do
  for mode in new reuse; do
    run_handshakes beaconmux "$MUX_TLS" "$MUX_PID" "$mode"
    run_handshakes nginx "$NGX_TLS" "$NGX_PID" "$mode"
  done
  run_wrk "https|beaconmux" "https://127.0.0.1:$MUX_TLS$BENCH_PATH" "$MUX_PID"
  run_wrk "https|nginx" "https://127.0.0.1:$NGX_TLS$BENCH_PATH" "$NGX_PID"
  run_wrk "http|beaconmux" "http://127.0.0.1:$MUX_PORT$BENCH_PATH" "$MUX_PID"
  run_wrk "http|nginx" "http://127.0.0.1:$NGX_PORT$BENCH_PATH" "$NGX_PID"
done

LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$RUNS" "$CONNS" "$DURATION" "$LOAD" "${results[@]}" <<'PY'
import statistics, sys
runs, conns, secs, load = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = {}
for r in sys.argv[5:]:
    kind, name, rate, cpu = r.split("|")
    rows.setdefault((kind, name), []).append((float(rate), float(cpu)))
med = {k: (statistics.median(a for a, _ in v), statistics.median(b for _, b in v)) for k, v in rows.items()}
print("\nTLS benchmark: ECDSA P-256 certificate; servers on core 0, clients on core 1; "
      "median of %s runs of %s s" % (runs, secs))
print("%-28s %14s %14s %14s %14s %9s %9s" % ("", "beaconmux /s", "nginx /s", "beaconmux us",
                                              "nginx us", "rate", "cpu"))
labels = [("hs-new", "full, TLS 1.3 (s_time)"), ("hs-reuse", "resumed, TLS 1.2 (s_time)"),
          ("https", "keep-alive https, wrk -c%s" % conns), ("http", "keep-alive http, wrk -c%s" % conns)]
for kind, label in labels:
    (mr, mc), (nr, nc) = med[(kind, "beaconmux")], med[(kind, "nginx")]
    print("%-28s %14.0f %14.0f %14.2f %14.2f %9.2f %9.2f" % (label, mr, nr, mc, nc, mr / nr, mc / nc))
print("(/s: handshakes or requests per second; us: the server's own CPU per handshake or request,"
      " user + system; rate and cpu: beaconmux / nginx)")
for name in ("beaconmux", "nginx"):
    print("TLS cost of a keep-alive request, %s: %.2f us (https %.2f - http %.2f)" % (
        name, med[("https", name)][1] - med[("http", name)][1], med[("https", name)][1],
        med[("http", name)][1]))
print("load average at the end (1, 5, 15 min): %s" % load)
PY
