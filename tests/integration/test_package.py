# SPDX-License-Identifier: MIT
"""make install and make package: what an operator installs.

Builds the .deb (`make package`; the release build, installing the packaging tools with
scripts/install-deps.sh package when missing), unpacks it into a throwaway root (dpkg -x)
and runs the binaries from there: --version, and --check on the shipped configuration.
Checks that the package declares a dependency for every shared library the binaries
link, marks the configuration as a conffile, ships units that systemd-analyze verifies,
man pages and docs, and that lintian finds nothing but the one explained warning.
`make install` is checked with DESTDIR and PREFIX.
"""
import os
import re
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import SOURCE_DIR, main, project_version as version, run_tool as run  # noqa: E402

SRC = os.path.abspath(SOURCE_DIR)
# The package is not uploaded to Debian, so its first changelog entry closes no ITP bug.
LINTIAN_EXPLAINED = {"initial-upload-closes-no-bugs"}


def owner_of(path):
    """The package that ships a library: by its path, its real path, or (merged /usr: dpkg
    may know it under /lib or /usr/lib) its file name."""
    real = os.path.realpath(path)
    for q in (path, real, "*/" + os.path.basename(real)):
        r = run(["dpkg", "-S", q])
        if r.returncode == 0:
            return r.stdout.split(":")[0]
    return None


class Package(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = run(["make", "-C", SRC, "package"])
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        cls.deb = os.path.join(SRC, "build", "release", "beaconmux_%s-1_amd64.deb" % version())
        assert os.path.exists(cls.deb), os.listdir(os.path.join(SRC, "build", "release"))
        cls.root = tempfile.mkdtemp(prefix="bm-deb-")
        r = run(["dpkg", "-x", cls.deb, cls.root])
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, True)

    def path(self, p):
        return os.path.join(self.root, p.lstrip("/"))

    def test_binaries_run_from_the_unpacked_package(self):
        r = run([self.path("/usr/bin/beaconmux"), "--version"])
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "beaconmux %s" % version()))
        r = run([self.path("/usr/bin/beaconsim"), "--version"])
        self.assertEqual(r.returncode, 0, r.stderr)
        cfg = self.path("/etc/beaconmux/beaconmux.yaml")
        r = run([self.path("/usr/bin/beaconmux"), "--check", "--config", cfg])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("configuration OK", r.stdout)
        self.assertIn("stateDir: \"/var/lib/beaconmux\"", r.stdout)

    def test_contents_and_metadata(self):
        for p in ("/lib/systemd/system/beaconmux.service", "/lib/systemd/system/beaconmux.socket",
                  "/usr/share/man/man1/beaconmux.1.gz", "/usr/share/man/man1/beaconsim.1.gz",
                  "/usr/share/doc/beaconmux/copyright", "/usr/share/doc/beaconmux/operations.md",
                  "/usr/share/doc/beaconmux/configuration.md",
                  "/usr/share/doc/beaconmux/examples/beaconmux.example.yaml"):
            self.assertTrue(os.path.isfile(self.path(p)), p)
        r = run(["dpkg-deb", "-f", self.deb, "Depends"])
        depends = {d.strip().split(" ")[0] for d in r.stdout.split(",")}
        # every shared library the binaries link (NEEDED), by the package that ships it
        for binary in ("/usr/bin/beaconmux", "/usr/bin/beaconsim"):
            needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(\S+)\]",
                                run(["readelf", "-d", self.path(binary)]).stdout)
            where = dict(re.findall(r"^\s*(\S+) => (/\S+)", run(["ldd", self.path(binary)]).stdout,
                                    re.M))
            self.assertGreater(len(needed), 3, needed)
            for lib in needed:
                self.assertIn(lib, where, "%s: %s not found by ldd" % (binary, lib))
                owner = owner_of(where[lib])
                self.assertIn(owner, depends, "%s needs %s (%s)" % (binary, lib, owner))
        r = run(["dpkg-deb", "--ctrl-tarfile", self.deb])
        self.assertEqual(r.returncode, 0)
        ctrl = tempfile.mkdtemp(prefix="bm-ctrl-")
        try:
            run(["dpkg-deb", "-e", self.deb, ctrl])
            with open(os.path.join(ctrl, "conffiles")) as f:
                self.assertIn("/etc/beaconmux/beaconmux.yaml", f.read().split())
        finally:
            shutil.rmtree(ctrl, True)

    def test_units_verify(self):
        units = tempfile.mkdtemp(prefix="bm-units-")
        try:
            for u in ("beaconmux.service", "beaconmux.socket"):
                text = open(self.path("/lib/systemd/system/" + u)).read()
                # the unpacked binary stands in for /usr/bin/beaconmux (not installed here)
                text = text.replace("/usr/bin/beaconmux", self.path("/usr/bin/beaconmux"))
                with open(os.path.join(units, u), "w") as f:
                    f.write(text)
            if not shutil.which("systemd-analyze"):
                self.skipTest("systemd-analyze is not installed")
            r = run(["systemd-analyze", "verify", "--man=no"] +
                    [os.path.join(units, u) for u in ("beaconmux.service", "beaconmux.socket")])
            self.assertEqual((r.returncode, r.stderr.strip()), (0, ""))
            r = run(["systemd-analyze", "security", "--offline=yes", "--threshold=20",
                     os.path.join(units, "beaconmux.service")])
            self.assertEqual(r.returncode, 0, r.stdout[-2000:])
        finally:
            shutil.rmtree(units, True)

    def test_lintian(self):
        r = run(["lintian", "--no-tag-display-limit", self.deb])
        tags = re.findall(r"^([EW]): beaconmux: (\S+)", r.stdout, re.M)
        self.assertEqual([t for t in tags if t[1] not in LINTIAN_EXPLAINED], [], r.stdout)

    def test_make_install_honours_destdir_and_prefix(self):
        dest = tempfile.mkdtemp(prefix="bm-install-")
        try:
            r = run(["make", "-C", SRC, "install", "DESTDIR=" + dest, "PREFIX=/opt/bm"])
            self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
            # (under /opt, the configuration goes to /etc/opt, as the FHS says)
            for p in ("opt/bm/bin/beaconmux", "opt/bm/bin/beaconsim",
                      "opt/bm/lib/systemd/system/beaconmux.service",
                      "etc/opt/bm/beaconmux/beaconmux.yaml",
                      "opt/bm/share/man/man1/beaconmux.1.gz"):
                self.assertTrue(os.path.isfile(os.path.join(dest, p)), p)
            r = run([os.path.join(dest, "opt/bm/bin/beaconmux"), "--version"])
            self.assertEqual(r.returncode, 0)
        finally:
            shutil.rmtree(dest, True)
            # leave the release build configured for the package again
            run(["cmake", "--preset", "release", "-DCMAKE_INSTALL_PREFIX=/usr"], cwd=SRC)


if __name__ == "__main__":
    main()
