#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`make e2e`: a real Lodestar validator client behind beaconmux, in front of three real
Lodestar beacon nodes, through a chaos schedule (a node started late, one killed with
SIGKILL and restarted, one stopped with SIGSTOP and resumed); then the same client with its
own fallback list of the three nodes under the same schedule; scored from the chain.

    python3 e2e/chaos.py                          # both runs, the long schedule, 4-s slots
    python3 e2e/chaos.py --schedule short         # the CI schedule
    python3 e2e/chaos.py --only beaconmux --run-dir /tmp/x

Prints the figures of both runs and one line per check; exit status 0 when every check
passed, 1 when one failed, 2 on a harness error (nothing could be judged). Everything is
kept in the run directory: per run the devnet's logs (beaconmux.log at debug level, vc.log
at debug level), samples.jsonl (beaconmux's status page and every node's own head, once a
slot), actions.json, score.json; summary.json at the top. The checks are in checks.py.
"""

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import checks  # noqa: E402
import devnet as dnmod  # noqa: E402
import evidence  # noqa: E402
import sampler as samplermod  # noqa: E402
import schedule as schedmod  # noqa: E402
import score as scoremod  # noqa: E402

REPO = os.path.dirname(HERE)


def log(msg):
    print(f"e2e: {msg}", flush=True)


def beaconmux_config(path, listen, urls):
    lines = ["# written by e2e/chaos.py", f'listen: "{listen}"', "log:", "  level: debug",
             "upstreams:"]
    for i, u in enumerate(urls):
        lines += [f"  - id: node{i}", f'    url: "{u}"']
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def start_beaconmux(dn, binary):
    port = dnmod.free_port()
    url = f"http://127.0.0.1:{port}"
    cfg = os.path.join(dn.run_dir, "beaconmux.yaml")
    beaconmux_config(cfg, f"127.0.0.1:{port}", dn.node_urls)
    dn.add_process("beaconmux", [binary, "--config", cfg])
    dnmod.wait_until(lambda: dnmod.http_get(url + "/beaconmux/v1/status")[0] == 200, 30,
                     "beaconmux's status page")
    return url


def best_node(dn):
    """Index of the running node with the highest head (to score the chain from)."""
    best = None
    for i in range(len(dn.nodes)):
        try:
            slot = dn.head(i)[0]
        except Exception:  # noqa: BLE001 - a node may be down
            continue
        if best is None or slot > best[1]:
            best = (i, slot)
    if best is None:
        raise dnmod.DevnetError("no node answers its head")
    return best[0]


def canonical_roots(url, slots):
    chain = scoremod.Chain(url)
    out = {}
    for s in range(0, slots + 1):
        b = chain.block_at(s)
        if b is not None:
            out[s] = b["root"]
    # a slot without a block: its head is the block before it
    last = None
    for s in range(0, slots + 1):
        if s in out:
            last = out[s]
        elif last is not None:
            out[s] = last
    return out


def run_one(mode, sched, args, top):
    """One devnet through the schedule; returns (checks.Run, info dict)."""
    sps = args.seconds_per_slot
    run_dir = os.path.join(top, mode)
    os.makedirs(run_dir, exist_ok=True)
    t0 = time.monotonic()
    dn = dnmod.Devnet(seconds_per_slot=sps, validators=args.validators,
                      genesis_delay=args.genesis_delay, run_dir=run_dir, vc_log_level="debug")
    dn.install_signal_handlers()
    info = {"mode": mode, "run_dir": run_dir}
    errors = []
    chaos = None
    try:
        dn.start(vc_url=None, late=sched.late_nodes())
        status_url = start_beaconmux(dn, args.beaconmux) if mode == "beaconmux" else None
        dn.start_vc(status_url or "nodes")
        log(f"{mode}: devnet up in {dn.timings['start_s']} s; client -> {dn.vc_url}; "
            f"genesis in {dn.genesis_time - time.time():.1f} s; {sched.slots} slots of {sps} s")
        chaos = schedmod.Chaos(dn, sched, say=lambda text: log(f"{mode}: {text}"))
        smp = samplermod.Sampler(dn, os.path.join(run_dir, "samples.jsonl"), status_url,
                                 first=0, last=sched.slots)
        chaos.start()
        smp.start()
        # the last slot's block (with the votes of the slot before) must be in
        dn.wait_for_slot(sched.slots, extra=0.9 * sps)
        end_time = time.time()
        if not chaos.wait_done(60):
            errors.append("the chaos schedule did not finish")
        if not smp.join(10):
            errors.append("the sampler did not finish")
        if smp.error:
            errors.append(f"sampler: {smp.error}")
        cpu = dn.cpu_seconds()
        info["cpu_cores"] = round(sum(v or 0 for v in cpu.values()) /
                                  (time.monotonic() - t0), 3)
        node = best_node(dn)
        rep = scoremod.score(dn.nodes[node].url, 1, sched.slots - 1, seconds_per_slot=sps)
        canonical = canonical_roots(dn.nodes[node].url, sched.slots)
    finally:
        dn.stop()
        if chaos is not None:
            chaos.release()
    info["wall_s"] = round(time.monotonic() - t0, 1)
    with open(os.path.join(run_dir, "score.json"), "w") as f:
        json.dump(rep, f, indent=2)
    with open(os.path.join(run_dir, "actions.json"), "w") as f:
        json.dump(chaos.as_json(), f, indent=2)
    vc = evidence.read_vc_log(os.path.join(run_dir, "vc.log"), dn.genesis_time)
    vc.errors = [(t, m) for t, m in vc.errors if t <= end_time]
    bm = (evidence.read_beaconmux_log(os.path.join(run_dir, "beaconmux.log"))
          if mode == "beaconmux" else None)
    run = checks.Run(schedule=sched, actions=list(chaos.log), genesis_time=dn.genesis_time,
                     seconds_per_slot=sps, node_urls=dn.node_urls, samples=smp.samples,
                     score=rep, canonical=canonical, bm_log=bm, vc_log=vc,
                     end_time=end_time)
    info["client_errors"] = evidence.error_kinds(vc.errors)
    info["harness"] = checks.harness_check(run, errors)
    return run, info


def report(runs, sched):
    lines = [f"schedule '{sched.name}': {sched.describe()}"]
    phases = [("all", 1, sched.slots - 1)] + sched.phases()
    for mode, (run, info) in runs.items():
        lines.append(f"{mode}: wall {info['wall_s']} s, devnet + beaconmux "
                     f"{info.get('cpu_cores', '?')} cores on average")
        for name, first, last in phases:
            f = checks.figures(run.score, first, last)
            extra = ""
            if f["missed_slots"]:
                extra += f"; missed slots {f['missed_slots']}"
            if f["head_wrong_slots"]:
                extra += f"; wrong head votes at slots {f['head_wrong_slots']}"
            lines.append(f"  {name:>10} (slots {first}..{last}): {checks.fmt_figures(f)}"
                         f"{extra}")
        if info["client_errors"]:
            lines.append(f"  validator client errors: {info['client_errors']}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schedule", choices=sorted(schedmod.SCHEDULES), default="long")
    ap.add_argument("--seconds-per-slot", type=int, default=4)
    ap.add_argument("--validators", type=int, default=16)
    ap.add_argument("--genesis-delay", type=int, default=30,
                    help="seconds from the devnet's start to genesis (the nodes, beaconmux "
                         "and the client must be up by then; 9 to 18 s on a loaded 2-core "
                         "machine)")
    ap.add_argument("--beaconmux", default=os.path.join(REPO, "build", "release", "beaconmux"))
    ap.add_argument("--run-dir", help="default: a new directory under /tmp")
    ap.add_argument("--only", choices=["beaconmux", "fallback"],
                    help="one run only (the comparison check then fails)")
    args = ap.parse_args(argv)

    if not os.path.exists(dnmod.lodestar_entry()):
        log(f"Lodestar is not installed at {dnmod.lodestar_entry()}: run e2e/install.sh")
        return 2
    if not os.access(args.beaconmux, os.X_OK) and args.only != "fallback":
        log(f"no beaconmux at {args.beaconmux}: run make")
        return 2
    sched = schedmod.SCHEDULES[args.schedule]
    top = os.path.abspath(args.run_dir) if args.run_dir else tempfile.mkdtemp(prefix="bm-e2e-")
    os.makedirs(top, exist_ok=True)
    log(f"run dir {top}; schedule '{sched.name}': {sched.describe()}")
    t0 = time.monotonic()
    runs = {}
    try:
        for mode in ("beaconmux", "fallback"):
            if args.only and mode != args.only:
                continue
            runs[mode] = run_one(mode, sched, args, top)
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    except (dnmod.DevnetError, scoremod.ScoreError, OSError) as e:
        log(f"harness error: {e}")
        return 2
    wall = round(time.monotonic() - t0, 1)

    results = []
    for mode, (run, info) in runs.items():
        h = info["harness"]
        h.name = f"{mode}: {h.name}"
        results.append(h)
    if "beaconmux" in runs:
        fb = runs["fallback"][0].score if "fallback" in runs else None
        results += checks.beaconmux_checks(runs["beaconmux"][0], fb)

    print(report(runs, sched), flush=True)
    for c in results:
        print(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.figure}", flush=True)
        for f in c.failures[:40]:
            print(f"       {f}", flush=True)
        if len(c.failures) > 40:
            print(f"       ... {len(c.failures) - 40} more", flush=True)
    failed = sum(1 for c in results if not c.ok)
    summary = {
        "schedule": {"name": sched.name, "slots": sched.slots, "describe": sched.describe()},
        "seconds_per_slot": args.seconds_per_slot,
        "wall_s": wall,
        "runs": {mode: {"wall_s": info["wall_s"], "cpu_cores": info.get("cpu_cores"),
                        "client_errors": info["client_errors"],
                        "figures": {name: checks.figures(run.score, a, b) for name, a, b in
                                    [("all", 1, sched.slots - 1)] + sched.phases()}}
                 for mode, (run, info) in runs.items()},
        "checks": [{"name": c.name, "ok": c.ok, "figure": c.figure, "failures": c.failures}
                   for c in results],
    }
    with open(os.path.join(top, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    log(f"{len(results) - failed} checks passed, {failed} failed; wall {wall} s; "
        f"summary {os.path.join(top, 'summary.json')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
