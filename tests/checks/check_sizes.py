#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The size rules of the C sources, checked on every `make test` so they stay true.

A .c file tells one module's story and stays under MAX_FILE_LINES lines; a function does one
thing and stays under MAX_FUNCTION_LINES lines. A file or a function past its bound is split,
unless it is listed below with the reason it is better whole (a state machine read top to
bottom, for instance). The check reads the files as text: the repository's .clang-format puts
a function's opening and closing braces alone in column 0, which is what it looks for.

Usage: check_sizes.py [ROOT]   (ROOT defaults to the repository holding this script)
"""
import os
import re
import sys

from checkrun import run

MAX_FILE_LINES = 1500
MAX_FUNCTION_LINES = 150
# Folders whose .c files are held to both bounds; test files only to the function bound (a
# module's unit tests stay in one file, however many cases it has).
FOLDERS = ["src", "sim", "fuzz"]
TEST_FOLDERS = ["tests/unit"]

# path -> reason, for .c files allowed past MAX_FILE_LINES.
FILE_EXCEPTIONS = {}

# (path, function) -> reason, for functions allowed past MAX_FUNCTION_LINES.
FUNCTION_EXCEPTIONS = {
    ("src/http/http1.c", "scan_head"): "the request-head scanner: one switch over its states "
    "(SC_*), a byte at a time, read top to bottom like the grammar it follows",
}

# A function definition's head: the line before a "{" in column 0 ends with ")" and the
# head starts at the last line that begins in column 0 with an identifier.
NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def functions(lines):
    """Yields (name, first line, line count) for every function body in `lines`."""
    i = 0
    while i < len(lines):
        if lines[i].rstrip("\n") == "{":
            head = i - 1
            while head > 0 and (not lines[head][:1].strip() or lines[head][0] in " \t)"):
                head -= 1
            text = "".join(lines[head:i])
            m = NAME.search(text)
            end = i + 1
            while end < len(lines) and lines[end].rstrip("\n") != "}":
                end += 1
            if m and "=" not in text.split("(")[0]:
                yield m.group(1), head + 1, end - head + 1
            i = end
        i += 1


def check(root):
    errors = []
    seen_files, seen_functions = set(), set()
    for folder in FOLDERS + TEST_FOLDERS:
        base = os.path.join(root, folder)
        if not os.path.isdir(base):
            continue
        for dirpath, _, names in os.walk(base):
            for name in sorted(names):
                if not name.endswith(".c"):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as f:
                    lines = f.readlines()
                if len(lines) > MAX_FILE_LINES and folder in FOLDERS:
                    if rel in FILE_EXCEPTIONS:
                        seen_files.add(rel)
                    else:
                        errors.append("%s: %d lines (over %d): split it, or list it in "
                                      "FILE_EXCEPTIONS with the reason"
                                      % (rel, len(lines), MAX_FILE_LINES))
                for fn, first, count in functions(lines):
                    if count <= MAX_FUNCTION_LINES:
                        continue
                    if (rel, fn) in FUNCTION_EXCEPTIONS:
                        seen_functions.add((rel, fn))
                    else:
                        errors.append("%s:%d: %s() has %d lines (over %d): split it, or list it "
                                      "in FUNCTION_EXCEPTIONS with the reason"
                                      % (rel, first, fn, count, MAX_FUNCTION_LINES))
    for rel in sorted(set(FILE_EXCEPTIONS) - seen_files):
        errors.append("%s: listed in FILE_EXCEPTIONS but not over %d lines (drop the row)"
                      % (rel, MAX_FILE_LINES))
    for rel, fn in sorted(set(FUNCTION_EXCEPTIONS) - seen_functions):
        errors.append("%s: %s() listed in FUNCTION_EXCEPTIONS but not over %d lines (drop the "
                      "row)" % (rel, fn, MAX_FUNCTION_LINES))
    return errors


def main():
    return run(check, "check_sizes")


if __name__ == "__main__":
    sys.exit(main())
