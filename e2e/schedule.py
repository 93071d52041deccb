# SPDX-License-Identifier: MIT
"""The chaos schedule of `make e2e`: which beacon node fails how, and at which slot.

Three faults, one per node, at slot boundaries (plus an offset into the slot):

  late   the node is not started with the others; it starts at `up_slot` while the chain
         runs, is `syncing`, then catches up
  kill   SIGKILL at `down_slot`, restarted on its database at `up_slot`
  stop   SIGSTOP at `down_slot` (its sockets stay open, it answers nothing), SIGCONT at
         `up_slot`

The same schedule runs once with the validator client behind beaconmux and once with the
client's own fallback list of the three nodes, so the two scores compare.

`Chaos` carries a schedule out against a devnet.Devnet, each action in a thread of its own
(a restart waits for the node's API, which must hold up neither the per-slot sampling nor
the next action), and records when each action really happened, so the checks know which
node was deliberately down when.
"""

import threading
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Fault:
    kind: str       # "late", "kill" or "stop"
    node: int       # the node's index in the devnet
    down_slot: int  # when the node goes down (0 for "late": down from the start)
    up_slot: int    # when it is started, restarted or resumed

    def describe(self):
        if self.kind == "late":
            return f"node{self.node} started late, at slot {self.up_slot}"
        verb = "killed (SIGKILL)" if self.kind == "kill" else "stopped (SIGSTOP)"
        again = "restarted" if self.kind == "kill" else "resumed (SIGCONT)"
        return (f"node{self.node} {verb} at slot {self.down_slot}, {again} at slot "
                f"{self.up_slot} ({self.up_slot - self.down_slot} slots)")


@dataclass(frozen=True)
class Schedule:
    name: str
    slots: int          # the run ends when this slot starts; slots 1..slots-1 are scored
    faults: tuple
    offset: float = 0.5  # actions happen this fraction of a slot after the slot starts
    recover_slots: int = 6  # a node back up must be `ready` within this many slots

    def describe(self):
        return "; ".join(f.describe() for f in self.faults)

    def late_nodes(self):
        return [f.node for f in self.faults if f.kind == "late"]

    def phases(self):
        """Named slot ranges for the per-phase figures: each fault from its down slot
        until `recover_slots` after it came back (the late node: from slot 1)."""
        out = []
        for f in self.faults:
            first = max(1, f.down_slot)
            last = min(self.slots - 1, f.up_slot + self.recover_slots)
            out.append((f"{f.kind} node{f.node}", first, last))
        return out


SCHEDULES = {
    # 40 slots (160 s on 4-s slots): node1 down for 5 slots, node0 stopped for 6 (24 s).
    "long": Schedule("long", 40, (Fault("late", 2, 0, 5), Fault("kill", 1, 12, 17),
                                  Fault("stop", 0, 24, 30))),
    # 26 slots, the same three faults, shorter.
    "short": Schedule("short", 26, (Fault("late", 2, 0, 3), Fault("kill", 1, 8, 12),
                                    Fault("stop", 0, 15, 19))),
}


@dataclass
class Action:
    slot: int
    node: int
    what: str            # "start", "kill", "restart", "stop", "resume"
    t_begin: float = 0.0  # wall clock
    t_end: float = 0.0
    error: str = ""


@dataclass
class Chaos:
    """Runs a schedule's actions against a devnet; `log` lists what happened, when."""

    devnet: object
    schedule: Schedule
    say: object = None  # say(text): progress lines, e.g. print
    log: list = field(default_factory=list)
    _threads: list = field(default_factory=list)
    _pending: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _release: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    def actions(self):
        acts = []
        for f in self.schedule.faults:
            if f.kind == "late":
                acts.append(Action(f.up_slot, f.node, "start"))
            elif f.kind == "kill":
                acts += [Action(f.down_slot, f.node, "kill"),
                         Action(f.up_slot, f.node, "restart")]
            else:
                acts += [Action(f.down_slot, f.node, "stop"),
                         Action(f.up_slot, f.node, "resume")]
        return sorted(acts, key=lambda a: a.slot)

    def start(self):
        """One thread per action: a restart that waits for the node's API must not hold
        up the next action."""
        acts = self.actions()
        self._pending = len(acts)
        self._threads = [threading.Thread(target=self._run, args=(a,), daemon=True,
                                          name=f"chaos-{a.what}-node{a.node}") for a in acts]
        for t in self._threads:
            t.start()

    def wait_done(self, timeout):
        """True when every action was carried out within timeout s."""
        return self.done.wait(timeout)

    def release(self):
        """Let the threads end: only after the devnet stopped. A process started from a
        thread gets SIGKILL when that thread ends (devnet._child_setup's PDEATHSIG)."""
        self._release.set()
        for t in self._threads:
            t.join(5)

    def _run(self, a):
        dn = self.devnet
        at = dn.slot_start(a.slot) + self.schedule.offset * dn.seconds_per_slot
        if self._release.wait(max(0.0, at - time.time())):
            return  # the run ended early: nothing more to do to this devnet
        a.t_begin = time.time()
        try:
            if a.what in ("start", "restart"):
                dn.restart_node(a.node)  # waits for the API, then dials the peers
            elif a.what == "kill":
                dn.kill_node(a.node)
            elif a.what == "stop":
                dn.pause_node(a.node)
            else:
                dn.resume_node(a.node)
        except Exception as e:  # noqa: BLE001 - recorded; the checks fail on it
            a.error = repr(e)
        a.t_end = time.time()
        if self.say:
            self.say(f"slot {a.slot}: {a.what} node{a.node} "
                     f"({a.t_end - a.t_begin:.1f} s){' FAILED: ' + a.error if a.error else ''}")
        with self._lock:
            self.log.append(a)
            self.log.sort(key=lambda x: x.t_begin)
            self._pending -= 1
            if self._pending == 0:
                self.done.set()
        self._release.wait()

    def as_json(self):
        with self._lock:
            return [vars(a) for a in self.log]
