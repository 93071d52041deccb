# SPDX-License-Identifier: MIT
"""The assertions of `make e2e`, as functions of what a run recorded (no I/O here, so
test_checks.py can feed them made-up runs and see each one fail).

A run is described by a `Run`: the schedule and when its actions really happened, the
per-slot samples (beaconmux's status page and each node's own head), the parsed logs
(evidence.py) and the chain's score (score.py). Each check returns a `Check`: a name, ok or
not, a one-line figure, and the failures (one line each: slot, node, what was seen).

The chain's head at a sample is the highest head any node answered directly, right after
the status page was read. A node is "deliberately down" from its fault's action until the
action that brings it back completed (the late node: from the start until it started).
"""

from dataclasses import dataclass, field

import evidence

CLOCK_SLACK_S = 0.005  # beaconmux's and Lodestar's log stamps are whole milliseconds


@dataclass
class Check:
    name: str
    ok: bool
    figure: str = ""
    failures: list = field(default_factory=list)


@dataclass
class Run:
    schedule: object           # schedule.Schedule
    actions: list              # schedule.Action, as carried out
    genesis_time: float
    seconds_per_slot: int
    node_urls: list
    samples: list              # sampler.py dicts
    score: dict = None         # score.score() over slots 1..schedule.slots-1
    canonical: dict = None     # slot -> canonical block root (full), for the samples' slots
    bm_log: object = None      # evidence.BeaconmuxLog (beaconmux runs)
    vc_log: object = None      # evidence.VcLog
    end_time: float = 0.0

    def slot_start(self, slot):
        return self.genesis_time + slot * self.seconds_per_slot

    def slot_of(self, t):
        return int((t - self.genesis_time) // self.seconds_per_slot)

    def down_intervals(self, node):
        """[(t_down, t_up)] in which node was deliberately down."""
        out = []
        if node in self.schedule.late_nodes():
            start = next((a for a in self.actions if a.node == node and a.what == "start"),
                         None)
            out.append((0.0, start.t_end if start and not start.error else self.end_time))
        for d in (a for a in self.actions if a.node == node and a.what in ("kill", "stop")):
            up = next((a for a in self.actions if a.node == node and
                       a.what in ("restart", "resume") and a.t_begin >= d.t_begin), None)
            out.append((d.t_begin, up.t_end if up and not up.error else self.end_time))
        return out

    def down_since(self, node, t):
        """The time node went deliberately down if it is down at t, else None."""
        for a, b in self.down_intervals(node):
            if a <= t < b:
                return a
        return None

    def back_at(self, node):
        """Times at which node came back (started, restarted with its API up, resumed)."""
        return [b for a, b in self.down_intervals(node) if b < self.end_time]

    def recovering(self, node, t):
        """Within the recovery bound after node came back."""
        bound = self.schedule.recover_slots * self.seconds_per_slot
        return any(b <= t < b + bound for b in self.back_at(node))


def chain_head(sample):
    """(slot, root) of the highest head the nodes answered at the sample, or None."""
    heads = [d for d in sample["direct"] if "slot" in d]
    if not heads:
        return None
    best = max(heads, key=lambda d: d["slot"])
    return best["slot"], best["root"]


def upstream(status, i):
    ups = (status or {}).get("upstreams") or []
    return ups[i] if i < len(ups) else None


def _head_slot(u):
    h = (u or {}).get("head")
    return int(h["slot"]) if isinstance(h, dict) and h.get("slot") is not None else None


def _scored_samples(run):
    """Samples from slot 1 on (1 2/3 slots after genesis: inside the two-slot bound)."""
    return [s for s in run.samples if s["slot"] >= 1]


# --- the cluster head -----------------------------------------------------------------
def check_cluster_head(run):
    """From 2 slots after genesis on, the status page shows the cluster head, with the
    head guarantee on, within a slot of the chain's head, and on the canonical chain."""
    c = Check("cluster head follows the chain slot by slot (status page)", True)
    worst = 0
    for s in _scored_samples(run):
        st, ch = s["status"], chain_head(s)
        where = f"slot {s['slot']}"
        if st is None:
            c.failures.append(f"{where}: no status page ({s.get('status_error')})")
            continue
        hg = st.get("head_guarantee") or {}
        if not hg.get("ok"):
            c.failures.append(f"{where}: head_guarantee off: {hg.get('reason')}")
        head = st.get("cluster_head")
        if not head:
            c.failures.append(f"{where}: cluster_head null")
            continue
        if ch is None:
            c.failures.append(f"{where}: no node answered its head directly")
            continue
        slot = int(head["slot"])
        worst = max(worst, ch[0] - slot)
        if not ch[0] - 1 <= slot <= ch[0] + 1:
            c.failures.append(f"{where}: cluster head at slot {slot}, the chain's at {ch[0]}")
        want = (run.canonical or {}).get(slot)
        if want is not None and want != head["root"]:
            c.failures.append(f"{where}: cluster head {head['root'][:10]}@{slot} is not the "
                              f"canonical block {want[:10]} of slot {slot}")
    n = len(_scored_samples(run))
    c.ok = not c.failures and n > 0
    c.figure = f"{n} samples, cluster head at most {worst} slot(s) behind the chain"
    return c


def _node_views(run):
    """(sample, chain head, node index, its status page entry or None) for every node at
    every scored sample that has a status page and a chain head (the others are reported
    by check_cluster_head)."""
    for s in _scored_samples(run):
        ch = chain_head(s)
        if s["status"] is None or ch is None:
            continue
        for i in range(len(run.node_urls)):
            yield s, ch, i, upstream(s["status"], i)


def check_nodes_followed(run):
    """Every node that is up (not deliberately down, not within its recovery bound) is
    `ready` with a head and a lag, within a slot of the chain."""
    c = Check("every running node's head and lag within a slot of the chain", True)
    seen = 0
    for s, ch, i, u in _node_views(run):
        if run.down_since(i, s["t"]) is not None or run.recovering(i, s["t"]):
            continue
        seen += 1
        hs = _head_slot(u)
        where = f"slot {s['slot']} node{i}"
        if u is None:
            c.failures.append(f"{where}: not on the status page")
        elif hs is None or u.get("lag") is None:
            c.failures.append(f"{where}: head {u.get('head')} lag {u.get('lag')} "
                              f"(state {u.get('state')}: {u.get('reason')})")
        elif u.get("state") != "ready" or ch[0] - hs > 1 or u["lag"] > 1:
            c.failures.append(f"{where}: state {u.get('state')} ({u.get('reason')}), "
                              f"head {hs}, lag {u['lag']}, chain {ch[0]}")
    c.ok = not c.failures and seen > 0
    c.figure = f"{seen} node samples while up"
    return c


def check_down_nodes_say_so(run):
    """A node is `ready` only within a slot of the chain; a node deliberately down for two
    slots or more is not `ready`."""
    c = Check("stopped, killed and not-yet-started nodes are not shown ready", True)
    seen = 0
    for s, ch, i, u in _node_views(run):
        if u is None:
            continue
        hs = _head_slot(u)
        where = f"slot {s['slot']} node{i}"
        since = run.down_since(i, s["t"])
        if since is not None:
            seen += 1
        if u.get("state") == "ready" and (hs is None or ch[0] - hs > 1):
            c.failures.append(f"{where}: ready with head {hs}, the chain at {ch[0]}"
                              f"{' (deliberately down)' if since is not None else ''}")
        elif (since is not None and s["t"] - since >= 2 * run.seconds_per_slot and
              u.get("state") == "ready"):
            c.failures.append(f"{where}: down for {s['t'] - since:.1f} s, still ready "
                              f"({u.get('reason')})")
    c.ok = not c.failures and seen > 0
    c.figure = f"{seen} node samples while deliberately down"
    return c


def check_recovery(run):
    """A node that came back is `ready`, within a slot of the chain, within the bound."""
    c = Check("nodes back up are ready within "
              f"{run.schedule.recover_slots} slots", True)
    figs = []
    bound = run.schedule.recover_slots * run.seconds_per_slot
    for i in range(len(run.node_urls)):
        for t_up in run.back_at(i):
            ready_at, states = None, []
            for s in run.samples:
                if s["t"] < t_up:
                    continue
                u = upstream(s["status"], i)
                ch = chain_head(s)
                st = (u or {}).get("state")
                if st and (not states or states[-1] != st):
                    states.append(st)
                hs = _head_slot(u)
                if st == "ready" and hs is not None and ch and ch[0] - hs <= 1:
                    ready_at = s["t"]
                    break
            slot = run.slot_of(t_up)
            if ready_at is None or ready_at - t_up > bound:
                c.failures.append(f"node{i} back at slot {slot}: not ready within {bound} s "
                                  f"(states {' -> '.join(states)})")
            else:
                figs.append(f"node{i} (back at slot {slot}) ready after {ready_at - t_up:.1f} s"
                            f" via {' -> '.join(states)}")
    c.ok = not c.failures and bool(figs)
    c.figure = "; ".join(figs)
    return c


def check_stream_failures(run):
    """No repeated event stream failures for a node while it is up: the status page's
    exact counter, per interval between samples in which the node was up throughout (and
    not recovering), at most one per node; the log's lines are listed as evidence."""
    c = Check("no repeated stream failures for nodes that are up", True)
    counts = {}
    samples = [s for s in run.samples if s["status"] is not None]
    for prev, cur in zip(samples, samples[1:]):
        if cur["t"] < run.genesis_time:
            continue
        for i in range(len(run.node_urls)):
            a = ((upstream(prev["status"], i) or {}).get("stream") or {}).get("failures")
            b = ((upstream(cur["status"], i) or {}).get("stream") or {}).get("failures")
            if a is None or b is None or b <= a:
                continue
            up = all(run.down_since(i, t) is None and not run.recovering(i, t)
                     for t in (prev["t"], cur["t"]))
            if up and not _down_between(run, i, prev["t"], cur["t"]):
                counts[i] = counts.get(i, 0) + (b - a)
    lines = []
    if run.bm_log is not None:
        for f in run.bm_log.stream_failures:
            i = run.node_urls.index(f.url) if f.url in run.node_urls else None
            if (i is not None and run.genesis_time <= f.t <= run.end_time and
                    run.down_since(i, f.t) is None and not run.recovering(i, f.t)):
                lines.append(f.line)
    for i, n in sorted(counts.items()):
        if n > 1:
            c.failures.append(f"node{i}: {n} stream failures while up")
    c.failures += [f"  log: {ln}" for ln in lines] if c.failures else []
    c.ok = not c.failures
    c.figure = (f"failures while up: {counts or 'none'}; log lines while up: {len(lines)}")
    return c


def _down_between(run, node, t0, t1):
    return any(a < t1 and b > t0 for a, b in run.down_intervals(node))


def check_no_missing_head_warning(run):
    c = Check("no NO CLUSTER HEAD warning", True)
    if run.bm_log is None:
        c.ok = False
        c.failures.append("no beaconmux log")
        return c
    c.failures = [ln for t, ln in run.bm_log.no_head_warnings]
    c.ok = not c.failures
    c.figure = f"{len(run.bm_log.warnings)} WARN/ERROR lines in all"
    return c


# --- what the validator client was served ------------------------------------------------
def check_served_heads(run):
    """Each attestation the client signed carries a head the tracker held while the
    client's attestation_data request was open; every head event the client got from
    beaconmux's stream is a cluster head move of the tracker; no answer was served
    without the expected head (status counter)."""
    c = Check("each served attestation's head came from the tracker", True)
    moves = run.bm_log.moves if run.bm_log else []
    vc = run.vc_log
    if vc is None or not moves:
        c.ok = False
        c.failures.append(f"evidence missing: vc log {vc is not None}, tracker moves "
                          f"{len(moves)} (beaconmux must run at log level debug)")
        return c
    matched = signed = 0
    for slot in range(1, run.schedule.slots):
        a = vc.attestations.get(slot)
        if a is None:
            continue  # nothing was served: check_chain counts the missing votes
        signed += 1
        if a.t_request is None:
            c.failures.append(f"slot {slot}: no attestation_data request before signing")
            continue
        held = evidence.heads_between(moves, a.t_request - CLOCK_SLACK_S,
                                      a.t_response + CLOCK_SLACK_S)
        if any(a.head.startswith(h.root) and h.slot <= slot for h in held):
            matched += 1
            continue
        t0 = run.slot_start(slot)
        c.failures.append(
            f"slot {slot}: signed head {a.head[:10]}, requested at +{a.t_request - t0:.3f} s, "
            f"answered at +{a.t_response - t0:.3f} s; the tracker held "
            f"{', '.join(f'{h.root}@{h.slot} (since +{h.t - t0:.3f} s)' for h in held) or 'nothing'}")
    events_ok = 0
    for t, slot, root in vc.head_events:
        if any(mv.slot == slot and root.startswith(mv.root) and mv.t <= t + CLOCK_SLACK_S
               for mv in moves):
            events_ok += 1
        else:
            c.failures.append(f"head event {root[:10]}@{slot} at {t:.3f}: not a cluster head "
                              f"move of the tracker before it")
    last = next((s["status"] for s in reversed(run.samples) if s["status"]), None)
    fb = ((last or {}).get("attestation_data") or {}).get("fallback")
    if fb is None or fb > 0:
        c.failures.append(f"status attestation_data.fallback = {fb} (answers served "
                          f"without the expected head)")
    c.ok = not c.failures
    if signed == 0:
        c.failures.append("the client signed no attestation at all")
    c.figure = (f"{matched}/{signed} signed attestations carry a head the tracker held "
                f"during their request; {events_ok}/{len(vc.head_events)} head events "
                f"were tracker moves; served without the expected head: {fb}")
    return c


def check_client_errors(run):
    """The validator client logged no error from genesis to the end: every duty read and
    write it made through beaconmux was answered (a batch write whose items every node
    had, duplicates included, is answered 200)."""
    c = Check("the validator client logged no error", True)
    errs = [(t, m) for t, m in (run.vc_log.errors if run.vc_log else [])
            if run.genesis_time <= t <= run.end_time]
    for t, msg in errs:
        slot = run.slot_of(t)
        c.failures.append(f"slot {slot} +{t - run.slot_start(slot):.3f} s: {msg[:200]}")
    c.ok = run.vc_log is not None and not errs
    c.figure = f"{len(errs)} error lines" + (f" {evidence.error_kinds(errs)}" if errs else "")
    return c


# --- the chain ---------------------------------------------------------------------------
def figures(score, first=None, last=None):
    """Proposals, votes, head and target correctness over [first, last] of a score."""
    ps = score["per_slot"]
    keys = [s for s in ps if (first is None or int(s) >= first) and
            (last is None or int(s) <= last)]
    f = {"slots": len(keys),
         "proposals": sum(1 for s in keys if ps[s]["block"]),
         "votes_expected": sum(ps[s]["expected_votes"] or 0 for s in keys),
         "votes_included": sum(ps[s]["included_votes"] for s in keys),
         "head_correct": sum(ps[s]["head_correct"] for s in keys),
         "target_correct": sum(ps[s]["target_correct"] for s in keys)}
    f["missed_slots"] = sorted(int(s) for s in keys if not ps[s]["block"])
    f["head_wrong_slots"] = sorted(int(s) for s in keys
                                   if ps[s]["head_correct"] < (ps[s]["expected_votes"] or 0))
    return f


def check_chain(run):
    """Every proposal and every attestation made, with correct head and target: at least
    one node is up in every slot of the schedule."""
    c = Check("every proposal and attestation made, head and target correct (chain)", True)
    if not run.score:
        c.ok = False
        c.failures.append("no score")
        return c
    f = figures(run.score)
    c.figure = fmt_figures(f)
    if f["proposals"] < f["slots"]:
        c.failures.append(f"missed slots {f['missed_slots']}")
    for k in ("votes_included", "head_correct", "target_correct"):
        if f[k] < f["votes_expected"]:
            c.failures.append(f"{k} {f[k]} of {f['votes_expected']}")
    if f["head_wrong_slots"] and run.vc_log is not None:
        for slot in f["head_wrong_slots"]:
            c.failures += explain_vote(run, slot)
    c.ok = not c.failures
    return c


def explain_vote(run, slot):
    """What the client did for a slot whose votes are missing or wrong: what it signed
    and its error lines from the slot before to the end of the slot (Lodestar's client
    skips a slot's attestation when its previous slot's tasks ran into it)."""
    a = run.vc_log.attestations.get(slot)
    want = (run.canonical or {}).get(slot)
    out = [f"  slot {slot}: client signed {a.head[:10] if a else 'nothing'}, canonical block "
           f"{want[:10] if want else '?'}"]
    prev_end = run.vc_log.attest_task_end.get(slot - 1)
    if a is None and prev_end is not None and prev_end >= run.slot_start(slot):
        out.append(f"    the client's attestation task of slot {slot - 1} ended at slot {slot} "
                   f"+{prev_end - run.slot_start(slot):.3f} s: Lodestar then skips slot "
                   f"{slot}'s")
    t0, t1 = run.slot_start(slot - 1), run.slot_start(slot + 1)
    for t, msg in run.vc_log.errors:
        if t0 <= t < t1:
            out.append(f"    client at slot {run.slot_of(t)} "
                       f"+{t - run.slot_start(run.slot_of(t)):.3f} s: error: {msg[:160]}")
    return out


def check_at_least_fallback(run, fallback_score):
    c = Check("at least what the client's own fallback list achieves (same schedule)", True)
    if not run.score or not fallback_score:
        c.ok = False
        c.failures.append("a score is missing")
        return c
    mine, theirs = figures(run.score), figures(fallback_score)
    for k in ("proposals", "votes_included", "head_correct", "target_correct"):
        if mine[k] < theirs[k]:
            c.failures.append(f"{k}: beaconmux {mine[k]}, fallback list {theirs[k]}")
    c.ok = not c.failures
    c.figure = f"beaconmux {fmt_figures(mine)} | fallback list {fmt_figures(theirs)}"
    return c


def fmt_figures(f):
    return (f"proposals {f['proposals']}/{f['slots']}, attestations "
            f"{f['votes_included']}/{f['votes_expected']}, head correct {f['head_correct']}, "
            f"target correct {f['target_correct']}")


def harness_check(run, errors):
    c = Check("the chaos schedule ran as planned", True)
    c.failures = [f"slot {a.slot} {a.what} node{a.node}: {a.error}" for a in run.actions
                  if a.error] + list(errors)
    planned = 0
    for f in run.schedule.faults:
        planned += 1 if f.kind == "late" else 2
    if len(run.actions) != planned:
        c.failures.append(f"{len(run.actions)} of {planned} actions carried out")
    late = [a for a in run.actions if a.t_begin - run.slot_start(a.slot) >
            run.seconds_per_slot]
    c.failures += [f"slot {a.slot} {a.what} node{a.node}: began "
                   f"{a.t_begin - run.slot_start(a.slot):.1f} s into the slot" for a in late]
    c.ok = not c.failures
    c.figure = "; ".join(f"slot {a.slot} {a.what} node{a.node} "
                         f"({a.t_end - a.t_begin:.1f} s)" for a in run.actions)
    return c


def beaconmux_checks(run, fallback_score):
    return [check_cluster_head(run), check_nodes_followed(run), check_down_nodes_say_so(run),
            check_recovery(run), check_stream_failures(run),
            check_no_missing_head_warning(run), check_served_heads(run),
            check_client_errors(run), check_chain(run),
            check_at_least_fallback(run, fallback_score)]
