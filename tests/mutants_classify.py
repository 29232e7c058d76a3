#!/usr/bin/env python3
"""Splits a cargo-mutants run's caught mutants by which tests caught them.

Usage: python3 tests/mutants_classify.py mutants.out/<name>/mutants.out [NEW_TEST_SUBSTRING...]

A run made with `--no-fail-fast` (tests/mutants.sh passes it) runs every
test binary of every mutant, so each mutant's log lists every failing test.
A caught mutant whose failing tests all contain one of the NEW_TEST_SUBSTRINGs
(default: `mutant_tests::`) was caught *only* by those tests: every older test
ran against it in the same run and passed, which is the proof that the new
test is the one that notices. Prints one line per mutant and the counts.
"""

import os
import re
import sys


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    new = sys.argv[2:] or ["mutant_tests::"]
    lists = {}
    for kind in ("caught", "missed", "timeout", "unviable"):
        p = os.path.join(out, f"{kind}.txt")
        lists[kind] = [l.strip() for l in open(p)] if os.path.exists(p) else []
    failing = {}
    logdir = os.path.join(out, "log")
    for f in sorted(os.listdir(logdir)):
        if f == "baseline.log":
            continue
        text = open(os.path.join(logdir, f), errors="replace").read()
        first = re.search(r"^\*\*\* (.+)$", text, re.M)
        if not first:
            continue
        name = first.group(1)
        failing[name] = sorted(set(re.findall(r"^test (\S+) \.\.\. FAILED$", text, re.M)))
    only_new, old = [], []
    for m in lists["caught"]:
        tests = failing.get(m, [])
        if tests and all(any(s in t for s in new) for t in tests):
            only_new.append((m, tests))
        else:
            old.append((m, tests))
    for m, tests in only_new:
        print(f"NEW-ONLY  {m}  <- {', '.join(tests)}")
    for m in lists["missed"]:
        print(f"MISSED    {m}")
    for m in lists["timeout"]:
        print(f"TIMEOUT   {m}")
    n = sum(len(v) for v in lists.values())
    print(
        f"mutants {n}: caught by older tests {len(old)}, caught only by new tests {len(only_new)}, "
        f"missed {len(lists['missed'])}, timeout {len(lists['timeout'])}, unviable {len(lists['unviable'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
