#!/usr/bin/env python3
"""Checks that the moe dialect's tests cover every op and every diagnostic.

1. Ops: every op declared in dialect/include/moe/Dialect/MoE/*.td (a `def`
   of MoE_Op or of a class derived from it) must appear as `moe.NAME` both in
   the IR and in a CHECK line of a round-trip test: a test/Dialect/MoE/*.mlir
   file whose RUN lines print with moe-opt and FileCheck the output (not a
   -verify-diagnostics file).

2. Messages: every diagnostic emitted in dialect/lib/*.cpp (the message built
   by `emitOpError(...)` / `emitError(...)` and the `<< ...` chain after it:
   op verifiers, shared checks in VerifyUtils.cpp, attribute parsers and
   verifiers in MoEAttributes.cpp, the dialect attribute verifiers in
   MoEDialect.cpp, gradient rules) must be matched by an `expected-error`
   of a test/Dialect/MoE/*.mlir file run with -verify-diagnostics.

   A message is a sequence of string literals and non-literal pieces. Its key
   is its leading literal fragment (the text up to the first non-literal
   piece). A key that is too short to be meaningful (fewer than
   MIN_KEY_CHARS letters and digits, e.g. "unknown " or "'", or empty because
   the message starts with a value) is extended with the pieces that follow,
   a non-literal piece matching any text, until it is long enough. Known
   constants (MoEDialect::kGridAttrName = "moe.grid", ...) count as literals.

   Stricter than a plain text search, so that one test cannot stand in for
   several emission sites:
   - a message emitted by an op's own verify/verifySymbolUses/buildGradient
     (`FooOp::verify` emitting on itself) must be matched by an
     expected-error that also names that op (`'moe.foo' op`);
   - every emission site needs its own expected-error: sites and
     expected-error lines are paired by a maximum bipartite matching, so two
     sites with the same text need two tests;
   - a line counts only for the most specific sites it matches (an op's own
     message before a shared helper's, then the longer key), so that
     "'moe.lr_schedule' op lr must be > 0, got 0" does not also stand for
     the generic `<name> must be <op> 0, got` of the router's coefficients.

3. Error tests: every op must also be named by an expected-error
   (`'moe.NAME' op ...`) of at least one test file under test/ (.mlir or
   .test) whose RUN lines use -verify-diagnostics: each op has at least one
   test that feeds it invalid IR, including ops whose constraints are all
   traits (type equalities) or shared helpers (grid axes), which part 2
   cannot ask for.

   ALLOW_LIST names messages that textual IR cannot trigger, with the reason;
   an entry that no longer matches a site, or whose site is covered, is an
   error too (keep the list minimal).

Prints the op and message listings with the tests that hit them, a summary
(ops covered N/M, messages covered N/M, ops with an error test N/M) and
every gap; exits 1 on any gap.

Usage: verifier-coverage.py [--root REPO] [--quiet]
"""

import argparse
import glob
import os
import re
import sys

# Letters and digits a key needs before it is used on its own.
MIN_KEY_CHARS = 16

# (source file name, key) -> why no test can hit it. Only for messages that
# are unreachable from textual IR.
ALLOW_LIST = {
    # PlacementAttr::parse builds the rank sizes by counting the experts it
    # parses, so they are never negative and always sum to the number of
    # experts; only a C++ caller of PlacementAttr::get could break these.
    ("MoEAttributes.cpp", "placement rank sizes must be >= 0"):
        "the parser derives rank sizes from the lists it reads",
    ("MoEAttributes.cpp", "placement rank sizes sum to"):
        "the parser derives rank sizes from the lists it reads",
    # MLIR calls Dialect::verifyRegionArgAttribute only from the
    # FunctionOpInterface verifier; no op of the dialects moe-opt registers
    # (builtin, func, moe) calls it for a non-function op.
    ("MoEDialect.cpp", "'moe.input' may only mark arguments of a function"):
        "only function ops verify argument attributes",
}

TD_DIR = os.path.join("dialect", "include", "moe", "Dialect", "MoE")
LIB_DIR = os.path.join("dialect", "lib")
TEST_DIR = os.path.join("test", "Dialect", "MoE")


# ---------------------------------------------------------------------------
# TableGen: op mnemonics and C++ class names
# ---------------------------------------------------------------------------

def strip_td(text):
    """Drops // comments and [{ ... }] code blocks (descriptions, C++)."""
    text = re.sub(r"\[\{.*?\}\]", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def read_ops(root):
    """Returns {mnemonic: (cpp class, td file, line)}."""
    texts = {}
    for path in sorted(glob.glob(os.path.join(root, TD_DIR, "*.td"))):
        with open(path, encoding="utf-8") as f:
            texts[path] = f.read()
    # Classes deriving (transitively) from MoE_Op.
    op_classes = {"MoE_Op"}
    class_re = re.compile(r"\bclass\s+(\w+)\s*<(?:[^<>]|<[^<>]*>)*>\s*:\s*(\w+)\s*<")
    changed = True
    while changed:
        changed = False
        for text in texts.values():
            for name, base in class_re.findall(strip_td(text)):
                if base in op_classes and name not in op_classes:
                    op_classes.add(name)
                    changed = True
    ops = {}
    def_re = re.compile(r'\bdef\s+(\w+)\s*:\s*(\w+)\s*<\s*"([^"]+)"')
    for path, text in texts.items():
        stripped = strip_td(text)
        for m in def_re.finditer(stripped):
            name, base, mnemonic = m.groups()
            if base not in op_classes:
                continue
            # ODS drops the dialect prefix up to the first underscore.
            cpp = name.split("_", 1)[1] if "_" in name else name
            line = _td_line(text, name)
            ops[mnemonic] = (cpp, os.path.relpath(path, root), line)
    return ops


def _td_line(text, name):
    m = re.search(r"\bdef\s+" + re.escape(name) + r"\b", text)
    return text.count("\n", 0, m.start()) + 1 if m else 0


def read_constants(root):
    """StringLiteral constants of the dialect class (kGridAttrName, ...)."""
    consts = {}
    for path in glob.glob(os.path.join(root, TD_DIR, "*.td")):
        with open(path, encoding="utf-8") as f:
            for name, value in re.findall(
                    r'StringLiteral\s+(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"', f.read()):
                consts[name] = value
    return consts


# ---------------------------------------------------------------------------
# C++: diagnostics
# ---------------------------------------------------------------------------

TOKEN_RE = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<string>(?:u8|u|U|L)?"(?:[^"\\\n]|\\.)*")
  | (?P<char>'(?:[^'\\\n]|\\.)*')
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<number>\.?\d[\w.']*)
  | (?P<punct><<=|>>=|<<|>>|->|::|&&|\|\||[-+*/%<>=!&|^~?:;,.(){}\[\]#])
""", re.S | re.X)

ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def tokenize(text):
    tokens = []  # (kind, value, line)
    pos, line = 0, 1
    while pos < len(text):
        m = TOKEN_RE.match(text, pos)
        if not m:
            tokens.append(("punct", text[pos], line))
            pos += 1
            continue
        kind = m.lastgroup
        value = m.group(kind)
        if kind not in ("ws", "comment"):
            tokens.append((kind, value, line))
        line += value.count("\n")
        pos = m.end()
    return tokens


def decode_string(literal):
    body = literal[literal.index('"') + 1:-1]
    return re.sub(r"\\(.)", lambda m: ESCAPES.get(m.group(1), m.group(1)), body)


class Site:
    """One emitOpError/emitError call and the message it builds."""

    def __init__(self, path, line, pieces, op, function):
        self.path = path
        self.line = line
        self.pieces = pieces  # str for literals, None for any text
        self.op = op  # mnemonic when an op's own method emits on itself
        self.function = function
        self.key_text, self.key_re = make_key(pieces)

    def where(self):
        return "%s:%d" % (self.path, self.line)

    def text(self):
        return "".join("<...>" if p is None else p for p in self.pieces)


def strength(s):
    return sum(c.isalnum() for c in s)


def make_key(pieces):
    """The leading literal fragment, extended while too short."""
    # Merge adjacent literals, collapse adjacent wildcards.
    merged = []
    for p in pieces:
        if merged and p is not None and merged[-1] is not None:
            merged[-1] += p
        elif not (merged and p is None and merged[-1] is None):
            merged.append(p)
    while merged and merged[0] is None:
        merged.pop(0)
    key, total = [], 0
    for p in merged:
        key.append(p)
        if p is not None:
            total += strength(p)
            if total >= MIN_KEY_CHARS:
                break
    while key and key[-1] is None:
        key.pop()
    if not key:
        return "", None
    key[0] = key[0].lstrip()
    key[-1] = key[-1].rstrip()
    text = "".join("<...>" if p is None else p for p in key)
    regex = "".join(".*?" if p is None else re.escape(p) for p in key)
    return text, re.compile(regex)


def split_top_level(tokens, start):
    """Parses a `<< a << b ...` chain from tokens[start]; returns the pieces
    (token lists) and the index after the chain."""
    pieces = []
    i = start
    while i < len(tokens) and tokens[i][1] == "<<":
        i += 1
        depth, piece = 0, []
        while i < len(tokens):
            v = tokens[i][1]
            if depth == 0 and v in ("<<", ";", ","):
                break
            if v in "([{":
                depth += 1
            elif v in ")]}":
                if depth == 0:
                    break
                depth -= 1
            piece.append(tokens[i])
            i += 1
        pieces.append(piece)
    return pieces, i


def piece_value(piece, consts):
    """A literal string for a piece of string literals or a known constant;
    None for anything else."""
    if piece and all(t[0] == "string" for t in piece):
        return "".join(decode_string(t[1]) for t in piece)
    values = [t[1] for t in piece]
    if len(values) == 1 and values[0] in consts:
        return consts[values[0]]
    if len(values) == 3 and values[1] == "::" and values[2] in consts:
        return consts[values[2]]
    return None


def function_headers(tokens):
    """Maps every token index to the name of the top-level function whose
    body contains it (None outside functions)."""
    owner = [None] * len(tokens)
    depth, header_start, current = 0, 0, None
    for i, (kind, value, _) in enumerate(tokens):
        if value == "{":
            if depth == 0:
                current = header_name(tokens[header_start:i])
            depth += 1
        elif value == "}":
            depth -= 1
            if depth == 0:
                current = None
                header_start = i + 1
        elif value == ";" and depth == 0:
            header_start = i + 1
        owner[i] = current if depth > 0 else None
    return owner


def header_name(header):
    """`LogicalResult FooOp::verify(...) const` -> "FooOp::verify"."""
    paren = 0
    for j, (_, value, _) in enumerate(header):
        if value == "(" and paren == 0:
            # ident (:: ident)* right before the parenthesis.
            k = j - 1
            if k < 0 or header[k][0] != "ident":
                return None
            name = [header[k][1]]
            while k >= 2 and header[k - 1][1] == "::" and header[k - 2][0] == "ident":
                name.insert(0, header[k - 2][1])
                k -= 2
            return "::".join(name)
        if value == "(":
            paren += 1
        elif value == ")":
            paren -= 1
    return None


OP_METHODS = ("verify", "verifySymbolUses", "buildGradient", "verifyRegions")


def read_sites(root, ops, consts):
    cpp_to_mnemonic = {cpp: mnemonic for mnemonic, (cpp, _, _) in ops.items()}
    sites = []
    for path in sorted(glob.glob(os.path.join(root, LIB_DIR, "*.cpp"))):
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            tokens = tokenize(f.read())
        owner = function_headers(tokens)
        for i, (kind, value, line) in enumerate(tokens):
            if kind != "ident" or value not in ("emitOpError", "emitError"):
                continue
            if i + 1 >= len(tokens) or tokens[i + 1][1] != "(":
                continue  # a declaration such as `function_ref<...> emitError`
            # The argument list.
            depth, j, args = 0, i + 1, []
            while j < len(tokens):
                v = tokens[j][1]
                if v == "(":
                    depth += 1
                    if depth == 1:
                        j += 1
                        continue
                elif v == ")":
                    depth -= 1
                    if depth == 0:
                        break
                args.append(tokens[j])
                j += 1
            pieces = []
            if args and all(t[0] == "string" for t in args):
                pieces.append("".join(decode_string(t[1]) for t in args))
            # Otherwise the argument is a location (parser.emitError(loc)) or
            # absent; the message is the chain that follows.
            chain, _ = split_top_level(tokens, j + 1)
            pieces.extend(piece_value(p, consts) for p in chain)
            if not any(isinstance(p, str) and p.strip() for p in pieces):
                print("warning: %s:%d: diagnostic without literal text" % (rel, line),
                      file=sys.stderr)
            # Attribute to an op when an op's own method emits on itself.
            function = owner[i]
            op = None
            receiver = tokens[i - 1][1] if i > 0 else ""
            on_self = receiver not in (".", "->") or (
                i >= 2 and tokens[i - 2][1] == "this")
            if function and "::" in function and on_self:
                cls, method = function.rsplit("::", 1)
                if cls in cpp_to_mnemonic and method in OP_METHODS:
                    op = cpp_to_mnemonic[cls]
            sites.append(Site(rel, line, pieces, op, function))
    return sites


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------

def run_lines(text):
    return [l.split("RUN:", 1)[1] for l in text.splitlines() if "RUN:" in l]


def read_tests(root):
    """Returns (round-trip files, expected errors [(file, line, text)])."""
    round_trip, expected = {}, []
    err_re = re.compile(r"expected-error(?:-re)?\s*(?:@\S+\s*)?\{\{(.*)\}\}")
    for path in sorted(glob.glob(os.path.join(root, TEST_DIR, "*.mlir"))):
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        runs = run_lines(text)
        verifies = any("-verify-diagnostics" in r for r in runs)
        if verifies:
            for n, l in enumerate(text.splitlines(), 1):
                m = err_re.search(l)
                if m:
                    expected.append((rel, n, m.group(1)))
        elif any(re.search(r"moe-opt\s+%s", r) and "FileCheck" in r for r in runs):
            round_trip[rel] = text
    return round_trip, expected


def read_error_tests(root):
    """expected-error texts [(file, line, text)] of every test file under
    test/ that runs with -verify-diagnostics."""
    expected = []
    err_re = re.compile(r"expected-error(?:-re)?\s*(?:@\S+\s*)?\{\{(.*)\}\}")
    paths = glob.glob(os.path.join(root, "test", "**", "*.mlir"), recursive=True) + \
        glob.glob(os.path.join(root, "test", "**", "*.test"), recursive=True)
    for path in sorted(paths):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if not any("-verify-diagnostics" in r for r in run_lines(text)):
            continue
        rel = os.path.relpath(path, root)
        for n, l in enumerate(text.splitlines(), 1):
            m = err_re.search(l)
            if m:
                expected.append((rel, n, m.group(1)))
    return expected


def op_occurrences(round_trip, mnemonic):
    """First IR line and first CHECK line naming moe.MNEMONIC."""
    pattern = re.compile(r"\bmoe\." + re.escape(mnemonic) + r"\b(?![.\w])")
    ir = check = None
    for rel, text in round_trip.items():
        for n, l in enumerate(text.splitlines(), 1):
            if not pattern.search(l):
                continue
            stripped = l.strip()
            if stripped.startswith("//"):
                if check is None and re.match(r"//\s*CHECK(-\w+)?:", stripped):
                    check = "%s:%d" % (rel, n)
            elif ir is None:
                ir = "%s:%d" % (rel, n)
    return ir, check


# ---------------------------------------------------------------------------
# Matching
# ---------------------------------------------------------------------------

def matches(site, text):
    if site.key_re is None or not site.key_re.search(text):
        return False
    return not site.op or ("'moe.%s' op " % site.op) in text


def specificity(site):
    """An op's own message before a shared helper's; a longer key first."""
    return (site.op is not None, strength(site.key_text.replace("<...>", "")))


def candidate_edges(sites, expected):
    """For every site, the expected-errors it may account for: those it
    matches, among the sites of highest specificity matching them (an error
    comes from one site, so a line that names a specific message is not
    evidence for a generic one such as `<name> must be <op> 0, got`)."""
    edges = [[] for _ in sites]
    for idx, (_, _, text) in enumerate(expected):
        hits = [i for i, site in enumerate(sites) if matches(site, text)]
        if not hits:
            continue
        best = max(specificity(sites[i]) for i in hits)
        for i in hits:
            if specificity(sites[i]) == best:
                edges[i].append(idx)
    return edges


def candidates(site, expected):
    return [idx for idx, (_, _, text) in enumerate(expected) if matches(site, text)]


def max_matching(edges, n_right):
    """Kuhn's algorithm: edges[i] lists the right nodes of left node i."""
    match_right = [-1] * n_right
    match_left = [-1] * len(edges)

    def augment(u, seen):
        for v in edges[u]:
            if v in seen:
                continue
            seen.add(v)
            if match_right[v] < 0 or augment(match_right[v], seen):
                match_right[v] = u
                match_left[u] = v
                return True
        return False

    # Sites with fewest candidates first: fewer augmenting steps.
    for u in sorted(range(len(edges)), key=lambda u: len(edges[u])):
        augment(u, set())
    return match_left


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(here)),
                        help="repository root (default: two levels above this script)")
    parser.add_argument("--quiet", action="store_true", help="print only gaps and the summary")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    sys.setrecursionlimit(10000)

    ops = read_ops(root)
    consts = read_constants(root)
    sites = read_sites(root, ops, consts)
    round_trip, expected = read_tests(root)
    if not ops or not sites or not round_trip or not expected:
        print("error: found %d ops, %d diagnostics, %d round-trip tests, %d expected-errors "
              "under %s" % (len(ops), len(sites), len(round_trip), len(expected), root))
        return 1

    gaps = []

    # Ops.
    ops_covered = 0
    if not args.quiet:
        print("== ops (round-trip tests: %s)" % ", ".join(sorted(round_trip)))
    for mnemonic in sorted(ops):
        ir, check = op_occurrences(round_trip, mnemonic)
        if ir and check:
            ops_covered += 1
            if not args.quiet:
                print("  moe.%-20s %s" % (mnemonic, ir))
        else:
            missing = "IR and CHECK line" if not ir and not check else (
                "IR" if not ir else "CHECK line")
            gaps.append("op moe.%s (%s:%d) has no round-trip test (missing %s)"
                        % (mnemonic, ops[mnemonic][1], ops[mnemonic][2], missing))

    # Ops in error tests.
    error_tests = read_error_tests(root)
    ops_with_errors = 0
    if not args.quiet:
        print("== ops in error tests (%d expected-errors in -verify-diagnostics tests under "
              "test/)" % len(error_tests))
    for mnemonic in sorted(ops):
        named = "'moe.%s' op " % mnemonic
        hit = next(("%s:%d" % (rel, n) for rel, n, text in error_tests if named in text), None)
        if hit:
            ops_with_errors += 1
            if not args.quiet:
                print("  moe.%-20s %s" % (mnemonic, hit))
        else:
            gaps.append("op moe.%s (%s:%d) is named by no expected-error of a "
                        "-verify-diagnostics test" % (mnemonic, ops[mnemonic][1],
                                                      ops[mnemonic][2]))

    # Messages.
    allowed = {}
    for site in sites:
        entry = (os.path.basename(site.path), site.key_text)
        if entry in ALLOW_LIST:
            allowed[id(site)] = ALLOW_LIST[entry]
    used_entries = {(os.path.basename(s.path), s.key_text) for s in sites
                    if id(s) in allowed}
    for entry in ALLOW_LIST:
        if entry not in used_entries:
            gaps.append("allow-list entry %r matches no diagnostic" % (entry,))

    checked = [s for s in sites if id(s) not in allowed]
    edges = candidate_edges(checked, expected)
    matching = max_matching(edges, len(expected))
    messages_covered = 0
    if not args.quiet:
        print("== messages (%d expected-errors in -verify-diagnostics tests)" % len(expected))
    for site, match, cands in zip(checked, matching, edges):
        label = "[moe.%s] " % site.op if site.op else ""
        if match >= 0:
            messages_covered += 1
            if not args.quiet:
                rel, n, _ = expected[match]
                print("  %s %s\"%s\" -> %s:%d" % (site.where(), label, site.key_text, rel, n))
            continue
        if site.key_re is None:
            gaps.append("%s: diagnostic has no literal text to look for" % site.where())
        elif cands:
            gaps.append("%s: %s\"%s\" needs its own expected-error (its matches serve other "
                        "sites)" % (site.where(), label, site.key_text))
        elif candidates(site, expected):
            gaps.append("%s: %s\"%s\" has no expected-error of its own (every line it matches "
                        "is a more specific message)" % (site.where(), label, site.key_text))
        else:
            gaps.append("%s: %s\"%s\" has no expected-error%s (message: \"%s\")"
                        % (site.where(), label, site.key_text,
                           " naming 'moe.%s' op" % site.op if site.op else "", site.text()))
    for site in sites:
        if id(site) in allowed:
            if candidates(site, expected):
                gaps.append("%s: allow-listed \"%s\" is covered by a test; drop the entry"
                            % (site.where(), site.key_text))
            elif not args.quiet:
                print("  %s \"%s\" allow-listed: %s"
                      % (site.where(), site.key_text, allowed[id(site)]))

    print("ops covered %d/%d" % (ops_covered, len(ops)))
    print("messages covered %d/%d (%d allow-listed)"
          % (messages_covered, len(checked), len(sites) - len(checked)))
    print("ops with an error test %d/%d" % (ops_with_errors, len(ops)))
    for gap in gaps:
        print("GAP: " + gap)
    if gaps:
        print("FAILED: %d gap(s)" % len(gaps))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
