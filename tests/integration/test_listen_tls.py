# SPDX-License-Identifier: MIT
"""TLS on beaconmux's own listener (server.tls): plain and TLS side by side serving the same
answers, ALPN http/1.1, TLS 1.1 refused, client certificates required and a client without one
refused, garbage and a stalled handshake on the TLS port closed and logged without harm,
certificate files that do not load refused at start and by --check. Certificates are made
here with the openssl command."""
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import unittest
import warnings

sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN_DIR, Beaconmux, FakeBeacon, main, wait_for  # noqa: E402

IDENTITY = b'{"data":{"peer_id":"tls-test"}}'


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def make_pki(d):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both from the CA, and a
    key that belongs to neither."""
    p = {n: os.path.join(d, n) for n in
         ("ca.crt", "ca.key", "srv.crt", "srv.key", "cli.crt", "cli.key", "other.key", "ext")}
    with open(p["ext"], "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-days", "2", "-subj", "/CN=test CA", "-keyout", p["ca.key"], "-out", p["ca.crt"])
    for name, cn in (("srv", "127.0.0.1"), ("cli", "validator client")):
        csr = os.path.join(d, name + ".csr")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-subj", "/CN=" + cn, "-keyout", p[name + ".key"], "-out", csr)
        openssl("x509", "-req", "-in", csr, "-CA", p["ca.crt"], "-CAkey", p["ca.key"],
                "-CAcreateserial", "-days", "2", "-extfile", p["ext"], "-out", p[name + ".crt"])
    openssl("genpkey", "-algorithm", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-out", p["other.key"])
    return p


def tls_config(pki, extra=""):
    return ("server:\n  headerTimeout: 1s\n  tls:\n    listen: \"127.0.0.1:0\"\n"
            "    certFile: %s\n    keyFile: %s\n%s" % (pki["srv.crt"], pki["srv.key"], extra))


def client_ctx(pki, cert=False, alpn=("http/1.1",)):
    ctx = ssl.create_default_context(cafile=pki["ca.crt"])
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    if cert:
        ctx.load_cert_chain(pki["cli.crt"], pki["cli.key"])
    return ctx


@unittest.skipUnless(shutil.which("openssl"), "openssl CLI needed to make test certificates")
class ListenTls(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="bm-ltls-")
        cls.pki = make_pki(cls.dir)
        cls.up = FakeBeacon()
        cls.up.routes[("GET", "/eth/v1/node/identity")] = (
            200, {"Content-Type": "application/json"}, IDENTITY)

    @classmethod
    def tearDownClass(cls):
        cls.up.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def start(self, extra=""):
        m = Beaconmux(upstreams=["http://127.0.0.1:%d" % self.up.port],
                      config_text=tls_config(self.pki, extra))
        self.addCleanup(m.stop)
        m.tls_port = int(m.wait_line(r"listening on https://127\.0\.0\.1:(\d+)").group(1))
        m.wait_state("node1", "ready")
        return m

    def https(self, m, ctx, n=1):
        """n keep-alive GETs on one TLS connection: (statuses, bodies, socket facts)."""
        c = http.client.HTTPSConnection("127.0.0.1", m.tls_port, context=ctx, timeout=10)
        try:
            statuses, bodies = [], []
            for _ in range(n):
                c.request("GET", "/eth/v1/node/identity")
                r = c.getresponse()
                statuses.append(r.status)
                bodies.append(r.read())
            return statuses, bodies, c.sock.selected_alpn_protocol(), c.sock.version()
        finally:
            c.close()

    def test_plain_and_tls_side_by_side(self):
        m = self.start()
        st, _, plain = m.request("GET", "/eth/v1/node/identity")
        self.assertEqual((st, plain), (200, IDENTITY))
        statuses, bodies, alpn, version = self.https(m, client_ctx(self.pki), n=3)
        self.assertEqual(statuses, [200, 200, 200])  # keep-alive: three on one connection
        self.assertEqual(bodies, [IDENTITY] * 3)
        self.assertEqual(alpn, "http/1.1")
        self.assertEqual(version, "TLSv1.3")
        # TLS 1.2 is still accepted (with a forward-secret AEAD suite)
        ctx = client_ctx(self.pki)
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        c = http.client.HTTPSConnection("127.0.0.1", m.tls_port, context=ctx, timeout=10)
        c.request("GET", "/eth/v1/node/identity")
        r = c.getresponse()
        self.assertEqual((r.status, r.read()), (200, IDENTITY))
        self.assertEqual(c.sock.version(), "TLSv1.2")
        self.assertTrue(c.sock.cipher()[0].startswith(("ECDHE-", "TLS_")), c.sock.cipher())
        c.close()
        # a client without ALPN is served; one that offers only h2 is told no
        _, bodies, alpn, _ = self.https(m, client_ctx(self.pki, alpn=()))
        self.assertEqual((bodies, alpn), ([IDENTITY], None))
        with self.assertRaises(ssl.SSLError):
            self.https(m, client_ctx(self.pki, alpn=("h2",)))

    def test_tls11_refused(self):
        m = self.start()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let the client itself offer TLS 1.1
        with warnings.catch_warnings():  # Python deprecates TLS 1.1; that is the point here
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_1
            ctx.maximum_version = ssl.TLSVersion.TLSv1_1
        with self.assertRaises((ssl.SSLError, ConnectionError)):
            with socket.create_connection(("127.0.0.1", m.tls_port), timeout=5) as s:
                with ctx.wrap_socket(s):
                    pass
        m.wait_line(r"server: TLS handshake with 127\.0\.0\.1 failed: .*protocol")
        self.assertEqual(self.https(m, client_ctx(self.pki))[0], [200])

    def test_garbage_and_stalled_handshakes(self):
        m = self.start()
        # plain HTTP on the TLS port, then random bytes: each connection closed, each logged
        for junk in (b"GET /eth/v1/node/identity HTTP/1.1\r\nHost: x\r\n\r\n", os.urandom(3000)):
            with socket.create_connection(("127.0.0.1", m.tls_port), timeout=5) as s:
                s.sendall(junk)
                got = b""
                while True:
                    chunk = s.recv(4096)  # the 5 s timeout raises if the server keeps it open
                    if not chunk:
                        break
                    got += chunk
                self.assertNotIn(b"HTTP/1.1", got)  # an alert at most, never plaintext
        wait_for(lambda: sum("server: TLS handshake with" in ln and "failed" in ln
                             for ln in m.stderr()) >= 2, 5, what="two failures logged")
        # a handshake that starts and stalls is closed at headerTimeout (1 s here)
        with socket.create_connection(("127.0.0.1", m.tls_port), timeout=5) as s:
            s.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, then silence
            self.assertEqual(s.recv(4096), b"")
        m.wait_line(r"server: TLS handshake with 127\.0\.0\.1 not done within 1000 ms")
        # the listener is unharmed
        self.assertEqual(self.https(m, client_ctx(self.pki))[0], [200])
        self.assertIsNone(m.p.poll())

    def test_client_certificate_required(self):
        m = self.start("    clientCaFile: %s\n    requireClientCert: true\n" % self.pki["ca.crt"])
        statuses, bodies, _, _ = self.https(m, client_ctx(self.pki, cert=True))
        self.assertEqual((statuses, bodies), ([200], [IDENTITY]))
        # without a certificate: TLS 1.3 refuses after the client's Finished, so the refusal
        # shows on the first read of the client, never as an answer
        with self.assertRaises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
            self.https(m, client_ctx(self.pki, cert=False))
        m.wait_line(r"server: TLS handshake with 127\.0\.0\.1 failed: .*certificate")
        # the plain listener is not affected by the TLS listener's rule
        self.assertEqual(m.request("GET", "/eth/v1/node/identity")[0], 200)

    def test_optional_client_certificate(self):
        m = self.start("    clientCaFile: %s\n" % self.pki["ca.crt"])
        self.assertEqual(self.https(m, client_ctx(self.pki, cert=False))[0], [200])
        self.assertEqual(self.https(m, client_ctx(self.pki, cert=True))[0], [200])

    def run_bad(self, cfg, check):
        fd, path = tempfile.mkstemp(suffix=".yaml", dir=self.dir)
        with os.fdopen(fd, "w") as f:
            f.write(cfg + "upstreams:\n  - url: http://127.0.0.1:%d\n" % self.up.port)
        args = [os.path.join(BIN_DIR, "beaconmux"), "--config", path, "--listen", "127.0.0.1:0"]
        if check:
            args.append("--check")
        p = subprocess.run(args, capture_output=True, text=True, timeout=30)
        os.unlink(path)
        return p.returncode, p.stderr

    def test_bad_certificate_files(self):
        mismatched = tls_config(self.pki).replace(self.pki["srv.key"], self.pki["other.key"])
        for check in (True, False):
            rc, err = self.run_bad(mismatched, check)
            self.assertEqual(rc, 2 if check else 1, err)
            self.assertIn("does not belong to the certificate", err)
            self.assertNotIn("listening on", err)
        missing = tls_config(self.pki).replace(self.pki["srv.crt"], self.dir + "/nope.crt")
        rc, err = self.run_bad(missing, True)
        self.assertEqual(rc, 2)
        self.assertIn("nope.crt", err)
        self.assertIn("No such file", err)
        notpem = tls_config(self.pki).replace(self.pki["srv.crt"], self.pki["ext"])
        rc, err = self.run_bad(notpem, True)
        self.assertEqual(rc, 2)
        self.assertIn("not a usable PEM certificate", err)
        rc, err = self.run_bad(tls_config(self.pki, "    requireClientCert: true\n"), True)
        self.assertEqual(rc, 2)
        self.assertIn("requireClientCert needs server.tls.clientCaFile", err)
        # a TLS listener on a public address with duty routes open to anyone: refused at start
        # (before it binds), a warning from --check
        public = tls_config(self.pki).replace('"127.0.0.1:0"', '"0.0.0.0:0"')
        rc, err = self.run_bad(public, False)
        self.assertEqual(rc, 1, err)
        self.assertIn("server.tls.listen 0.0.0.0", err)
        self.assertNotIn("listening on", err)
        rc, err = self.run_bad(public, True)
        self.assertEqual(rc, 0, err)
        self.assertIn("warning: server.tls.listen 0.0.0.0", err)


if __name__ == "__main__":
    main()
