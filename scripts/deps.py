#!/usr/bin/env python3
"""Which files of each src/ folder use which: for every folder, each .c file and the files of the same
folder whose lade__ names (functions and globals defined there) it uses, and the pairs that use each
other both ways (the house rule: none). Comments and strings are ignored. Also, per folder, the other
folders its files include (the rule: only folders to its left in docs/architecture.md's table).

    python3 scripts/deps.py            # exit 1 when a pair goes both ways
"""
import collections
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
DEF = re.compile(r"^(?!static|extern|typedef)[A-Za-z_][\w \*]*?\b(lade__\w+)\s*(\(|=|;|\[)", re.M)


def code(text):
    """text without comments and string literals."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def main():
    both = 0
    for folder in sorted(os.listdir(ROOT)):
        d = os.path.join(ROOT, folder)
        if not os.path.isdir(d):
            continue
        files = sorted(f for f in os.listdir(d) if f.endswith(".c"))
        text = {f: code(open(os.path.join(d, f), errors="replace").read()) for f in files}
        owner = {}
        for f, t in text.items():
            for m in DEF.finditer(t):
                line = t[m.start():t.find("\n", m.start())]
                if m.group(2) == "(" and line.rstrip().endswith(";"):
                    continue  # a declaration, not a definition
                owner.setdefault(m.group(1), f)
        uses = collections.defaultdict(set)
        for f, t in text.items():
            words = set(re.findall(r"\blade__\w+", t))
            for w in words:
                if owner.get(w, f) != f:
                    uses[f].add(owner[w])
        incs = set()
        for f in os.listdir(d):
            if f.endswith((".c", ".h")):
                for m in re.finditer(r'#include "([a-z_]+)/', open(os.path.join(d, f), errors="replace").read()):
                    if m.group(1) not in (folder, "lade"):
                        incs.add(m.group(1))
        print("%s/ (includes %s): %s" % (folder, ", ".join(sorted(incs)) or "nothing of src",
                                         "; ".join("%s -> %s" % (a, ", ".join(sorted(uses[a]))) for a in sorted(uses))
                                         or "no file uses another's names"))
        for a, b in sorted({tuple(sorted((a, b))) for a in uses for b in uses[a] if a in uses.get(b, ())}):
            print("   BOTH WAYS: %s <-> %s" % (a, b))
            both += 1
    print("pairs of files that use each other both ways: %d" % both)
    return 1 if both else 0


if __name__ == "__main__":
    sys.exit(main())
