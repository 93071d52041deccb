#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check the devnet harness itself on 2-s slots (about 2 minutes): start with node2 late,
start it, kill -9 node1 and restart it, SIGSTOP node0 and SIGCONT it; after each step the
nodes must agree on the head again; the chain must keep proposing; stop leaves no process.

    python3 e2e/check_devnet.py [--run-dir DIR] [--seconds-per-slot 2]

Prints one line per check and 'N passed, M failed'; exit status 1 when a check failed.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import devnet as dnmod  # noqa: E402
import score as scoremod  # noqa: E402

results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def heads_agree(dn, indexes, min_slot):
    hs = [dn.head(i) for i in indexes]
    return len({h[1] for h in hs}) == 1 and hs[0][0] >= min_slot


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir")
    ap.add_argument("--seconds-per-slot", type=int, default=2)
    args = ap.parse_args(argv)
    sps = args.seconds_per_slot
    bound = 12 * sps + 30  # generous bound for a node to catch up after a restart

    dn = dnmod.Devnet(seconds_per_slot=sps, run_dir=args.run_dir)
    dn.install_signal_handlers()
    pids = []
    try:
        t0 = time.monotonic()
        dn.start(vc_url="nodes", late=[2])
        check("start with node2 late", True, f"{dn.timings}")
        dn.wait_for_head(0, 4)
        check("node0 and node1 follow the chain", heads_agree(dn, [0, 1], 4),
              f"heads {dn.head(0)[0]} {dn.head(1)[0]}")

        dn.start_node(2)
        dnmod.wait_until(lambda: heads_agree(dn, [0, 1, 2], 1), bound,
                         "late node2 to catch up", interval=0.5)
        check("late node2 syncs to the others' head", True, f"head {dn.head(2)[0]}, peers "
              f"{dn.peer_count(2)}")

        dn.kill_node(1)
        check("kill -9 node1", not dn.node_running(1))
        s = dn.current_slot()
        dn.wait_for_head(0, s + 2)
        check("chain goes on without node1", dn.head(0)[0] >= s + 2)
        dn.restart_node(1)
        dnmod.wait_until(lambda: heads_agree(dn, [0, 1, 2], s + 2), bound,
                         "restarted node1 to catch up", interval=0.5)
        check("restarted node1 catches up", True, f"head {dn.head(1)[0]}, peers "
              f"{dn.peer_count(1)}")

        dn.pause_node(0)
        s = dn.current_slot()
        try:
            dnmod.http_get(dn.nodes[0].url + "/eth/v1/node/version", timeout=1)
            answered = True
        except OSError:
            answered = False
        check("SIGSTOP node0: it answers nothing", not answered)
        dn.wait_for_head(1, s + 2)
        dn.resume_node(0)
        dnmod.wait_until(lambda: heads_agree(dn, [0, 1, 2], s + 2), bound,
                         "resumed node0 to catch up", interval=0.5)
        check("SIGCONT node0: it catches up", True, f"head {dn.head(0)[0]}")

        last = dn.current_slot()
        dn.wait_for_slot(last + 1, extra=sps * 0.9)
        rep = scoremod.score(dn.nodes[0].url, 1, last)
        print(scoremod.format_report(rep), flush=True)
        # node0 held 1/3 of nothing (the client fails over), so every slot but the ones
        # around the restarts should have a block.
        check("proposals in most slots", rep["proposals_made"] >= 0.7 * rep["proposals_expected"],
              f"{rep['proposals_made']}/{rep['proposals_expected']}")
        pids = [p.pid for p in [dn.vc] + [n.proc for n in dn.nodes] if p and p.running()]
        print(f"run took {time.monotonic() - t0:.0f} s, CPU s {dn.cpu_seconds()}", flush=True)
    except dnmod.DevnetError as e:
        check("harness", False, str(e))
    finally:
        dn.stop()
    alive = [p for p in pids if os.path.exists(f"/proc/{p}")]
    check("stop leaves no process", not alive, f"alive {alive}" if alive else "")
    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
