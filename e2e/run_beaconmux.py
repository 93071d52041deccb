#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run the Lodestar devnet with beaconmux in front of its three nodes and the validator
client pointed at beaconmux; record what beaconmux saw and what the chain got.

    python3 e2e/run_beaconmux.py                   # 20 slots of 6 s, build/release/beaconmux
    python3 e2e/run_beaconmux.py --slots 40 --seconds-per-slot 2
    python3 e2e/run_beaconmux.py --vc-direct       # the same run, client on the nodes (baseline)
    python3 e2e/run_beaconmux.py --headers-timeout 15s   # events.headersTimeout in the config

Steps: start the devnet (nodes only); probe one node's event stream with `curl -N` (time
to the first byte) and with a raw socket (do the response head and the first event arrive
together?); write <run_dir>/beaconmux.yaml and start beaconmux; start the validator client;
each slot, 2/3 into it, save /beaconmux/v1/status to status.jsonl; at the end score the
chain from node0 (not through beaconmux), count beaconmux's stream errors, and write
summary.json. Exit status 0 when the run completed (whatever it found), 1 on a harness
error.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import devnet as dnmod  # noqa: E402
import score as scoremod  # noqa: E402

REPO = os.path.dirname(HERE)


def cpu_totals():
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle + iowait
    return sum(v) - idle, sum(v)


def curl_first_byte(url, topics, max_time):
    """curl -N the event stream; (http_code, s to connect, s to first byte, s total)."""
    cmd = ["curl", "-N", "-s", "-o", "/dev/null", "--max-time", str(max_time),
           "-H", "Accept: text/event-stream",
           "-w", "%{http_code} %{time_connect} %{time_starttransfer} %{time_total}",
           f"{url}/eth/v1/events?topics={topics}"]
    t = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=max_time + 5).stdout
    code, tc, ttfb, tt = out.split()
    return {"cmd": " ".join(cmd), "started": t, "http_code": int(code),
            "connect_s": float(tc), "first_byte_s": float(ttfb), "total_s": float(tt)}


def raw_first_chunk(host, port, path, max_time):
    """Send the GET by hand; time the first bytes and whether they hold head and event."""
    s = socket.create_connection((host, port), timeout=max_time)
    t0 = time.time()
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
              f"Accept: text/event-stream\r\n\r\n".encode())
    s.settimeout(max_time)
    first = b""
    t_first = None
    try:
        first = s.recv(65536)
        t_first = time.time()
        # give the rest of the first write a moment to arrive (bounded by max_time)
        s.settimeout(0.2)
        try:
            while True:
                more = s.recv(65536)
                if not more:
                    break
                first += more
        except socket.timeout:
            pass
    except socket.timeout:
        pass
    finally:
        s.close()
    text = first.decode(errors="replace")
    return {
        "sent": t0,
        "first_bytes_after_s": round(t_first - t0, 3) if t_first else None,
        "has_status_line": text.startswith("HTTP/1.1 "),
        "has_event": "event:" in text or "\ndata:" in text,
        "status_line": text.split("\r\n", 1)[0] if text else None,
        "first_chunk": text[:600],
    }


def beaconmux_config(path, listen, urls, headers_timeout=None, log_level="info"):
    lines = [
        "# written by e2e/run_beaconmux.py",
        f'listen: "{listen}"',
        "log:",
        f"  level: {log_level}",
        "upstreams:",
    ]
    for i, u in enumerate(urls):
        lines += [f"  - id: lodestar-{i}", f'    url: "{u}"']
    if headers_timeout:
        lines += ["events:", f"  headersTimeout: {headers_timeout}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def get_json(url, timeout=2.0):
    status, body = dnmod.http_get(url, timeout=timeout)
    if status != 200:
        return None
    return json.loads(body)


def summarize_status(st):
    """The parts of /beaconmux/v1/status this run cares about."""
    if st is None:
        return None
    out = {"cluster_head": st.get("cluster_head")}
    ups = []
    for u in st.get("upstreams", []):
        stream = u.get("stream") or {}
        ups.append({
            "id": u.get("id"),
            "state": u.get("state"),
            "why": u.get("why") or u.get("reason"),
            "head": u.get("head"),
            "stream_connected": stream.get("connected"),
            "stream_connects": stream.get("connects"),
            "stream_failures": stream.get("failures"),
            "stream_events": stream.get("events"),
            "stream_last_error": stream.get("last_error"),
            "stream_topic": stream.get("topic"),
        })
    out["upstreams"] = ups
    return out


def run_probes(dn, args, probes):
    """curl -N and raw-socket probes of node0's event stream (each bounded)."""
    try:
        _run_probes(dn, args, probes)
    except Exception as e:  # noqa: BLE001 - reported in summary.json, the run goes on
        probes["error"] = repr(e)
        print(f"run: probe failed: {e!r}", flush=True)


def _run_probes(dn, args, probes):
    # Wait for the first block so that "no event yet" cannot be the explanation.
    dn.wait_for_head(0, 1)
    node0 = dn.nodes[0]
    for topic in args.probe_topics.split(","):
        for _ in range(args.probes):
            r = curl_first_byte(node0.url, topic, args.seconds_per_slot * 2 + 2)
            r["topic"] = topic
            r["slot_phase_at_start_s"] = round((r["started"] - dn.genesis_time)
                                               % args.seconds_per_slot, 3)
            probes["curl"].append(r)
            fb = (f"first byte {r['first_byte_s']:.3f} s" if r["http_code"] else
                  f"NO byte at all in {r['total_s']:.1f} s")
            print(f"run: curl -N {node0.url}/eth/v1/events?topics={topic}: HTTP "
                  f"{r['http_code']}, connect {r['connect_s']:.3f} s, {fb}"
                  f" (started {r['slot_phase_at_start_s']:.2f} s into a slot)", flush=True)
    for _ in range(args.probes):
        r = raw_first_chunk("127.0.0.1", node0.rest_port, "/eth/v1/events?topics=head",
                            args.seconds_per_slot * 2 + 2)
        r["slot_phase_at_send_s"] = round((r["sent"] - dn.genesis_time)
                                          % args.seconds_per_slot, 3)
        probes["raw"].append(r)
        print(f"run: raw GET events?topics=head: first bytes after "
              f"{r['first_bytes_after_s']} s; status line in them: {r['has_status_line']},"
              f" event in them: {r['has_event']}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--beaconmux", default=os.path.join(REPO, "build", "release", "beaconmux"))
    ap.add_argument("--slots", type=int, default=20, help="run until this slot (default 20)")
    ap.add_argument("--seconds-per-slot", type=int, default=6)
    ap.add_argument("--validators", type=int, default=16)
    ap.add_argument("--genesis-delay", type=int, default=20)
    ap.add_argument("--run-dir", help="default: a new directory under /tmp")
    ap.add_argument("--vc-direct", action="store_true",
                    help="point the validator client at the three nodes, not beaconmux "
                         "(beaconmux still runs and is observed)")
    ap.add_argument("--headers-timeout", help="events.headersTimeout for beaconmux, e.g. 15s")
    ap.add_argument("--log-level", default="info", help="beaconmux log level")
    ap.add_argument("--probes", type=int, default=2,
                    help="curl and raw-socket probes of node0's event stream (default 2 each)")
    ap.add_argument("--probe-topics", default="head,head_v2",
                    help="topics to probe with curl, comma-separated (default head,head_v2)")
    args = ap.parse_args(argv)

    if not os.access(args.beaconmux, os.X_OK):
        print(f"run_beaconmux: no beaconmux at {args.beaconmux}: run make", file=sys.stderr)
        return 1

    t_begin = time.monotonic()
    dn = dnmod.Devnet(seconds_per_slot=args.seconds_per_slot, validators=args.validators,
                      genesis_delay=args.genesis_delay, run_dir=args.run_dir)
    dn.install_signal_handlers()
    summary = {"slots": args.slots, "seconds_per_slot": args.seconds_per_slot,
               "validators": args.validators, "vc_direct": args.vc_direct,
               "headers_timeout": args.headers_timeout or "5s (default)"}
    try:
        cpu0 = cpu_totals()
        t_dev0 = time.monotonic()
        dn.start(vc_url=None)
        summary["run_dir"] = dn.run_dir
        summary["devnet_start_s"] = dn.timings
        print(f"run: devnet up in {dn.timings['start_s']} s (API {dn.timings['nodes_api_up_s']}"
              f" s, peered {dn.timings.get('nodes_peered_s')} s); run dir {dn.run_dir}",
              flush=True)

        # --- beaconmux --------------------------------------------------------------------
        port = dnmod.free_port()
        bm_url = f"http://127.0.0.1:{port}"
        cfg = os.path.join(dn.run_dir, "beaconmux.yaml")
        beaconmux_config(cfg, f"127.0.0.1:{port}", dn.node_urls, args.headers_timeout,
                         args.log_level)
        bm = dn.add_process("beaconmux", [args.beaconmux, "--config", cfg])
        dnmod.wait_until(lambda: dnmod.http_get(bm_url + "/beaconmux/v1/status")[0] == 200,
                         30, "beaconmux's status page")
        print(f"run: beaconmux {bm_url} (pid {bm.pid}), config {cfg}", flush=True)

        # --- the validator client ---------------------------------------------------------
        dn.start_vc("nodes" if args.vc_direct else bm_url)
        print(f"run: validator client -> {dn.vc_url}; genesis in "
              f"{dn.genesis_time - time.time():.1f} s", flush=True)

        # --- probes of a node's own event stream, in a thread while the run goes on -----
        probes = {"curl": [], "raw": []}
        summary["sse_probes"] = probes
        probe_thread = threading.Thread(target=run_probes, daemon=True,
                                        args=(dn, args, probes))
        probe_thread.start()

        # --- the run ------------------------------------------------------------------------
        status_path = os.path.join(dn.run_dir, "status.jsonl")
        with open(status_path, "w") as sf:
            slot = max(dn.current_slot(), 0)
            while slot < args.slots:
                slot += 1
                dn.wait_for_slot(slot - 1, extra=args.seconds_per_slot * 2 / 3)
                st = get_json(bm_url + "/beaconmux/v1/status")
                sf.write(json.dumps({"slot": slot - 1, "t": time.time(), "status": st}) + "\n")
                sf.flush()
                s = summarize_status(st) or {}
                ch = s.get("cluster_head")
                ch_txt = ch.get("slot") if isinstance(ch, dict) else ch
                heads = []
                for u in s.get("upstreams", []):
                    h = u.get("head")
                    heads.append(f"{u['id']}={h.get('slot') if isinstance(h, dict) else h}"
                                 f"/{u.get('state')}")
                node_heads = []
                for n in dn.nodes:
                    try:
                        node_heads.append(str(dn.head(n.index)[0]))
                    except Exception:  # noqa: BLE001
                        node_heads.append("-")
                print(f"run: slot {slot - 1}: nodes' heads {' '.join(node_heads)};"
                      f" beaconmux cluster_head {ch_txt}; {' '.join(heads)}", flush=True)
        cpu1 = cpu_totals()
        elapsed = time.monotonic() - t_dev0
        by_proc = dn.cpu_seconds()
        summary["cpu_seconds_by_process"] = by_proc
        summary["cpu_elapsed_s"] = round(elapsed, 1)
        # cores the devnet and beaconmux kept busy on average, start-up included
        summary["cpu_cores_used"] = round(sum(v or 0 for v in by_proc.values()) / elapsed, 3)
        # the whole machine's busy fraction, other users' load included
        busy = (cpu1[0] - cpu0[0]) / max(1, cpu1[1] - cpu0[1])
        summary["machine_busy_fraction"] = round(busy, 3)
        summary["cores"] = os.cpu_count()

        # --- results ------------------------------------------------------------------------
        probe_thread.join(timeout=4 * (args.seconds_per_slot * 2 + 7) * args.probes + 30)
        dn.wait_for_slot(args.slots, extra=args.seconds_per_slot * 0.9)
        last_status = get_json(bm_url + "/beaconmux/v1/status")
        with open(os.path.join(dn.run_dir, "status-final.json"), "w") as f:
            json.dump(last_status, f, indent=2)
        summary["final_status"] = summarize_status(last_status)
        rep = scoremod.score(dn.nodes[0].url, 1, args.slots - 1,
                             seconds_per_slot=args.seconds_per_slot)
        summary["score"] = {k: v for k, v in rep.items() if k != "per_slot"}
        with open(bm.log_path, errors="replace") as f:
            log = f.read()
        pat = re.compile(r"connect failed \(no response headers within (\d+) ms\)")
        summary["beaconmux_log"] = {
            "header_timeouts": len(pat.findall(log)),
            "lines": log.count("\n"),
            "sample": [ln for ln in log.splitlines() if "nodestream" in ln][:8],
        }
        summary["wall_s"] = round(time.monotonic() - t_begin, 1)
        print(scoremod.format_report(rep), flush=True)
    except KeyboardInterrupt:
        print("run: interrupted", file=sys.stderr)
        return 130
    except (dnmod.DevnetError, scoremod.ScoreError) as e:
        print(f"run: {e}", file=sys.stderr)
        return 1
    finally:
        t_stop = time.monotonic()
        dn.stop()
        summary["stop_s"] = round(time.monotonic() - t_stop, 1)
        if dn.run_dir and os.path.isdir(dn.run_dir):
            with open(os.path.join(dn.run_dir, "summary.json"), "w") as f:
                json.dump(summary, f, indent=2)
    fs = summary.get("final_status") or {}
    print(f"run: beaconmux final cluster_head {json.dumps(fs.get('cluster_head'))}", flush=True)
    for u in fs.get("upstreams", []):
        print(f"run:   {u['id']}: state {u['state']} head {json.dumps(u['head'])}"
              f" stream connected {u['stream_connected']} connects {u['stream_connects']}"
              f" failures {u['stream_failures']} last error {u['stream_last_error']!r}",
              flush=True)
    print(f"run: beaconmux log: {summary['beaconmux_log']['header_timeouts']} 'no response "
          f"headers' timeouts; wall {summary['wall_s']} s", flush=True)
    print(f"run: CPU: the devnet and beaconmux used {summary['cpu_cores_used']:.2f} cores on"
          f" average over {summary['cpu_elapsed_s']} s ({summary['cpu_seconds_by_process']}"
          f" CPU s); the machine was {100 * summary['machine_busy_fraction']:.0f} % busy"
          f" ({summary['cores']} cores, other load included)", flush=True)
    print(f"run: summary {os.path.join(dn.run_dir, 'summary.json')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
