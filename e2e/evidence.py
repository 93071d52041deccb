# SPDX-License-Identifier: MIT
"""Reads the evidence of an e2e run from its logs.

beaconmux.log (run at log level debug, text format, UTC timestamps):
  - the head tracker's cluster head, move by move:
      <ts> debug head: cluster head extend 0xa37f19f0@1 (node 0)
      <ts> info  head: cluster head reorg 0x0a@5 -> 0x0b@6 (depth 1, announced by node 1)
  - event stream failures per node:
      <ts> debug nodestream http://127.0.0.1:P: connect failed (...); reconnecting in N ms
      <ts> info  nodestream http://127.0.0.1:P: stream dropped (...); reconnecting in N ms
  - the loud warning of a chain running without a cluster head ("NO CLUSTER HEAD").

vc.log (Lodestar's validator client at log level debug; the devnet runs it with TZ=UTC):
  - what it asked and when: `HttpClient request routeId=produceAttestationData` and its
    response (no slot in these lines: one attestation request per slot, in order)
  - what it signed: `Signed attestation slot=S, index=I, head=0x.., validatorIndex=V`
  - the heads its beacon node's event stream gave it: `Found new chain head slot=S, head=0x..`
  - `Published block slot=S`, `Published attestations slot=S`, and every `error:` line.

Everything here is parsing: the judgement is in checks.py.
"""

import datetime
import re
from dataclasses import dataclass, field

ANSI = re.compile(r"\x1b\[[0-9;]*m")
BM_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z (\w+)\s+(.*)$")
BM_MOVE = re.compile(r"^head: cluster head (\w+) (0x[0-9a-f]+)@(\d+) \(node (-?\d+)")
BM_JUMP = re.compile(r"^head: cluster head (\w+) (0x[0-9a-f]+)@(\d+) -> (0x[0-9a-f]+)@(\d+) "
                     r"\(depth [^,]*, announced by node (-?\d+)")
BM_STREAM = re.compile(r"^nodestream (\S+): (connect failed|stream dropped) \((.*)\); "
                       r"reconnecting in (\d+) ms")
TASK_STEP = re.compile(r"^(?:Published|Error publishing) (?:attestations|aggregateAndProofs) "
                       r"slot=(\d+)")
VC_LINE = re.compile(r"^([A-Z][a-z]{2}-\d\d \d\d:\d\d:\d\d\.\d{3})\[[^\]]*\]\s+(\w+): (.*)$")


def _utc(dt):
    return dt.replace(tzinfo=datetime.timezone.utc).timestamp()


def kv(text):
    """`slot=1, index=0, head=0x..` -> {"slot": "1", ...} (values without commas)."""
    out = {}
    for part in text.split(", "):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


# --- beaconmux -------------------------------------------------------------------------
@dataclass
class HeadMove:
    t: float
    move: str      # first, extend, reorg, jump
    root: str      # as logged: a prefix of the root (0x + 8 hex digits)
    slot: int
    node: int


@dataclass
class StreamFailure:
    t: float
    url: str
    kind: str      # "connect failed" or "stream dropped"
    detail: str
    line: str


@dataclass
class BeaconmuxLog:
    moves: list = field(default_factory=list)
    stream_failures: list = field(default_factory=list)
    no_head_warnings: list = field(default_factory=list)  # (t, line)
    warnings: list = field(default_factory=list)          # (t, line) of WARN and ERROR
    lines: int = 0


def read_beaconmux_log(path):
    out = BeaconmuxLog()
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            out.lines += 1
            m = BM_LINE.match(line)
            if not m:
                continue
            t = _utc(datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f"))
            level, msg = m.group(2), m.group(3)
            j = BM_JUMP.match(msg)
            if j:
                out.moves.append(HeadMove(t, j.group(1), j.group(4), int(j.group(5)),
                                          int(j.group(6))))
                continue
            mv = BM_MOVE.match(msg)
            if mv:
                out.moves.append(HeadMove(t, mv.group(1), mv.group(2), int(mv.group(3)),
                                          int(mv.group(4))))
                continue
            s = BM_STREAM.match(msg)
            if s:
                out.stream_failures.append(StreamFailure(t, s.group(1), s.group(2),
                                                         s.group(3), line))
            if "NO CLUSTER HEAD" in msg:
                out.no_head_warnings.append((t, line))
            if level in ("warn", "error"):
                out.warnings.append((t, line))
    return out


def head_at(moves, t):
    """The cluster head (a HeadMove) beaconmux held at wall time t, or None."""
    cur = None
    for mv in moves:
        if mv.t > t:
            break
        cur = mv
    return cur


def heads_between(moves, t0, t1):
    """Every cluster head beaconmux held at some instant of [t0, t1]."""
    out = []
    cur = head_at(moves, t0)
    if cur is not None:
        out.append(cur)
    out += [mv for mv in moves if t0 < mv.t <= t1]
    return out


# --- the validator client --------------------------------------------------------------
@dataclass
class Attestation:
    slot: int
    head: str           # the full root the client signed
    t_signed: float
    t_request: float = None   # its produceAttestationData request and response
    t_response: float = None
    validators: int = 0


@dataclass
class VcLog:
    attestations: dict = field(default_factory=dict)  # slot -> Attestation
    head_events: list = field(default_factory=list)   # (t, slot, root)
    blocks_published: list = field(default_factory=list)   # slots
    attestations_published: dict = field(default_factory=dict)  # slot -> count
    errors: list = field(default_factory=list)  # (t, first line)
    # slot -> when the client's attestation task of the slot logged its last step (its
    # attestations or aggregates published or failed): Lodestar's client runs the task
    # of a slot only when the previous one has ended, so one that runs into the next slot
    # makes it skip that slot's attestations
    attest_task_end: dict = field(default_factory=dict)
    lines: int = 0


def _vc_time(stamp, year):
    return _utc(datetime.datetime.strptime(f"{year}-{stamp}", "%Y-%b-%d %H:%M:%S.%f"))


def read_vc_log(path, near_time):
    """Parse vc.log; `near_time` (e.g. genesis) gives the year Lodestar leaves out."""
    year = datetime.datetime.fromtimestamp(near_time, datetime.timezone.utc).year
    out = VcLog()
    requests, responses = [], []
    with open(path, errors="replace") as f:
        for raw in f:
            out.lines += 1
            m = VC_LINE.match(ANSI.sub("", raw.rstrip("\n")))
            if not m:
                continue
            t = _vc_time(m.group(1), year)
            if abs(t - near_time) > 180 * 86400:  # the run crossed a new year
                t = _vc_time(m.group(1), year + (1 if t < near_time else -1))
            level, msg = m.group(2), m.group(3)
            if msg == "HttpClient request routeId=produceAttestationData":
                requests.append(t)
            elif msg == "HttpClient response routeId=produceAttestationData":
                responses.append(t)
            elif msg.startswith("Signed attestation "):
                a = kv(msg[len("Signed attestation "):])
                slot = int(a["slot"])
                if slot not in out.attestations:
                    out.attestations[slot] = Attestation(slot, a["head"], t)
                out.attestations[slot].validators += 1
            elif msg.startswith("Found new chain head "):
                a = kv(msg[len("Found new chain head "):])
                out.head_events.append((t, int(a["slot"]), a["head"]))
            elif msg.startswith("Published block "):
                out.blocks_published.append(int(kv(msg[len("Published block "):])["slot"]))
            elif msg.startswith("Published attestations "):
                a = kv(msg[len("Published attestations "):])
                out.attestations_published[int(a["slot"])] = int(a["count"])
            if level == "error":
                out.errors.append((t, msg))
            step = TASK_STEP.match(msg)
            if step:
                slot = int(step.group(1))
                out.attest_task_end[slot] = max(t, out.attest_task_end.get(slot, t))
    # each signed attestation's data came from the last request before it was signed
    for a in out.attestations.values():
        before = [r for r in requests if r <= a.t_signed]
        if before:
            a.t_request = before[-1]
            after = [r for r in responses if a.t_request <= r <= a.t_signed]
            a.t_response = after[0] if after else a.t_signed
    return out


def error_kinds(errors):
    """Counts of the client's error lines by their message up to the first ` slot=`, `  -`
    or `:` (e.g. "Error publishing SyncCommitteeContribution")."""
    counts = {}
    for _, msg in errors:
        k = re.split(r" slot=| {2}-|: | request to ", msg, maxsplit=1)[0].strip()
        counts[k] = counts.get(k, 0) + 1
    return counts
