#!/usr/bin/env python3
"""Checks the hand-kept lists of moe passes against Passes.td.

The passes are defined in passes/include/moe/Transforms/Passes.td (their
reference is generated from it: `make docs`, build/docs/MoEPasses.md). Two
lists are written by hand because they say what the generated reference
cannot (when each pass runs in the training pipeline, what it changes in an
example), and they must name every pass and nothing else:

- passes/README.md: the table of passes (file | flag | ...); each file it
  names must exist in passes/lib/.
- docs/Architecture.md: the pipeline table (# | pass | ...); a row may name
  several passes.

Also, one lit test per pass: test/Transforms/<flag>.mlir or .test.

Prints each list with its count, a GAP line per problem, then OK or FAILED.

Usage: pass-lists.py [--root REPO] [--quiet]
"""

import argparse
import os
import re
import sys

PASSES_TD = "passes/include/moe/Transforms/Passes.td"
FLAG = re.compile(r"`(moe-[a-z0-9-]+)`")


def passes(root):
    """{flag: line} of every `def XPass : Pass<"flag", ...>` in Passes.td."""
    found = {}
    with open(os.path.join(root, PASSES_TD)) as f:
        for n, line in enumerate(f, 1):
            m = re.match(r'\s*def\s+\w+\s*:\s*Pass<"([^"]+)"', line)
            if m:
                found[m.group(1)] = n
    return found


def table_rows(path, header):
    """(line, cells) of the rows of the first Markdown table in `path` whose
    header row's cells start with `header`."""
    rows, inside = [], False
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.startswith("|"):
                if inside:
                    break
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not inside:
                inside = cells[: len(header)] == header
                continue
            if set("".join(cells)) <= set("- :"):
                continue  # the separator row
            rows.append((n, cells))
    return rows


def check_list(root, rel, header, column, defined, gaps, quiet, files_in=None):
    path = os.path.join(root, rel)
    rows = table_rows(path, header)
    if not rows:
        gaps.append("%s: no table with the header | %s |" % (rel, " | ".join(header)))
        return
    listed = {}
    for n, cells in rows:
        for flag in FLAG.findall(cells[column]):
            listed.setdefault(flag, n)
            if flag not in defined:
                gaps.append("%s:%d: `%s` is not a pass of %s" % (rel, n, flag, PASSES_TD))
        if files_in is not None:
            for name in re.findall(r"`([\w/.]+\.(?:cpp|h))`", cells[0]):
                if not os.path.exists(os.path.join(root, files_in, name)):
                    gaps.append("%s:%d: `%s` is not in %s/" % (rel, n, name, files_in))
    for flag, line in sorted(defined.items()):
        if flag not in listed:
            gaps.append("%s: pass `%s` (%s:%d) is missing" % (rel, flag, PASSES_TD, line))
    covered = sum(1 for flag in defined if flag in listed)
    print("%s: %d/%d passes" % (rel, covered, len(defined)))
    if not quiet:
        for flag in sorted(listed):
            print("  %s %s:%d" % (flag, rel, listed[flag]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    parser.add_argument("--quiet", action="store_true", help="counts and gaps only")
    args = parser.parse_args()
    root = args.root
    defined = passes(root)
    gaps = []
    if not defined:
        gaps.append("%s defines no pass" % PASSES_TD)
    print("%s: %d passes" % (PASSES_TD, len(defined)))
    check_list(root, "passes/README.md", ["file", "flag"], 1, defined, gaps, args.quiet,
               files_in="passes/lib")
    check_list(root, "docs/Architecture.md", ["#", "pass"], 1, defined, gaps, args.quiet)
    tests = 0
    for flag, line in sorted(defined.items()):
        if any(os.path.exists(os.path.join(root, "test/Transforms", flag + ext))
               for ext in (".mlir", ".test")):
            tests += 1
        else:
            gaps.append("test/Transforms: pass `%s` (%s:%d) has no test %s.mlir or .test"
                        % (flag, PASSES_TD, line, flag))
    print("test/Transforms: %d/%d passes" % (tests, len(defined)))
    for gap in gaps:
        print("GAP: " + gap)
    if gaps:
        print("FAILED: %d gap(s)" % len(gaps))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
