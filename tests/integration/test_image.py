# SPDX-License-Identifier: MIT
"""make image: the container image, built offline FROM scratch with podman.

Running containers is not possible on the test machines, so the test builds the image
(installing podman and buildah with scripts/install-deps.sh image when missing), exports
its file system (podman create + podman export) and runs the binaries from it with chroot
as the image's unprivileged user: --version, and --check on the configuration at
/etc/beaconmux/beaconmux.yaml. It checks that the image holds exactly the shared
libraries the binaries load (no shell, no base image), the CA bundle, a state directory
owned by that user, and the user and port in its configuration.
"""
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import SOURCE_DIR, main, project_version as version, run_tool as run  # noqa: E402

SRC = os.path.abspath(SOURCE_DIR)
UID = 65532


class Image(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = run(["make", "-C", SRC, "image"])
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        cls.tag = "localhost/beaconmux:%s" % version()
        r = run(["podman", "create", cls.tag])
        assert r.returncode == 0, r.stderr
        cid = r.stdout.strip()
        cls.root = tempfile.mkdtemp(prefix="bm-image-")
        os.chmod(cls.root, 0o755)  # the image's / , traversed by the unprivileged user
        cls.tar = cls.root + ".tar"
        try:
            r = run(["podman", "export", "-o", cls.tar, cid])
            assert r.returncode == 0, r.stderr
        finally:
            run(["podman", "rm", cid])
        with tarfile.open(cls.tar) as t:
            cls.members = {m.name.lstrip("./"): m for m in t.getmembers()}
            t.extractall(cls.root, numeric_owner=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, True)
        os.unlink(cls.tar)

    def chroot(self, *args):
        return run(["chroot", "--userspec=%d:%d" % (UID, UID), self.root] + list(args))

    def test_runs_as_the_unprivileged_user(self):
        r = self.chroot("/usr/bin/beaconmux", "--version")
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "beaconmux %s" % version()),
                         r.stderr)
        r = self.chroot("/usr/bin/beaconmux", "--check", "--config",
                        "/etc/beaconmux/beaconmux.yaml")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('listen: "0.0.0.0:5555"', r.stdout)
        r = self.chroot("/usr/bin/beaconsim", "--version")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_exactly_the_libraries_the_binaries_load(self):
        want = set()
        for b in ("usr/bin/beaconmux", "usr/bin/beaconsim"):
            out = run(["ldd", os.path.join(self.root, b)]).stdout
            want |= {p.lstrip("/") for p in re.findall(r"=> (/\S+)", out)}
            want |= {p.lstrip("/") for p in re.findall(r"^\s+(/\S+) \(", out, re.M)}
        libs = {n for n, m in self.members.items()
                if m.isfile() and re.search(r"\.so(\.\d+)*$", n)}
        self.assertEqual(libs, want)
        # FROM scratch: no shell, no package manager, nothing else
        self.assertNotIn("bin/sh", self.members)
        files = {n for n, m in self.members.items() if m.isfile()}
        self.assertEqual(files - libs - {n for n in files if n.startswith("usr/share/doc/")},
                         {"usr/bin/beaconmux", "usr/bin/beaconsim", "etc/passwd", "etc/group",
                          "etc/beaconmux/beaconmux.yaml", "etc/ssl/certs/ca-certificates.crt"})

    def test_user_port_and_state_directory(self):
        r = run(["podman", "image", "inspect", self.tag])
        cfg = json.loads(r.stdout)[0]["Config"]
        self.assertEqual(cfg["User"], "%d:%d" % (UID, UID))
        self.assertIn("5555/tcp", cfg["ExposedPorts"])
        self.assertEqual(cfg["Entrypoint"], ["/usr/bin/beaconmux"])
        self.assertEqual(cfg["Cmd"], ["--config", "/etc/beaconmux/beaconmux.yaml"])
        st = self.members["var/lib/beaconmux"]
        self.assertTrue(st.isdir())
        self.assertEqual((st.uid, st.gid), (UID, UID))
        self.assertGreater(self.members["etc/ssl/certs/ca-certificates.crt"].size, 10000)


if __name__ == "__main__":
    main()
