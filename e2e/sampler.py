# SPDX-License-Identifier: MIT
"""Samples the devnet once per slot, in a thread of its own: beaconmux's status page
(when there is a beaconmux) and, right after it, every node's own head
(`/eth/v1/beacon/headers/head`, asked of all nodes at once with a short timeout, so a
stopped node costs no more than the timeout). Each sample is a line of samples.jsonl:

  {"slot": S, "t": wall time, "status": {...} or null, "status_error": "...",
   "direct": [{"slot": N, "root": "0x.."} or {"error": "..."} per node]}

The chain's head at a sample is the highest head any node reports directly: the checks
compare beaconmux's view with it.
"""

import json
import threading
import time
import urllib.error
import urllib.request


def get_json(url, timeout):
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def direct_head(url, timeout):
    try:
        h = get_json(url + "/eth/v1/beacon/headers/head", timeout)["data"]
        return {"slot": int(h["header"]["message"]["slot"]), "root": h["root"]}
    except (OSError, ValueError, KeyError, urllib.error.URLError) as e:
        return {"error": type(e).__name__ + ": " + str(e)[:120]}


def direct_heads(urls, timeout):
    out = [None] * len(urls)

    def one(i):
        out[i] = direct_head(urls[i], timeout)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(urls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 2)
    return [o if o is not None else {"error": "no answer"} for o in out]


class Sampler:
    """Samples at `phase` (a fraction of the slot) of every slot from `first` to `last`."""

    def __init__(self, devnet, path, status_url=None, first=0, last=None, phase=2 / 3,
                 direct_timeout=0.5, status_timeout=1.0):
        self.dn = devnet
        self.path = path
        self.status_url = status_url
        self.first, self.last, self.phase = first, last, phase
        self.direct_timeout, self.status_timeout = direct_timeout, status_timeout
        self.samples = []
        self.error = None
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def join(self, timeout):
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self):
        try:
            with open(self.path, "w") as f:
                for slot in range(self.first, self.last + 1):
                    self.dn.wait_for_slot(slot, extra=self.phase * self.dn.seconds_per_slot)
                    s = self.sample(slot)
                    self.samples.append(s)
                    f.write(json.dumps(s) + "\n")
                    f.flush()
        except Exception as e:  # noqa: BLE001 - reported by the run as a harness error
            self.error = repr(e)

    def sample(self, slot):
        s = {"slot": slot, "t": time.time(), "status": None}
        if self.status_url:
            try:
                s["status"] = get_json(self.status_url + "/beaconmux/v1/status",
                                       self.status_timeout)
            except (OSError, ValueError, urllib.error.URLError) as e:
                s["status_error"] = repr(e)
        s["direct"] = direct_heads(self.dn.node_urls, self.direct_timeout)
        s["t_direct"] = time.time()
        return s
