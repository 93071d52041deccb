#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/server/run.sh: throughput of the server module against nginx, same machine, same
# body. Builds bench/server/server_hello.c at -O2 from the sources (no CMake), starts it
# and an nginx answering the same 100-byte JSON, then runs wrk against each in turn,
# ROUNDS times, server pinned to core 0 and wrk to core 1. Prints each run and the
# medians; the ratio is the figure to compare, the machine being shared.
#
#   bench/server/run.sh [seconds per run, default 5] [rounds, default 3]
set -eu
DUR=${1:-5}
ROUNDS=${2:-3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
SRV_PID=""
NGX_PID=""
cleanup() {
    [ -n "$SRV_PID" ] && kill -TERM "$SRV_PID" 2>/dev/null && wait "$SRV_PID" 2>/dev/null
    [ -n "$NGX_PID" ] && kill -TERM "$NGX_PID" 2>/dev/null && wait "$NGX_PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

cc -std=c17 -D_GNU_SOURCE -O2 -DNDEBUG -I"$ROOT/src" "$ROOT/bench/server/server_hello.c" \
    "$ROOT/src/base/buf.c" "$ROOT/src/base/hdrs.c" "$ROOT/src/base/err.c" "$ROOT/src/base/log.c" \
    "$ROOT/src/base/clock.c" "$ROOT/src/http/http1.c" "$ROOT/src/http/server.c" \
    -luv -lhttp_parser -lm -o "$TMP/server_hello"

taskset -c 0 "$TMP/server_hello" 0 >"$TMP/port" &
SRV_PID=$!
i=0
while [ ! -s "$TMP/port" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
PORT=$(cat "$TMP/port")

BODY=$(curl -s "http://127.0.0.1:$PORT/")
NGX_PORT=$((PORT + 1))
cat >"$TMP/nginx.conf" <<NGX
worker_processes 1;
daemon off;
error_log $TMP/nginx.err;
pid $TMP/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  keepalive_requests 10000000;
  server {
    listen 127.0.0.1:$NGX_PORT;
    location / { default_type application/json; return 200 '$BODY'; }
  }
}
NGX
taskset -c 0 nginx -c "$TMP/nginx.conf" -p "$TMP" &
NGX_PID=$!
i=0
while ! curl -s -o /dev/null "http://127.0.0.1:$NGX_PORT/" && [ $i -lt 100 ]; do
    sleep 0.05
    i=$((i + 1))
done

run() { taskset -c 1 wrk -t1 -c64 -d"${DUR}s" "http://127.0.0.1:$1/eth/v1/node/version" |
    awk '/Requests\/sec/ {printf "%d\n", $2}'; }
: >"$TMP/ours"
: >"$TMP/nginx"
r=1
while [ $r -le "$ROUNDS" ]; do
    a=$(run "$PORT")
    b=$(run "$NGX_PORT")
    echo "round $r: server_hello $a req/s, nginx $b req/s"
    echo "$a" >>"$TMP/ours"
    echo "$b" >>"$TMP/nginx"
    r=$((r + 1))
done
med() { sort -n "$1" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
A=$(med "$TMP/ours")
B=$(med "$TMP/nginx")
echo "median: server_hello $A req/s, nginx $B req/s, ratio $(awk "BEGIN {printf \"%.2f\", $A/$B}")"
