# SPDX-License-Identifier: MIT
"""make demo's scoreboard: at each slot's attestation due time, ask beaconmux and the
lagging node for attestation data and compare both with beaconsim's ground truth."""
import json
import sys
import time
import urllib.request

mux, lagging, control = sys.argv[1], sys.argv[2], sys.argv[3]


def get(url, timeout=3.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read())
    except Exception as e:  # a stopped node is part of the demo
        return {"error": str(e)}


def short(root):
    return (root or "none")[:10]


ok_mux = ok_direct = total = 0
while True:
    truth = get(control + "/sim/v1/truth")
    if "error" in truth:
        time.sleep(1)
        continue
    slot = truth["current_slot"] + 1
    t = get("%s/sim/v1/truth?slot=%d" % (control, slot))
    due = t.get("attestation_due_ms") or t.get("due", {}).get("attestation_ms")
    if not due:
        due = t["start_ms"] + (t["end_ms"] - t["start_ms"]) // 3
    time.sleep(max(0.0, due / 1000.0 - time.time()))
    a = get("%s/eth/v1/validator/attestation_data?slot=%d&committee_index=0" % (mux, slot))
    b = get("%s/eth/v1/validator/attestation_data?slot=%d&committee_index=0" % (lagging, slot))
    t = get("%s/sim/v1/truth?slot=%d" % (control, slot))
    want = t.get("root")
    ra = a.get("data", {}).get("beacon_block_root")
    rb = b.get("data", {}).get("beacon_block_root")
    total += 1
    ok_mux += ra == want
    ok_direct += rb == want
    print("  slot %5d  canonical %s | via beaconmux %s %s | node0 direct %s %s   head votes: beaconmux %d/%d, node0 %d/%d"
          % (slot, short(want), short(ra), "ok  " if ra == want else "MISS", short(rb),
             "ok  " if rb == want else "MISS", ok_mux, total, ok_direct, total), flush=True)
