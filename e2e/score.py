#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Score a devnet run from the chain itself: read a beacon node's API (not beaconmux's).

For slots FIRST..LAST:
  proposals     a canonical block at the slot, or a missed slot; expected = every slot
                (every validator of the devnet is held by the one validator client).
  attestations  every validator vote (one bit of an aggregate) for a slot in the range
                included in a canonical block (each vote counted once, at its first
                inclusion); expected = the committee members of those slots.
                head correct:   data.beacon_block_root == the canonical block root at
                                data.slot (the latest block at or before that slot)
                target correct: data.target.root == the epoch-boundary block root (the
                                latest block at or before the target epoch's first slot)
Blocks are read from FIRST+1 to LAST + SLOTS_PER_EPOCH (or the head), the inclusion window.
Committee sizes come from states/{id}/committees (Lodestar v1.5.1 swaps its slot and index
fields: undone here) or, for epochs a node no longer serves, from the active validator count.

    python3 e2e/score.py http://127.0.0.1:PORT --from 1 --to 20 [--json]
    import score; rep = score.score(url, 1, 20); print(score.format_report(rep))
"""

import argparse
import json
import sys
import urllib.error
import urllib.request


class ScoreError(RuntimeError):
    pass


def _get(url, path, timeout=10.0):
    req = urllib.request.Request(url.rstrip("/") + path, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return 200, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, None


def _data(url, path):
    status, body = _get(url, path)
    if status != 200:
        raise ScoreError(f"GET {path}: HTTP {status}")
    return body["data"]


def bitlist_positions(hexbits):
    """Positions of the set bits of an SSZ bitlist (the highest set bit marks the length)."""
    b = bytes.fromhex(hexbits[2:] if hexbits.startswith("0x") else hexbits)
    bits = []
    for i, byte in enumerate(b):
        for j in range(8):
            if byte >> j & 1:
                bits.append(i * 8 + j)
    if not bits:
        raise ScoreError(f"bitlist {hexbits} has no length bit")
    return bits[:-1]  # drop the length marker


class Chain:
    """The canonical chain as one node sees it, block headers cached by slot."""

    def __init__(self, url):
        self.url = url
        spec = _data(url, "/eth/v1/config/spec")
        self.slots_per_epoch = int(spec["SLOTS_PER_EPOCH"])
        self.seconds_per_slot = int(spec["SECONDS_PER_SLOT"])
        self.max_committees_per_slot = int(spec["MAX_COMMITTEES_PER_SLOT"])
        self.target_committee_size = int(spec["TARGET_COMMITTEE_SIZE"])
        self._active = None
        self.head_slot = int(_data(url, "/eth/v1/beacon/headers/head")["header"]["message"]["slot"])
        self._blocks = {}  # slot -> header dict or None (no canonical block at that slot)

    def block_at(self, slot):
        """The canonical block header at exactly `slot`, or None."""
        if slot not in self._blocks:
            status, body = _get(self.url, f"/eth/v1/beacon/headers/{slot}")
            if status == 404:
                self._blocks[slot] = None
            elif status != 200:
                raise ScoreError(f"GET headers/{slot}: HTTP {status}")
            else:
                h = body["data"]
                # a node could answer with the block before a skipped slot: check the slot
                ok = int(h["header"]["message"]["slot"]) == slot and h.get("canonical", True)
                self._blocks[slot] = h if ok else None
        return self._blocks[slot]

    def root_at(self, slot):
        """Root of the latest canonical block at or before `slot`."""
        s = slot
        while s >= 0:
            b = self.block_at(s)
            if b is not None:
                return b["root"]
            s -= 1
        raise ScoreError(f"no block at or before slot {slot}")

    def epoch_start(self, epoch):
        return epoch * self.slots_per_epoch

    def committees(self, epoch):
        """{(slot, index): [validator indexes]} for an epoch, or None when not served.

        Lodestar v1.5.1 swaps the fields of states/{id}/committees: its "index" is the
        slot's offset in the epoch and its "slot" the committee index. That is detected
        (the slots do not cover the epoch) and undone.
        """
        start = self.epoch_start(epoch)
        head_epoch = self.head_slot // self.slots_per_epoch
        ids = ["head"] if abs(epoch - head_epoch) <= 1 else []
        ids += [str(start), str(min(start + self.slots_per_epoch - 1, self.head_slot))]
        for state_id in ids:
            status, body = _get(self.url, f"/eth/v1/beacon/states/{state_id}/committees"
                                          f"?epoch={epoch}")
            if status != 200 or not body["data"]:
                continue
            cs = [(int(c["slot"]), int(c["index"]), [int(v) for v in c["validators"]])
                  for c in body["data"]]
            slots = {c[0] for c in cs}
            if not all(start <= sl < start + self.slots_per_epoch for sl in slots) or \
                    len(slots) != self.slots_per_epoch:
                cs = [(start + idx, sl, vals) for sl, idx, vals in cs]
                slots = {c[0] for c in cs}
                if not all(start <= sl < start + self.slots_per_epoch for sl in slots):
                    continue
            return {(sl, idx): vals for sl, idx, vals in cs}
        return None


    def active_count(self):
        """Active validators at the head (a devnet has no deposits or exits)."""
        if self._active is None:
            vals = _data(self.url, "/eth/v1/beacon/states/head/validators")
            self._active = sum(1 for v in vals if v["status"].startswith("active"))
        return self._active

    def committee_sizes(self, epoch):
        """{(slot, index): size} computed from the active validator count.

        The spec splits the shuffled active set into SLOTS_PER_EPOCH * C committees, the
        k-th holding indexes [V*k//N, V*(k+1)//N): the sizes need no shuffling. Used when
        the node no longer serves an epoch's committees (older than the head epoch - 1).
        """
        v = self.active_count()
        spe = self.slots_per_epoch
        c = max(1, min(self.max_committees_per_slot, v // spe // self.target_committee_size))
        n = spe * c
        out = {}
        for off in range(spe):
            for idx in range(c):
                k = off * c + idx
                out[(self.epoch_start(epoch) + off, idx)] = v * (k + 1) // n - v * k // n
        return out


def score(url, first_slot, last_slot, seconds_per_slot=None):
    """Score slots first_slot..last_slot (inclusive) from node `url`. Returns a dict."""
    chain = Chain(url)
    last_slot = min(last_slot, chain.head_slot)
    if first_slot < 1:
        first_slot = 1  # slot 0 is genesis: no proposal, no attestations before it
    if last_slot < first_slot:
        raise ScoreError(f"nothing to score: head is at slot {chain.head_slot}")
    spe = chain.slots_per_epoch

    # proposals
    missed = [s for s in range(first_slot, last_slot + 1) if chain.block_at(s) is None]
    proposers = {s: int(chain.block_at(s)["header"]["message"]["proposer_index"])
                 for s in range(first_slot, last_slot + 1) if chain.block_at(s) is not None}

    # expected attestation votes from the committees
    expected = {}  # (slot, index) -> committee size
    committees_known = True
    computed_epochs = []
    for epoch in range(first_slot // spe, last_slot // spe + 1):
        c = chain.committees(epoch)
        if c is not None:
            sizes = {k: len(v) for k, v in c.items()}
        else:
            sizes = chain.committee_sizes(epoch)
            computed_epochs.append(epoch)
        for (slot, index), n in sizes.items():
            if first_slot <= slot <= last_slot:
                expected[(slot, index)] = n

    # included votes, counted once each at first inclusion
    votes = {}  # (slot, index, position) -> (head_ok, target_ok, inclusion_slot)
    window_end = min(chain.head_slot, last_slot + spe)
    for s in range(first_slot + 1, window_end + 1):
        b = chain.block_at(s)
        if b is None:
            continue
        for att in _data(url, f"/eth/v1/beacon/blocks/{b['root']}/attestations"):
            d = att["data"]
            aslot, index = int(d["slot"]), int(d["index"])
            if not first_slot <= aslot <= last_slot:
                continue
            head_ok = d["beacon_block_root"] == chain.root_at(aslot)
            target_ok = d["target"]["root"] == chain.root_at(
                chain.epoch_start(int(d["target"]["epoch"])))
            for pos in bitlist_positions(att["aggregation_bits"]):
                votes.setdefault((aslot, index, pos), (head_ok, target_ok, s))

    n_votes = len(votes)
    head_ok = sum(1 for v in votes.values() if v[0])
    target_ok = sum(1 for v in votes.values() if v[1])
    delays = [v[2] - k[0] for k, v in votes.items()]
    per_slot = {}
    for s in range(first_slot, last_slot + 1):
        exp = sum(n for (sl, _), n in expected.items() if sl == s) if committees_known else None
        vs = [v for k, v in votes.items() if k[0] == s]
        per_slot[s] = {
            "block": chain.block_at(s) is not None,
            "proposer": proposers.get(s),
            "expected_votes": exp,
            "included_votes": len(vs),
            "head_correct": sum(1 for v in vs if v[0]),
            "target_correct": sum(1 for v in vs if v[1]),
        }

    finality = _data(url, "/eth/v1/beacon/states/head/finality_checkpoints")
    return {
        "node": url,
        "first_slot": first_slot,
        "last_slot": last_slot,
        "head_slot": chain.head_slot,
        "slots_per_epoch": spe,
        "seconds_per_slot": seconds_per_slot or chain.seconds_per_slot,
        "proposals_made": (last_slot - first_slot + 1) - len(missed),
        "proposals_expected": last_slot - first_slot + 1,
        "missed_slots": missed,
        "attestations_expected": sum(expected.values()) if committees_known else None,
        "committee_sizes_computed_for_epochs": computed_epochs,
        "attestations_included": n_votes,
        "head_correct": head_ok,
        "target_correct": target_ok,
        "mean_inclusion_delay": round(sum(delays) / len(delays), 3) if delays else None,
        "inclusion_window_end": window_end,
        "finalized_epoch": int(finality["finalized"]["epoch"]),
        "justified_epoch": int(finality["current_justified"]["epoch"]),
        "per_slot": per_slot,
    }


def _pct(a, b):
    return f"{100.0 * a / b:.1f} %" if b else "n/a"


def format_report(r):
    exp = r["attestations_expected"]
    inc = r["attestations_included"]
    base = exp if exp else inc
    lines = [
        f"score of slots {r['first_slot']}..{r['last_slot']} from {r['node']} "
        f"(head {r['head_slot']}, blocks read up to {r['inclusion_window_end']})",
        f"  proposals:    {r['proposals_made']} / {r['proposals_expected']}"
        f" ({_pct(r['proposals_made'], r['proposals_expected'])})"
        + (f", missed slots {r['missed_slots']}" if r["missed_slots"] else ""),
        f"  attestations: {inc} included / {exp if exp is not None else '?'} expected"
        f" ({_pct(inc, exp) if exp else 'n/a'});"
        f" head correct {r['head_correct']} ({_pct(r['head_correct'], base)}),"
        f" target correct {r['target_correct']} ({_pct(r['target_correct'], base)})",
        f"  mean inclusion delay {r['mean_inclusion_delay']} slots;"
        f" justified epoch {r['justified_epoch']}, finalized epoch {r['finalized_epoch']}",
    ]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Score proposals and attestations of a devnet "
                                             "from a beacon node's API.")
    ap.add_argument("url", help="a beacon node's API, e.g. http://127.0.0.1:9596")
    ap.add_argument("--from", dest="first", type=int, default=1)
    ap.add_argument("--to", dest="last", type=int, default=10**9,
                    help="last slot (default: the head)")
    ap.add_argument("--json", action="store_true", help="print the whole report as JSON")
    ap.add_argument("--per-slot", action="store_true", help="also print a line per slot")
    args = ap.parse_args(argv)
    try:
        r = score(args.url, args.first, args.last)
    except (ScoreError, OSError) as e:
        print(f"score: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    print(format_report(r))
    if args.per_slot:
        for s, p in r["per_slot"].items():
            print(f"  slot {s:4d}: block {'yes' if p['block'] else 'NO '}"
                  f" proposer {p['proposer']!s:>4}  votes {p['included_votes']}"
                  f"/{p['expected_votes']} head ok {p['head_correct']}"
                  f" target ok {p['target_correct']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
