#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The man pages and --help must list the same flags (and beaconsim's the same node
behaviour words), so that neither drifts from the other.

Usage: check_man.py SOURCE_DIR BIN_DIR
In --help, a flag is a `--name` that opens an indented entry line; in a man page, the flags are those that open an entry
(.TP followed by a .B/.BI/.BR line) under OPTIONS, and the words those under NODE BEHAVIOUR.
"""
import re
import subprocess
import sys


def man_entries(path, section):
    """The first token of each .TP entry's tag line in `section` of a man page."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, in_sec, tag_next = [], False, False
    for line in lines:
        if line.startswith(".SH "):
            in_sec = line[4:].strip().strip('"') == section
            continue
        if not in_sec:
            continue
        if line.startswith(".TP"):
            tag_next = True
            continue
        if tag_next:
            tag_next = False
            text = re.sub(r"^\.(B|BI|BR|I|IR)\s+", "", line).replace("\\-", "-")
            for tok in re.split(r'[\s",]+', text):
                if tok:
                    out.append(tok)
    return out


def help_flags(text):
    """The flags --help describes: each line that opens an option's entry."""
    return set(re.findall(r"^ {2}(?:-\w, )?(--[a-z][a-z-]*)", text, re.M))


def help_spec_words(text):
    sec = text.split("SPEC words", 1)[1].split("control API", 1)[0]
    return {m.group(1) for m in re.finditer(r"^  ([a-z][a-z0-9-]*)", sec, re.M)}


def main():
    src, bindir = sys.argv[1], sys.argv[2]
    problems = []
    for prog in ("beaconmux", "beaconsim"):
        text = subprocess.run([bindir + "/" + prog, "--help"], capture_output=True, text=True,
                              check=True).stdout
        page = "%s/man/%s.1" % (src, prog)
        in_help = help_flags(text)
        in_man = {t for t in man_entries(page, "OPTIONS") if t.startswith("--")}
        for f in sorted(in_help - in_man):
            problems.append("%s: %s is in --help but not in the man page" % (prog, f))
        for f in sorted(in_man - in_help):
            problems.append("%s: %s is in the man page but not in --help" % (prog, f))
        if prog == "beaconsim":
            words = help_spec_words(text)
            in_man = {re.split(r"[=]", t)[0] for t in man_entries(page, "NODE BEHAVIOUR")}
            for w in sorted(words - in_man):
                problems.append("beaconsim: node word %s is in --help but not in the man page" % w)
            for w in sorted(in_man - words):
                problems.append("beaconsim: node word %s is in the man page but not in --help" % w)
        if len(in_help) < 5:
            problems.append("%s: --help lists only %s" % (prog, sorted(in_help)))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
