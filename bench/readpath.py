#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The read path under faults: mixed ordinary reads over three beaconsim nodes, one of them
slow (every answer 300 ms late) and one failing 20 % of its answers with a 500, through
beaconmux (`score` balancing, hedges, breakers, retries: the defaults) and, in the same run,
through nginx with `least_conn` and `max_fails=3 fail_timeout=10s`, once with nginx's
default `proxy_next_upstream` (error timeout) and once also retrying on 500. Every target
gets the same paced load: Q requests per second in all, spread over W workers on keep-alive
connections (each sends its next request at its scheduled time, or at once when late), for
T seconds; the targets interleaved R times. A paced load, not a saturating one, is what an
indexer or a dashboard sends, and it measures where each balancer sends a read rather than
how many a core can proxy (bench/proxy.sh measures that). Prints per target: requests,
error rate (non-2xx), p50, p90, p99, max; the medians over the runs; the load average.

    bench/readpath.py [T seconds] [R runs] [W workers] [Q per second]   (default 10 3 8 400)
    binaries from build/release, or $BM_BIN_DIR; nginx from the Debian package
"""
import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("BM_BIN_DIR", os.path.join(HERE, "..", "build", "release"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402

PATHS = [
    "/eth/v1/beacon/states/head/finality_checkpoints",
    "/eth/v1/beacon/headers/head",
    "/eth/v1/beacon/blocks/head/root",
    "/eth/v1/beacon/states/head/root",
    "/eth/v1/beacon/states/head/fork",
    "/eth/v1/node/version",
    "/eth/v1/beacon/states/head/validators?id=1,2,3",
    "/eth/v1/beacon/states/head/validator_balances?id=7",
]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def nginx_conf(work, port, nodes, retry_500):
    ups = "".join("    server %s max_fails=3 fail_timeout=10s;\n" % u.split("//")[1] for u in nodes)
    nxt = "error timeout http_500" if retry_500 else "error timeout"
    return """worker_processes 1; daemon off; pid %(w)s/nginx.pid; error_log %(w)s/error.log crit;
events { worker_connections 4096; }
http {
  access_log off; keepalive_requests 1000000; keepalive_timeout 300s;
  client_body_temp_path %(w)s; proxy_temp_path %(w)s; fastcgi_temp_path %(w)s;
  uwsgi_temp_path %(w)s; scgi_temp_path %(w)s;
  upstream beacon {
    least_conn;
%(ups)s    keepalive 64;
  }
  server {
    listen 127.0.0.1:%(port)d;
    location / {
      proxy_pass http://beacon; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_connect_timeout 1s; proxy_read_timeout 2s; proxy_next_upstream %(nxt)s;
    }
  }
}
""" % {"w": work, "ups": ups, "port": port, "nxt": nxt}


def load(port, seconds, workers, rate):
    """Paced: each worker sends one request every workers/rate seconds, on schedule."""
    lat, errors, stop = [], [0], time.monotonic() + seconds
    lock = threading.Lock()
    interval = workers / float(rate)

    def worker(k):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        mine, bad, i = [], 0, k
        due = time.monotonic() + interval * k / workers
        while time.monotonic() < stop:
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            due += interval
            path = PATHS[i % len(PATHS)]
            i += 1
            t0 = time.perf_counter()
            try:
                c.request("GET", path)
                r = c.getresponse()
                r.read()
                ok = 200 <= r.status < 300
            except (OSError, http.client.HTTPException):
                ok = False
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            mine.append((time.perf_counter() - t0) * 1000)
            bad += 0 if ok else 1
        with lock:
            lat.extend(mine)
            errors[0] += bad

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(workers)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    lat.sort()
    return lat, errors[0]


def pct(v, p):
    return v[min(len(v) - 1, int(len(v) * p / 100))] if v else float("nan")


def status_of(port, path):
    """The status of one GET, 0 while nothing answers."""
    try:
        return harness.http_request(port, "GET", path, timeout=2)[0]
    except OSError:
        return 0


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 10
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    rate = float(sys.argv[4]) if len(sys.argv) > 4 else 400
    if not shutil.which("nginx"):
        raise SystemExit("bench/readpath.py: nginx is not installed (scripts/install-deps.sh bench)")
    load_before = os.getloadavg()
    sim = harness.Beaconsim(nodes=3, slot_ms=12000, slots_per_epoch=32,
                            node_specs={1: "slow=300", 2: "error-rate=0.2"})
    work = tempfile.mkdtemp(prefix="bm-readpath.")
    procs = []
    try:
        fd, cfg = tempfile.mkstemp(suffix=".yaml", dir=work)
        os.write(fd, ("upstreams:\n" + "".join("  - id: n%d\n    url: %s\n" % (i, u)
                                              for i, u in enumerate(sim.nodes))).encode())
        os.close(fd)
        mux = harness.Proc([os.path.join(harness.BIN_DIR, "beaconmux"), "--listen",
                            "127.0.0.1:0", "--log-level", "info", "--config", cfg])
        procs.append(mux)
        mux_port = int(mux.wait_line(r"listening on http://127\.0\.0\.1:(\d+)").group(1))
        targets = [("beaconmux score", mux_port)]
        for name, retry in (("nginx least_conn", False), ("nginx least_conn+500", True)):
            d = os.path.join(work, name.replace(" ", "_").replace("+", "_"))
            os.mkdir(d)
            port = free_port()
            with open(os.path.join(d, "nginx.conf"), "w") as f:
                f.write(nginx_conf(d, port, sim.nodes, retry))
            procs.append(harness.Proc(["nginx", "-c", os.path.join(d, "nginx.conf"), "-p", d]))
            harness.wait_for(lambda: status_of(port, "/eth/v1/node/version") in (200, 500), 10,
                             what="nginx")
            targets.append((name, port))
        harness.wait_for(lambda: status_of(mux_port, "/healthz") == 200, 15,
                         what="beaconmux healthy")
        for _, port in targets:  # warm-up: connections, and beaconmux learns its figures
            load(port, 2, workers, rate)
        results = {name: [] for name, _ in targets}
        for r in range(runs):
            for name, port in targets:
                lat, err = load(port, seconds, workers, rate)
                results[name].append((len(lat), 100.0 * err / max(1, len(lat)), pct(lat, 50),
                                      pct(lat, 90), pct(lat, 99), lat[-1] if lat else 0))
        print("read path: 3 nodes (n1 slow 300 ms, n2 500s on 20 %%), %g reads/s over %d "
              "workers, %gs x %d runs" % (rate, workers, seconds, runs))
        print("%-22s %9s %8s %8s %8s %8s %8s" % ("target", "requests", "errors%", "p50 ms",
                                                  "p90 ms", "p99 ms", "max ms"))
        for name, _ in targets:
            for row in results[name]:
                print("%-22s %9d %8.2f %8.1f %8.1f %8.1f %8.1f" % ((name,) + row))
        print("medians over the runs:")
        for name, _ in targets:
            cols = list(zip(*results[name]))
            print("%-22s %9d %8.2f %8.1f %8.1f %8.1f %8.1f" % (
                (name,) + tuple(median(c) for c in cols)))
        print("load average before %.2f %.2f %.2f, after %.2f %.2f %.2f"
              % (load_before + os.getloadavg()))
    finally:
        for p in reversed(procs):
            p.stop()
        sim.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
