#!/usr/bin/env python3
"""The house's size rules (docs/architecture.md, "House rules"): no file of src/, python/ or tools/ above
1,000 lines, no function above 120 lines (from its signature to its closing brace), and, per folder of
src/, no two files that use each other's names both ways (scripts/deps.py). Prints what breaks a rule;
exit 1 when anything does. ctest runs it as `house`.

    python3 scripts/house.py
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MAX_FILE, MAX_FN = 1000, 120
SIG = re.compile(r"^[A-Za-z_][\w \*]*\b(\w+)\s*\(")


def files():
    for top in ("src", "python", "tools"):
        for d, _, names in os.walk(os.path.join(ROOT, top)):
            for n in sorted(names):
                if n.endswith((".c", ".h", ".py")):
                    yield os.path.join(d, n)


def functions(lines):
    """(name, first line, length) of each C function defined at column 0."""
    i = 0
    while i < len(lines):
        m = SIG.match(lines[i])
        if m and not lines[i].rstrip().endswith(";") and not lines[i].startswith(("typedef", "struct", "enum", "#")):
            j = i
            while j < len(lines) and not lines[j].rstrip().endswith(("{", ";", "}")):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith("{"):
                k = j + 1
                while k < len(lines) and not lines[k].startswith("}"):
                    k += 1
                yield m.group(1), i + 1, k - i + 1
                i = k + 1
                continue
        i += 1


def main():
    bad = 0
    for path in files():
        lines = open(path, errors="replace").read().split("\n")
        rel = os.path.relpath(path, ROOT)
        n = len(lines) - (1 if lines and lines[-1] == "" else 0)
        if n > MAX_FILE:
            print("%s: %d lines (the most is %d)" % (rel, n, MAX_FILE))
            bad += 1
        if path.endswith(".c"):
            for name, at, length in functions(lines):
                if length > MAX_FN:
                    print("%s:%d: %s is %d lines (the most is %d)" % (rel, at, name, length, MAX_FN))
                    bad += 1
    deps = subprocess.run([sys.executable, os.path.join(HERE, "deps.py")], stdout=subprocess.PIPE, text=True)
    for line in deps.stdout.splitlines():
        if "BOTH WAYS" in line:
            print("src: " + line.strip())
            bad += 1
    print("house rules: %s" % ("kept" if not bad else "%d broken" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
