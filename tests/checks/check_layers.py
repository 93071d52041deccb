#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The layering rules of src/, checked on every `make test` so they stay true.

src/ is one folder per layer, lowest first. A module may include modules of its own layer and of
the layers below it, never of a layer above: data flows one way (server -> router -> policy ->
upstream pool; events -> tracker -> health), and a lower layer that reached up would tie it to
its callers. Duty policies are peers and never include each other, except where listed below
with the reason. Every quoted include names its layer ("base/buf.h"), so a reader sees where a
dependency lives, and each .c includes its own header first (headers stay self-contained).
docs/architecture.md explains the layers.
"""
import os
import re
import sys

from checkrun import run

# state: what several instances share through Redis; above every module whose memory it
# carries (replay, production, the edge), below app, which wires it to them.
LAYERS = ["base", "http", "cluster", "duties", "read", "edge", "observe", "state", "app"]
RANK = {name: i for i, name in enumerate(LAYERS)}

# Modules of duties/ that are shared machinery, not policies: every policy may include them
# (checkpoints: the pure book of the nodes' attestation checkpoints; indexed: the merge of a
# batch write's indexed errors: judgements without I/O, like hint; shadow: the mirror of every
# race to the shadow nodes, which serve starts for each policy, and their score).
DUTY_MACHINERY = {"race", "hint", "serve", "checkpoints", "indexed", "shadow"}
# Policy -> policy includes that are allowed, each with its reason.
POLICY_EXCEPTIONS = {
    ("broadcast", "replay"): "a broadcast write feeds the replay memory it passes through",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_of(folder, name):
    """The module a file belongs to: a module too large for one file keeps its parts in
    name_part.c files (and what they share in name_int.h) beside name.h."""
    base = name.split("_")[0]
    if base != name and os.path.exists(os.path.join(folder, base + ".h")):
        return base
    return name


def check(root):
    src = os.path.join(root, "src")
    errors = []
    for layer in sorted(os.listdir(src)):
        path = os.path.join(src, layer)
        if not os.path.isdir(path):
            errors.append("src/%s: a file outside any layer folder" % layer)
            continue
        if layer not in RANK:
            errors.append("src/%s: unknown layer (add it to LAYERS in %s)" % (layer, __file__))
            continue
        for name in sorted(os.listdir(path)):
            if not name.endswith((".c", ".h")):
                continue
            rel = "src/%s/%s" % (layer, name)
            text = open(os.path.join(path, name), encoding="utf-8").read()
            includes = INCLUDE.findall(text)
            module = name[:-2]
            owner = module_of(path, module)
            if name.endswith(".c") and os.path.exists(os.path.join(path, module + ".h")):
                if not includes or includes[0] != "%s/%s.h" % (layer, module):
                    errors.append("%s: must include its own header %s/%s.h first"
                                  % (rel, layer, module))
            for inc in includes:
                parts = inc.split("/")
                if len(parts) != 2 or parts[0] not in RANK:
                    errors.append('%s: include "%s" does not name a layer folder' % (rel, inc))
                    continue
                if not os.path.exists(os.path.join(src, inc)):
                    errors.append('%s: include "%s" does not exist' % (rel, inc))
                    continue
                other, other_mod = parts[0], module_of(os.path.join(src, parts[0]), parts[1][:-2])
                if RANK[other] > RANK[layer]:
                    errors.append('%s: includes "%s", a higher layer (%s above %s)'
                                  % (rel, inc, other, layer))
                if (layer == "duties" and other == "duties" and owner != other_mod
                        and owner not in DUTY_MACHINERY and other_mod not in DUTY_MACHINERY
                        and (owner, other_mod) not in POLICY_EXCEPTIONS):
                    errors.append('%s: policy "%s" includes policy "%s"; policies are peers'
                                  % (rel, owner, other_mod))
    return errors


def self_test():
    """The checker itself must be able to fail: a tree with one violation of each rule."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        files = {
            "base/buf.h": "",
            "base/buf.c": '#include "base/buf.h"\n#include "http/server.h"\n',
            "http/server.h": "",
            "duties/attest.h": "",
            "duties/attest.c": '#include "duties/attest.h"\n#include "duties/produce.h"\n',
            "duties/produce.h": "",
            "duties/produce.c": '#include "base/buf.h"\n#include "duties/produce.h"\n',
            "cluster/pool.c": '#include "pool.h"\n',
        }
        for rel, text in files.items():
            os.makedirs(os.path.join(tmp, "src", os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(tmp, "src", rel), "w") as f:
                f.write(text)
        found = "\n".join(check(tmp))
        expected = ["higher layer (http above base)", 'policy "attest" includes policy "produce"',
                    "must include its own header duties/produce.h first",
                    'include "pool.h" does not name a layer folder']
        missing = [e for e in expected if e not in found]
        if missing:
            print("self-test: the checker missed: %s\n%s" % (missing, found))
            return False
    return True


def main():
    if not self_test():
        return 1
    return run(check, "layering", "violation(s)")


if __name__ == "__main__":
    sys.exit(main())
