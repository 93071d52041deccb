# SPDX-License-Identifier: MIT
"""beaconmux --check, the real binary: every kind of configuration error ends with exit
status 2 and a message that names the file, the line and the column (or, for what is
checked on the whole configuration, the key); a valid file exits 0 and prints the
configuration with its secrets masked."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN_DIR, SOURCE_DIR  # noqa: E402

MUX = os.path.join(BIN_DIR, "beaconmux")
ENV = {"BM_T_PASS": "s3cret", "BM_T_NL": "a\nb", "BM_T_BIG": "x" * 40000}

UP = "upstreams:\n  - url: http://127.0.0.1:5052\n"

# (file text, "line:col: start of the message") for every error the file walk reports.
POSITIONED = [
    # keys
    ("upstrem: 1\n", "1:1: unknown key \"upstrem\" at the top level (expected one of: listen,"),
    ("server:\n  idleTimout: 1s\n", "2:3: unknown key \"idleTimout\" in \"server\""),
    ("upstreams:\n  - url: http://a\n    bogus: 1\n", "3:5: unknown key \"bogus\" in \"upstreams[0]\""),
    ("duties:\n  headRoot:\n    maxhold: 1s\n", "3:5: unknown key \"maxhold\" in \"duties.headRoot\""),
    ("server:\n  idleTimeout: 5s\n  idleTimeout: 6s\n", "3:3: duplicate key \"idleTimeout\" in server"),
    ("? [a]\n: b\n", "1:3: keys in the top level must be plain names"),
    # shapes
    ("- a\n", "1:1: the configuration must be a mapping of keys"),
    ("server: 5\n", "1:9: \"server\" must be a mapping of keys, not a single value"),
    ("upstreams: {url: x}\n", "1:12: \"upstreams\" must be a list, not a mapping"),
    ("listen: [1]\n", "1:9: \"listen\" must be a single value, not a list"),
    ("upstreams:\n  - ~\n", "2:5: \"upstreams[0]\" must be a mapping of keys"),
    ("upstreams:\n  - url: http://a\n    headers: [x]\n",
     "3:14: \"upstreams[0].headers\" must be a mapping of header names to values"),
    ("upstreams:\n  - url: http://a\n    headers:\n      X: {a: b}\n",
     "4:10: header \"X\" in \"upstreams[0].headers\" must have a single value"),
    ("upstreams:\n  - url: http://a\n    headers:\n      X:\n",
     "4:9: header \"X\" in \"upstreams[0].headers\" has no value"),
    ("upstreams:\n  - url: http://a\n    headers:\n      [a]: b\n",
     "4:7: header names in \"upstreams[0].headers\" must be strings"),
    # YAML itself
    ("listen: &a \"127.0.0.1:1\"\nlog: *a\n", "2:6: YAML aliases (*name) are not supported"),
    ("listen: \"127.0.0.1:1\"\n---\nlisten: \"127.0.0.1:2\"\n", "2:1: only one YAML document is allowed"),
    ("server:\n  idleTimeout: 1s\n bad\n", "3:2: YAML syntax error: did not find expected key"),
    ("server:\n\tidleTimeout: 1s\n", "2:1: YAML syntax error: found character that cannot start any token"),
    ("listen: \"\\x00\"\n", "1:9: values and keys must not contain NUL characters"),
    ("listen: \"a\xff\"\n", "1:11: YAML error: invalid leading UTF-8 octet"),
    # values
    ("server:\n  headerTimeout: 10x\n", "2:18: server.headerTimeout: invalid duration \"10x\""),
    ("server:\n  idleTimeout: 500ms\n", "2:16: server.idleTimeout: must be between 1s and 24h (got 500ms)"),
    ("server:\n  maxBodyBytes: 32MB\n", "2:17: server.maxBodyBytes: invalid size \"32MB\""),
    ("failover: {maxAttempts: -1}\n", "1:25: failover.maxAttempts: invalid number \"-1\""),
    ("failover: {maxAttempts: 17}\n", "1:25: failover.maxAttempts: must be between 1 and 16 (got 17)"),
    ("tls: {verify: yes}\n", "1:15: tls.verify: invalid boolean \"yes\""),
    # the read path: patterns compile at load, impossible values are refused where they are
    ("blockedPaths:\n  - \"/eth/v1/debug/*\"\n  - \"/eth//v1\"\n",
     "3:5: blockedPaths[1]: \"/eth//v1\" has an empty segment"),
    ("routeRules:\n  - path: \"/a/b*\"\n", "2:11: routeRules[0]: path \"/a/b*\" may use '*' only as a whole segment"),
    ("routing: {loadBalancing: fastest}\n", "1:26: routing.loadBalancing: invalid load balancing strategy \"fastest\""),
    ("failsafe: {hedge: {maxRatio: 150%}}\n", "1:30: failsafe.hedge.maxRatio: must be between 0 and 1 (got 1.5)"),
    ("upstreams:\n  - url: http://a\n    weight: 0\n", "3:13: upstreams[0].weight: must be between 1 and 1000 (got 0)"),
    ("routeRules:\n  - path: /a\n    bogus: 1\n", "3:5: unknown key \"bogus\" in \"routeRules[0]\""),
    ("log: {level: verbose}\n", "1:14: log.level: invalid log level \"verbose\" (use debug, info, warn, error or off)"),
    ("log: {format: xml}\n", "1:15: log.format: invalid log format \"xml\" (use text or json)"),
    ("duties: {blockSelection: best}\n", "1:26: duties.blockSelection: invalid block selection \"best\" (use first or best-value)"),
    ("genesisValidatorsRoot: 0x1234\n", "1:24: genesisValidatorsRoot: invalid root \"0x1234\""),
    ("listen: example.com:80\n", "1:9: listen: invalid address \"example.com:80\""),
    ("tls:\n  caFile: /nonexistent/ca.pem\n", "2:11: tls.caFile: cannot read \"/nonexistent/ca.pem\""),
    ("tls:\n  caFile: /tmp\n", "2:11: tls.caFile: \"/tmp\" is not a regular file"),
    ("duties: {headRoot: {maxHold: 0}}\n", "1:30: duties.headRoot.maxHold: must be between 1ms and 24h (got 0ms)"),
    # ${VAR}
    ("upstreams:\n  - url: \"http://a:${BM_T_PASS}@b/${BM_T_UNSET}\"\n",
     "2:35: upstreams[0].url: environment variable \"BM_T_UNSET\" is not set"),
    ("server:\n  maxConnections: ${BM_T_NL}\n", "2:19: server.maxConnections: environment variable \"BM_T_NL\" contains a line break"),
    ("listen: \"${PORT\"\n", "1:10: listen: unterminated \"${\""),
    ("listen: \"${1X}\"\n", "1:10: listen: invalid variable name \"1X\""),
    ("listen: \"${BM_T_BIG}${BM_T_BIG}\"\n", "1:21: listen: the value is longer than 64 KiB"),
    # upstreams and their headers
    ("upstreams:\n  - id: -bad\n    url: http://a\n", "2:9: upstreams[0]: id \"-bad\" must start with a letter or a digit"),
    ("upstreams:\n  - {id: a, url: \"http://a\"}\n  - {id: a, url: \"http://b\"}\n",
     "3:10: upstreams[1]: id \"a\" is already used by upstreams[0]"),
    ("upstreams:\n  - id: x\n", "2:5: upstreams[0]: missing key \"url\""),
    ("upstreams:\n  - url: \"http://user:${BM_T_PASS}@h:0\"\n", "2:10: upstreams[0]: url \"http://user:***@h:0\" has a malformed port"),
    ("upstreams:\n  - url: ftp://a\n", "2:10: upstreams[0]: url \"ftp://a\" must start with http:// or https://"),
    # paths the proxy could not join a request to (docs/upstream.md): refused by --check
    ("upstreams:\n  - url: http://h/../x\n", "2:10: upstreams[0]: url \"http://h/../x\" has a dot segment"),
    ("upstreams:\n  - url: http://h/%2E%2E\n", "2:10: upstreams[0]: url \"http://h/%2E%2E\" has a dot segment"),
    ("upstreams:\n  - url: \"http://h/caf\u00e9\"\n", "2:10: upstreams[0]: url \"http://h/caf\\xc3\\xa9\" must not "
     "contain non-ASCII bytes"),
    ("upstreams:\n  - url: http://a\n    headers:\n      Host: x\n",
     "4:7: upstreams[0].headers: header \"Host\" is a hop-by-hop or framing header"),
    ("upstreams:\n  - url: http://a\n    headers:\n      X-A: x\n      x-a: y\n",
     "5:7: upstreams[0].headers: header \"x-a\" is given twice"),
    ("upstreams:\n  - url: http://a\n    headers:\n      X-A: \"a\\x01b\"\n",
     "4:12: upstreams[0].headers: the value of header \"X-A\" contains a control character"),
    ("upstreams:\n" + "".join("  - url: http://h%d\n" % i for i in range(65)),
     "66:5: \"upstreams\" has more than 64 entries"),
    ("upstreams:\n  - url: http://a\n    headers:\n" + "".join("      X-%d: v\n" % i for i in range(65)),
     "68:7: \"upstreams[0].headers\" has more than 64 headers"),
]

# (file text, the whole message after "beaconmux: ") for what is checked on the whole.
WHOLE = [
    ("listen: \"127.0.0.1:1\"\n", "no upstream configured: give --upstream URL, or list \"upstreams\" in the configuration file"),
    (UP + "duties: {holdFloor: 1500ms}\n", "duties.holdFloor (1500ms) must not be greater than duties.maxHold (1s)"),
    (UP + "duties: {maxHold: 300ms, holdFloor: 100ms, headRoot: {holdFloor: 1s}}\n",
     "duties.headRoot: holdFloor (1s) must not be greater than maxHold (300ms, from duties.maxHold)"),
    (UP + "health: {headQuorum: 2}\n", "health.headQuorum (2) is larger than the number of upstreams "
     "that are not shadows (1): the cluster head could never move except by extension"),
    (UP + "routeRules: [{path: /a, upstreams: [nobody]}]\n",
     "routeRules[0].upstreams[0]: no upstream has the id \"nobody\""),
    (UP + "routeRules: [{path: /a, consensus: {query: 1, agree: 2}}]\n",
     "routeRules[0].consensus: agree (2) must be between 1 and query (1), both given"),
]


def check(path, *args):
    env = dict(os.environ, **ENV)
    env.pop("BM_T_UNSET", None)
    r = subprocess.run([MUX, "--config", path, "--check"] + list(args), capture_output=True,
                       env=env, timeout=30)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


class CheckTest(unittest.TestCase):
    def setUp(self):
        fd, self.path = tempfile.mkstemp(suffix=".yaml")
        os.close(fd)

    def tearDown(self):
        os.unlink(self.path)

    def write(self, text):
        with open(self.path, "wb") as f:
            f.write(text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)

    def test_every_file_error_has_its_position(self):
        for text, want in POSITIONED:
            with self.subTest(want=want):
                self.write(text.encode("latin-1") if "\xff" in text else text)
                rc, out, err = check(self.path)
                self.assertEqual(rc, 2, err)
                self.assertEqual(out, "")
                self.assertTrue(err.startswith("beaconmux: %s:%s" % (self.path, want)),
                                "got: %r" % err)
                self.assertNotIn("s3cret", err)

    def test_whole_configuration_errors_name_the_key(self):
        for text, want in WHOLE:
            with self.subTest(want=want):
                self.write(text)
                rc, out, err = check(self.path)
                self.assertEqual(rc, 2, err)
                self.assertEqual(err, "beaconmux: %s\n" % want)

    def test_file_and_flag_errors(self):
        rc, _, err = check("/nonexistent/b.yaml")
        self.assertEqual((rc, err), (2, "beaconmux: /nonexistent/b.yaml: cannot open: No such file or directory\n"))
        self.write("#" * ((1 << 20) + 1))
        rc, _, err = check(self.path)
        self.assertEqual((rc, err), (2, "beaconmux: %s: larger than 1048576 bytes\n" % self.path))
        self.write(UP)
        rc, _, err = check(self.path, "--listen", "nope")
        self.assertEqual(rc, 2)
        self.assertTrue(err.startswith("beaconmux: --listen: invalid address \"nope\""), err)
        rc, _, err = check(self.path, "--upstream", "ftp://u:pw@b")
        self.assertEqual(rc, 2)
        self.assertEqual(err, "beaconmux: --upstream \"ftp://u:***@b\" (#1) must start with http:// or https://\n")
        rc, _, err = check(self.path, "--upstream", "http://h/%2e%2E/x")
        self.assertEqual(rc, 2)
        self.assertEqual(err, "beaconmux: --upstream \"http://h/%2e%2E/x\" (#1) has a dot segment "
                         "(\".\" or \"..\") in its path\n")
        rc, _, err = check(self.path, "--bogus")
        self.assertEqual(rc, 2)
        self.assertTrue(err.startswith("beaconmux: unknown option \"--bogus\"\nUsage: beaconmux"), err)

    def test_valid_file_prints_the_masked_configuration(self):
        self.write("upstreams:\n  - id: hosted\n    url: \"https://op:${BM_T_PASS}@h.example/x\"\n"
                   "    headers: {X-Api-Key: \"${BM_T_PASS}\"}\n"
                   "duties:\n  headRoot: {maxHold: 500ms}\n")
        rc, out, err = check(self.path)
        self.assertEqual(rc, 0, err)
        self.assertTrue(out.startswith("configuration OK: %s\n" % self.path), out)
        self.assertIn("  - id: \"hosted\"\n    url: \"https://op:***@h.example/x\"\n", out)
        self.assertIn("      \"X-Api-Key\": \"***\"\n", out)
        self.assertIn("  headRoot:\n    maxHold: 500ms\n", out)
        self.assertIn("  connect: 1s\n", out)
        self.assertNotIn("s3cret", out)

    def test_network_entries_print_what_they_run_with(self):
        # an entry that leaves a section out runs with the top level's (not the defaults)
        self.write("routing: {loadBalancing: least-conn}\nduties: {maxHold: 900ms}\n"
                   "blockedPaths: [\"/eth/v1/debug/*\"]\nnetworks:\n"
                   "  - id: alpha\n    upstreams: [{url: \"http://127.0.0.1:5052\"}]\n"
                   "  - id: beta\n    upstreams: [{url: \"http://127.0.0.1:6052\"}]\n"
                   "    routing: {loadBalancing: round-robin}\n"
                   "    duties: {maxHold: 700ms}\n")
        rc, out, err = check(self.path)
        self.assertEqual(rc, 0, err)
        nets = out[out.index("\nnetworks:\n"):]
        alpha, beta = nets[nets.index('- id: "alpha"'):nets.index('- id: "beta"')], \
            nets[nets.index('- id: "beta"'):]
        self.assertIn("      loadBalancing: least-conn\n", alpha)
        self.assertIn("      maxHold: 900ms\n", alpha)
        self.assertIn('    blockedPaths: ["/eth/v1/debug/*"]\n', alpha)
        self.assertIn("      loadBalancing: round-robin\n", beta)
        self.assertIn("      maxHold: 700ms\n", beta)
        self.assertIn('    blockedPaths: ["/eth/v1/debug/*"]\n', beta)
        # the dump read back is the same configuration
        self.write(out.split("\n", 1)[1])
        rc2, out2, err2 = check(self.path)
        self.assertEqual(rc2, 0, err2)
        self.assertEqual(out2.split("\n", 1)[1], out.split("\n", 1)[1])

    def test_deprecated_key_is_read_with_a_warning(self):
        self.write(UP + "failover: {maxAttempts: 2}\n")
        rc, out, err = check(self.path)
        self.assertEqual(rc, 0, err)
        self.assertIn("failover.maxAttempts is deprecated", err)

    def test_example_file_is_valid(self):
        env = dict(os.environ, BEACON_API_KEY="k", BEACONMUX_KEY="example-secret",
                   REDIS_PASSWORD="example-redis-password")
        r = subprocess.run([MUX, "--config", os.path.join(SOURCE_DIR, "beaconmux.example.yaml"),
                            "--check"], capture_output=True, env=env, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr.decode())


if __name__ == "__main__":
    unittest.main()
