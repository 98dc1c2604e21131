#!/usr/bin/env python3
"""Prints lit's summary from the results file of a lit run (`lit -o FILE`),
for the test command: ctest shows lit's own output only when it fails, and
a suite whose unsupported tests do not run should say so when it passes.

usage: lit-summary.py RESULTS.json

Prints lit's summary lines (`Total Discovered Tests: N`, `Unsupported: N`,
`Passed: N`, ...) and then every test that did not pass with its reason
(an unsupported test's missing features, a failure's name). Exits 0 (it
reports; ctest's status is the suite's), 2 when the file cannot be read.
"""

import json
import sys

# lit's result codes in the order and with the labels of its own summary.
LABELS = [
    ("EXCLUDED", "Excluded"),
    ("SKIPPED", "Skipped"),
    ("UNSUPPORTED", "Unsupported"),
    ("PASS", "Passed"),
    ("FLAKYPASS", "Passed With Retry"),
    ("XFAIL", "Expectedly Failed"),
    ("UNRESOLVED", "Unresolved"),
    ("TIMEOUT", "Timed Out"),
    ("FAIL", "Failed"),
    ("XPASS", "Unexpectedly Passed"),
]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: lit-summary.py RESULTS.json")
    try:
        with open(sys.argv[1]) as f:
            tests = json.load(f)["tests"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print("lit-summary.py: %s: not a lit results file: %s" % (sys.argv[1], e), file=sys.stderr)
        return 2
    counts = {}
    for t in tests:
        counts[t["code"]] = counts.get(t["code"], 0) + 1
    known = [code for code, _ in LABELS]
    labels = LABELS + [(c, c.capitalize()) for c in sorted(counts) if c not in known]
    width = max(len(label) for code, label in labels if counts.get(code)) if tests else 0
    print("lit: Total Discovered Tests: %d" % len(tests))
    for code, label in labels:
        if counts.get(code):
            print("  %-*s: %d (%.2f%%)" % (width, label, counts[code], 100.0 * counts[code] / len(tests)))
    for code, label in labels:
        if code in ("PASS", "EXCLUDED"):
            continue
        for t in sorted((t for t in tests if t["code"] == code), key=lambda t: t["name"]):
            reason = ""
            if code in ("UNSUPPORTED", "SKIPPED"):
                reason = ": " + (t.get("output") or "").strip().splitlines()[0] \
                    if (t.get("output") or "").strip() else ""
            print("%s: %s%s" % (code, t["name"], reason))
    return 0


if __name__ == "__main__":
    sys.exit(main())
