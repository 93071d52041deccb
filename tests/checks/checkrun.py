# SPDX-License-Identifier: MIT
"""What the source checks share: how one is run and how it reports (one line per problem,
then a count, and the exit status `make test` reads)."""
import os
import sys


def run(check, label, problems="problem(s)"):
    """Runs check(root) on the repository named on the command line (default: the one
    holding this script) and prints its findings; returns the exit status."""
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    errors = check(os.path.abspath(root))
    for e in errors:
        print(e)
    if errors:
        print("%s: %d %s" % (label, len(errors), problems))
        return 1
    print("%s: ok" % label)
    return 0
