# SPDX-License-Identifier: MIT
"""The web dashboard (/ui/) in a real browser: Debian's headless Chromium, driven through
chromedriver's W3C WebDriver HTTP API from the standard library (no Selenium).

beaconmux runs in front of beaconsim with one node lagging (it imports every block 2.5
slots late) and one forked (its own branch). The test waits for beaconmux to judge them so,
loads /ui/ and asserts on the DOM the page rendered: a row per node with its state written
out, heatmap cells for the recent slots (the forked node's marked as another block, the
lagging node's late), the fork view naming the forked node, the journal's rows; then on a
phone-sized window, that tables became cards and the heatmap scrolls to the newest slot.
It saves screenshots (BM_UI_SCREENSHOT_DIR, else the build directory); the one of the
desktop window is docs/img/dashboard.png in the README.

Chromium and chromedriver come from scripts/install-deps.sh observe when missing; without
them (no network, no root) the test is skipped.
"""
import base64
import json
import os
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import (BIN_DIR, QUICK_NODES, Beaconmux, Beaconsim, Proc,  # noqa: E402
                     ensure_packages, free_port, http_request, main, wait_for)

SLOT_MS = 1000
CONFIG = QUICK_NODES + """health:
  maxHeadLag: 1
"""
CHROME_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage", "--window-size=1280,1700"]


class WebDriver:
    """The few W3C WebDriver commands the test needs, over chromedriver's HTTP API."""

    def __init__(self, profile):
        self.port = free_port()
        self.proc = Proc(["chromedriver", "--port=%d" % self.port, "--allowed-ips=127.0.0.1"])
        wait_for(lambda: self._ready(), 20, interval=0.1, what="chromedriver")
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": shutil.which("chromium"),
                                   "args": CHROME_ARGS + ["--user-data-dir=" + profile]}}}}
        self.session = self._call("POST", "/session", caps)["sessionId"]

    def _ready(self):
        try:
            st, _, body = http_request(self.port, "GET", "/status", timeout=2)
            return st == 200 and json.loads(body)["value"]["ready"]
        except OSError:
            return False

    def _call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        st, _, raw = http_request(self.port, method, path, data,
                                  {"Content-Type": "application/json"} if data else None, timeout=60)
        doc = json.loads(raw)
        if st != 200:
            raise AssertionError("webdriver %s %s: %s %s" % (method, path, st, doc))
        return doc["value"]

    def cmd(self, method, what, body=None):
        return self._call(method, "/session/%s%s" % (self.session, what), body)

    def go(self, url):
        self.cmd("POST", "/url", {"url": url})

    def js(self, script, *args):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def resize(self, w, h):
        self.cmd("POST", "/window/rect", {"width": w, "height": h})

    def screenshot(self, path):
        png = base64.b64decode(self.cmd("GET", "/screenshot"))
        with open(path, "wb") as f:
            f.write(png)
        return len(png)

    def quit(self):
        try:
            self._call("DELETE", "/session/%s" % self.session)
        finally:
            self.proc.stop()


# What the page shows, read in the page: node rows, heatmap cells, fork rows, journal rows.
READ_PAGE = """
const rows = [...document.querySelectorAll('#node-table tr.node-row')].map(r => ({
  node: r.dataset.node, state: r.dataset.state,
  stateText: r.querySelector('.state').textContent,
  why: r.querySelector('td[data-label=Why]').textContent}));
const cells = [...document.querySelectorAll('#heat .cell')].map(c => ({
  node: c.dataset.node, slot: Number(c.dataset.slot), mark: c.dataset.mark,
  text: c.textContent, label: c.getAttribute('aria-label'), bg: c.style.backgroundColor}));
const forks = document.getElementById('forks').hidden ? [] :
  [...document.querySelectorAll('#fork-table tbody tr')].map(r => r.textContent);
const journal = [...document.querySelectorAll('#journal-table tr.journal-row')].map(r => ({
  slot: r.dataset.slot, verdict: r.dataset.verdict, text: r.textContent}));
return {rendered: document.body.dataset.rendered || null, conn: document.getElementById('conn').textContent,
  rows, cells, forks, journal, summary: document.getElementById('journal-summary').textContent};
"""


class Dashboard(unittest.TestCase):
    def test_dashboard_in_chromium(self):
        if not ensure_packages("chromium", "chromedriver"):
            self.skipTest("chromium and chromedriver are not available here")
        sim = Beaconsim(nodes=4, slot_ms=SLOT_MS, slots_per_epoch=8,
                        node_specs={0: "lag=600", 2: "lag=2500", 3: "fork"})
        profile = tempfile.mkdtemp(prefix="bm-chromium-")
        out_dir = os.environ.get("BM_UI_SCREENSHOT_DIR") or BIN_DIR
        mux = driver = None
        try:
            mux = Beaconmux(config_text=CONFIG + "upstreams:\n" + "".join(
                "  - id: n%d\n    url: %s\n" % (i, u) for i, u in enumerate(sim.nodes)))
            want = {"n0": "ready", "n1": "ready", "n2": "lagging", "n3": "forked"}
            wait_for(lambda: mux.node_states() == want, 30, interval=0.2,
                     what="n2 lagging and n3 forked")
            self.validator_reads(sim, mux, max(4, int(os.environ.get("BM_UI_WARMUP_SLOTS", "0"))))
            driver = WebDriver(profile)
            driver.go("http://127.0.0.1:%d/ui/" % mux.port)

            seen = []

            def page():  # rendered, with the states beaconmux gives the nodes
                p = driver.js(READ_PAGE)
                shown = {r["node"]: r["state"] for r in p["rows"]}
                seen.append(shown)
                # n1 follows the chain: its fork-view row says "equal" except for the moment at a
                # slot's start when its new head is not yet placed ("unknown")
                n1_equal = any("n1" in f and "equal" in f for f in p["forks"])
                return p if p["rendered"] and p["journal"] and shown == want and n1_equal else None
            try:
                p = wait_for(page, 30, interval=0.3, what="the dashboard rendered with %s" % want)
            except AssertionError as e:
                raise AssertionError("%s; the page showed last: %s" % (e, seen[-3:]))
            self.check_page(p, want)
            size = driver.screenshot(os.path.join(out_dir, "dashboard.png"))
            self.assertGreater(size, 10000)
            self.check_phone(driver)
            driver.screenshot(os.path.join(out_dir, "dashboard-phone.png"))
            print("\ndashboard rendered in Chromium; screenshots in %s" % out_dir, file=sys.stderr)
        finally:
            if driver:
                driver.quit()
            if mux:
                self.assertEqual(mux.stop(), 0)
            sim.stop()
            shutil.rmtree(profile, ignore_errors=True)

    @staticmethod
    def validator_reads(sim, mux, slots):
        """A validator client's attestation reads at each slot's due time, for the journal."""
        first = sim.truth()["current_slot"] + 1
        for slot in range(first, first + slots):
            sim.wait_slot(slot)
            due = sim.truth(slot)["attestation_due_ms"]
            time.sleep(max(0, due / 1000.0 - time.time()))
            http_request(mux.port, "GET", "/eth/v1/validator/attestation_data?slot=%d" % slot)

    def check_page(self, p, want):
        self.assertEqual(p["conn"], "live")
        states = {r["node"]: (r["state"], r["stateText"]) for r in p["rows"]}
        self.assertEqual(states, {n: (st, st) for n, st in want.items()})
        self.assertIn("off the cluster chain", [r for r in p["rows"] if r["node"] == "n3"][0]["why"])

        # the heatmap: the last 64 slots (fewer in a young chain) for every node
        by_node = {}
        for c in p["cells"]:
            by_node.setdefault(c["node"], []).append(c)
        self.assertEqual(sorted(by_node), ["n0", "n1", "n2", "n3"])
        newest = max(c["slot"] for c in p["cells"])
        for cs in by_node.values():
            self.assertEqual(sorted(c["slot"] for c in cs), list(range(max(0, newest - 63), newest + 1)))

        def recent(n, lo, hi):  # slots newest-hi .. newest-lo, after genesis
            return [c for c in by_node[n] if c["slot"] > 0 and newest - hi <= c["slot"] <= newest - lo]
        n1 = recent("n1", 2, 6)
        self.assertTrue(n1 and all(c["mark"] in ("ok", "empty") for c in n1), n1)
        self.assertTrue(any(c["mark"] == "ok" and c["bg"] for c in n1), n1)
        timed = 0
        for c in recent("n0", 2, 6):
            if c["mark"] != "ok":
                continue
            if "arrived" in c["label"]:  # the first node's 600 ms, written in the label
                self.assertRegex(c["label"], r"arrived 6\d\d ms into the slot")
                timed += 1
            else:  # a head learnt by a poll: its first (before its stream's first event),
                # or one whose answer crossed the node's event: no arrival time to show
                self.assertIn("seen when asked, arrival time unknown", c["label"])
        self.assertGreater(timed, 0)
        n3 = [c for c in recent("n3", 2, 6) if c["mark"] != "empty"]
        self.assertTrue(n3 and all(c["mark"] == "off_chain" and c["text"] == "F" for c in n3), n3)
        n2 = [c for c in recent("n2", 4, 8) if c["mark"] == "ok"]
        self.assertTrue(n2, recent("n2", 4, 8))
        for c in n2:  # late, and the label says how late
            self.assertRegex(c["label"], r"arrived (2[4-9]\d\d|3\d\d\d) ms into the slot")
        for c in p["cells"]:
            self.assertTrue(c["label"].startswith("%s, slot %d" % (c["node"], c["slot"])), c)
            if c["mark"] in ("missed", "off_chain", "empty"):
                self.assertNotEqual(c["text"], "", c)  # never colour alone

        # the fork view: the forked node on a root of its own
        self.assertTrue(any("n3" in f and "forked" in f for f in p["forks"]), p["forks"])
        self.assertTrue(any("n1" in f and "equal" in f for f in p["forks"]), p["forks"])
        # the journal: the first node was stale at every due time, beaconmux was not
        self.assertRegex(p["summary"], r"^[1-9]\d* votes saved")
        self.assertTrue(any("vote saved" in j["text"] for j in p["journal"]), p["journal"])
        self.assertTrue(all(j["verdict"] in ("correct", "wrong", "missed", "unknown", "pending")
                            for j in p["journal"]))

    def check_phone(self, driver):
        """A phone: the tables are cards, the page never scrolls sideways, and the newest
        slot of the heatmap is in view (the heatmap scrolls, not the page)."""
        driver.resize(390, 844)
        phone_js = (
            "const cells = [...document.querySelectorAll('#heat .cell')];"
            "const newest = Math.max(...cells.map(c => Number(c.dataset.slot)));"
            "const last = cells.filter(c => Number(c.dataset.slot) === newest);"
            "const w = document.documentElement.clientWidth;"
            "return {thead: getComputedStyle(document.querySelector('#node-table thead')).display,"
            " width: w, pageScroll: document.documentElement.scrollWidth,"
            " newestVisible: last.length === 4 && last.every(c => {"
            "   const r = c.getBoundingClientRect(); return r.left >= 0 && r.right <= w; })};")
        phone = wait_for(lambda: (lambda ph: ph if ph["thead"] == "none" and ph["newestVisible"]
                                  else None)(driver.js(phone_js)), 10, what="the phone layout")
        self.assertLessEqual(phone["pageScroll"], phone["width"] + 1, phone)


if __name__ == "__main__":
    main()
