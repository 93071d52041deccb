#!/bin/bash
# SPDX-License-Identifier: MIT
# Proxy benchmark: wrk at 64 connections against one small GET served by a local upstream
# (nginx returning a fixed ~300-byte JSON body, see bench/upstream.sh), measured directly,
# through beaconmux, through nginx as a plain reverse proxy and through haproxy. The
# servers (upstream and proxy) are pinned to core 0 and wrk to core 1, so the figures
# compare the server-side cost of a request. Prints requests/s, p50 and p99 of each and
# the ratio to direct, and each server's own CPU per request (user and system time from
# /proc, so the kernel's share of a proxied request shows).
#
# The machine may be shared, so one run is noisy: BENCH_RUNS=N (default 3) measures every
# target N times, interleaved (direct, beaconmux, nginx, haproxy, direct, ...), and prints
# the median of each column. BENCH_TARGETS picks targets (default: all four; direct is
# always measured, it is the baseline). BENCH_SECONDS is the length of one measurement.
# BENCH_COMPARE=/path/to/another/beaconmux adds that binary as the target "mux-other" (an
# A/B of two builds within one run).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
. bench/upstream.sh

BIN=${BM_BIN:-build/release/beaconmux}
DURATION=${BENCH_SECONDS:-10}
CONNS=${BENCH_CONNECTIONS:-64}
RUNS=${BENCH_RUNS:-3}
TARGETS=${BENCH_TARGETS:-beaconmux nginx haproxy}
bench_start bench
want() { [[ " $TARGETS " == *" $1 "* ]]; }

UP_PORT=$(free_port); MUX_PORT=$(free_port); NGX_PORT=$(free_port); HAP_PORT=$(free_port)
mkdir -p "$WORK/up" "$WORK/ngx" "$WORK/hap"
bench_upstream_conf "$UP_PORT" "$WORK/up"
taskset -c 0 nginx -c "$WORK/up/nginx.conf" -p "$WORK/up" 2>"$WORK/up/stderr" & PIDS+=($!)
wait_port "$UP_PORT"

names=(direct); ports=("$UP_PORT"); pids=("${PIDS[0]}")

if want beaconmux; then
  taskset -c 0 "$BIN" --listen "127.0.0.1:$MUX_PORT" --upstream "http://127.0.0.1:$UP_PORT" \
    --log-level warn 2>"$WORK/beaconmux.log" & PIDS+=($!)
  wait_port "$MUX_PORT"
  wait_http "$MUX_PORT" /healthz 100
  names+=(beaconmux); ports+=("$MUX_PORT"); pids+=("${PIDS[-1]}")
fi

if [ -n "${BENCH_COMPARE:-}" ]; then
  OTHER_PORT=$(free_port)
  taskset -c 0 "$BENCH_COMPARE" --listen "127.0.0.1:$OTHER_PORT" --upstream "http://127.0.0.1:$UP_PORT" \
    --log-level warn 2>"$WORK/mux-other.log" & PIDS+=($!)
  wait_port "$OTHER_PORT"
  wait_http "$OTHER_PORT" /healthz 100
  names+=(mux-other); ports+=("$OTHER_PORT"); pids+=("${PIDS[-1]}")
fi

if want nginx; then
  # nginx as a plain reverse proxy (upstream keep-alive, one worker like beaconmux's one loop)
  bench_nginx_proxy_conf "$WORK/ngx" "$NGX_PORT" "$UP_PORT"
  taskset -c 0 nginx -c "$WORK/ngx/nginx.conf" -p "$WORK/ngx" & PIDS+=($!)
  wait_port "$NGX_PORT"
  names+=(nginx); ports+=("$NGX_PORT"); pids+=("${PIDS[-1]}")
fi

if want haproxy && command -v haproxy >/dev/null; then
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
  names+=(haproxy); ports+=("$HAP_PORT"); pids+=("${PIDS[-1]}")
fi

results=()
ticks() { awk '{print $14 + 0, $15 + 0}' "/proc/$1/stat"; } # user, system (clock ticks)
run_wrk() { # name port pid
  local name=$1 port=$2 pid=$3 out u0 s0 u1 s1
  # warm-up (connections, caches), then the measured run
  taskset -c 1 wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$port$BENCH_PATH" >/dev/null
  read -r u0 s0 < <(ticks "$pid")
  nstat -n 2>/dev/null || true # TCP counters from here (the whole network namespace: loopback)
  out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "http://127.0.0.1:$port$BENCH_PATH")
  read -r u1 s1 < <(ticks "$pid")
  local segs
  segs=$(nstat -z TcpOutSegs 2>/dev/null | awk '$1 == "TcpOutSegs" {print $2}')
  local rps p50 p99 errs n
  n=$(awk '/ requests in / {print $1}' <<<"$out")
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  errs=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out" | tr '\n' ' ')
  # the server's own CPU per request, user and system (microseconds)
  local hz cpu
  hz=$(getconf CLK_TCK)
  cpu=$(python3 -c "import sys; u,s,n,hz=map(float,sys.argv[1:]); print('%.1f|%.1f' % ((u*1e6/hz)/n, (s*1e6/hz)/n))" \
    "$((u1 - u0))" "$((s1 - s0))" "${n:-1}" "$hz")
  # TCP segments sent per request, both ends of every loopback connection counted once
  segs=$(python3 -c "import sys; print('%.2f' % (float(sys.argv[1] or 'nan') / float(sys.argv[2] or 1)))" \
    "${segs:-}" "${n:-1}")
  results+=("$name|$rps|$p50|$p99|$errs|$cpu|$segs")
}

for _ in $(seq 1 "$RUNS"); do
  for i in "${!names[@]}"; do run_wrk "${names[$i]}" "${ports[$i]}" "${pids[$i]}"; done
done

LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$RUNS" "$CONNS" "$LOAD" "${results[@]}" <<'PY'
import statistics, sys
def ms(v):
    if not v: return float("nan")
    for suf, mul in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if v.endswith(suf):
            return float(v[:-len(suf)]) * mul
    return float(v)
runs, conns, load = int(sys.argv[1]), sys.argv[2], sys.argv[3]
order, rows = [], {}
for r in sys.argv[4:]:
    name, rps, p50, p99, errs, user, system, segs = r.split("|")
    if name not in rows:
        order.append(name); rows[name] = []
    rows[name].append((float(rps), ms(p50), ms(p99), float(user), float(system), float(segs), errs.strip()))
med = {n: [statistics.median(col) for col in list(zip(*rows[n]))[:6]] for n in order}
base = med["direct"][0]
what = "median of %d runs" % runs if runs > 1 else "one run"
print("\nproxy benchmark: wrk -t1 -c%s, one ~300-byte JSON GET; servers on core 0, wrk on core 1 (%s)" % (conns, what))
print("%-10s %12s %10s %10s %8s %9s %9s %6s  %s" % ("target", "requests/s", "p50 ms", "p99 ms", "ratio",
                                                    "user us", "system us", "segs", "errors"))
for n in order:
    rps, p50, p99, user, system, segs = med[n]
    errs = " ".join(sorted({e for *_, e in rows[n] if e}))
    cpu = ("%9s %9s" % ("-", "-")) if n == "direct" else ("%9.2f %9.2f" % (user, system))
    print("%-10s %12.0f %10.3f %10.3f %8.2f %s %6.2f  %s" % (n, rps, p50, p99, rps / base, cpu, segs, errs))
print("(user us, system us: the proxy's own CPU per request, from /proc; segs: TCP segments sent per")
print(" request on the machine, nstat: 2 direct, 4 through a proxy that adds no packet of its own)")
if runs > 1:
    print("per run requests/s: " + "; ".join("%s %s" % (n, " ".join("%.0f" % r[0] for r in rows[n])) for n in order))
    print("per run p99 ms: " + "; ".join("%s %s" % (n, " ".join("%.2f" % r[2] for r in rows[n])) for n in order))
if "beaconmux" in med:
    mux = med["beaconmux"][0]
    print("beaconmux / other proxies (medians): " + ", ".join("%s %.2f" % (n, mux / med[n][0]) for n in order if n not in ("direct", "beaconmux")))
print("load average at the end (1, 5, 15 min): %s" % load)
PY
