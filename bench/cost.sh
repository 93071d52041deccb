#!/bin/bash
# SPDX-License-Identifier: MIT
# CPU cost of one proxied request, deterministic enough to compare two builds: beaconmux
# runs under callgrind with instrumentation switched on only while bench/load.py sends a
# fixed number of keep-alive GETs (COST_REQUESTS over COST_CONNECTIONS connections) to the
# same nginx upstream as bench/proxy.sh. Prints instructions per request, in total and per
# shared object, then the system calls per request of the plain binary under strace -c.
# COST_KEEP=DIR keeps the callgrind output there (for callgrind_annotate).
# COST_TARGET=nginx or haproxy measures that proxy instead (same upstream, same requests),
# for a per-request comparison that no other job on the machine can disturb.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
. bench/upstream.sh

BIN=${BM_BIN:-build/release/beaconmux}
N=${COST_REQUESTS:-4000}
C=${COST_CONNECTIONS:-16}
bench_start cost

UP_PORT=$(free_port)
mkdir -p "$WORK/up"
bench_upstream_conf "$UP_PORT" "$WORK/up"
nginx -c "$WORK/up/nginx.conf" -p "$WORK/up" 2>"$WORK/up/stderr" & PIDS+=($!)
wait_http "$UP_PORT" "$BENCH_PATH"

TARGET=${COST_TARGET:-beaconmux}
# proxy_cmd PORT: the command line of the proxy under test, listening on PORT.
proxy_cmd() {
  case "$TARGET" in
    beaconmux)
      echo "$BIN --listen 127.0.0.1:$1 --upstream http://127.0.0.1:$UP_PORT --log-level warn" ;;
    nginx)
      mkdir -p "$WORK/ngx$1"
      bench_nginx_proxy_conf "$WORK/ngx$1" "$1" "$UP_PORT"
      echo "nginx -c $WORK/ngx$1/nginx.conf -p $WORK/ngx$1" ;;
    haproxy)
      printf 'global\n  nbthread 1\n  maxconn 4096\ndefaults\n  mode http\n  timeout connect 1s\n  timeout client 30s\n  timeout server 30s\n  http-reuse always\nfrontend fe\n  bind 127.0.0.1:%s\n  default_backend be\nbackend be\n  server up 127.0.0.1:%s\n' \
        "$1" "$UP_PORT" > "$WORK/hap$1.cfg"
      echo "haproxy -f $WORK/hap$1.cfg -db" ;;
    *) echo "bench: unknown COST_TARGET $TARGET" >&2; exit 2 ;;
  esac
}
READY=/healthz
[ "$TARGET" = beaconmux ] || READY=$BENCH_PATH

# --- instructions per request (callgrind) ---
MUX_PORT=$(free_port)
CMD=$(proxy_cmd "$MUX_PORT")
# shellcheck disable=SC2086
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$WORK/cg.out" $CMD \
  >"$WORK/cg.stdout" 2>"$WORK/cg.log" & VG=$!; PIDS+=($VG)
wait_http "$MUX_PORT" "$READY" 600
python3 bench/load.py "$MUX_PORT" "$BENCH_PATH" 200 "$C"   # warm-up: connections, pools
callgrind_control -i on "$VG" >/dev/null 2>&1
python3 bench/load.py "$MUX_PORT" "$BENCH_PATH" "$N" "$C"
callgrind_control -i off "$VG" >/dev/null 2>&1
kill -TERM "$VG"; wait "$VG" 2>/dev/null || true
[ -n "${COST_KEEP:-}" ] && mkdir -p "$COST_KEEP" && cp "$WORK/cg.out" "$COST_KEEP/"
callgrind_annotate --inclusive=no --threshold=100 "$WORK/cg.out" 2>/dev/null | python3 -c '
import re, sys
n = int(sys.argv[1]); total = None; per = {}
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) \(.*\)\s+PROGRAM TOTALS", line) or re.match(r"\s*([\d,]+)\s+PROGRAM TOTALS", line)
    if m: total = int(m.group(1).replace(",", "")); continue
    m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+\S+:\S+.*\[(.*)\]", line)
    if m:
        obj = m.group(2).split("/")[-1].split(".so")[0]
        per[obj] = per.get(obj, 0) + int(m.group(1).replace(",", ""))
print("%s: instructions per proxied request: %.0f  (%d requests)" % (sys.argv[2], total / n, n))
for obj, ir in sorted(per.items(), key=lambda kv: -kv[1]):
    if ir / n >= 100: print("  %-22s %8.0f" % (obj, ir / n))
' "$N" "$TARGET"

# --- system calls per request (strace -c on the plain binary) ---
MUX_PORT=$(free_port)
CMD=$(proxy_cmd "$MUX_PORT")
# shellcheck disable=SC2086
$CMD >"$WORK/mux.stdout" 2>"$WORK/mux.log" & MUX=$!; PIDS+=($MUX)
wait_http "$MUX_PORT" "$READY" 600
python3 bench/load.py "$MUX_PORT" "$BENCH_PATH" 200 "$C"
strace -c -q -f -o "$WORK/strace.txt" -p "$MUX" & ST=$!
sleep 0.5 # strace attaches asynchronously; the counts below are per request either way
python3 bench/load.py "$MUX_PORT" "$BENCH_PATH" "$N" "$C"
kill -INT "$ST"; wait "$ST" 2>/dev/null || true
python3 - "$N" "$WORK/strace.txt" <<'PY'
import sys
n = int(sys.argv[1]); rows = []
for line in open(sys.argv[2]):
    f = line.split()
    if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
        calls = int(f[3]); rows.append((f[-1], calls))
print("system calls per proxied request: %.2f" % (sum(c for _, c in rows) / n))
for name, calls in sorted(rows, key=lambda r: -r[1]):
    if calls / n >= 0.01: print("  %-14s %6.2f" % (name, calls / n))
PY
