#!/usr/bin/env python3
"""Checks the project's size rules (docs/architecture.md, "How to write it"):
functions under ~80 lines and classes under ~500 lines, in the folders the
rule is enforced for (server/, client/, worker/runtime, worker/control,
worker/comm, worker/ddp).
"~" is taken as up to 10% more: a function over 88 lines or a class over 550
fails the check; one between the number and that is printed as a note.

A function is counted from the first line of its signature to its closing
brace, every line (lambdas inside it count towards it). A class is the lines
of code (not blank, not only a comment) of its definition plus those of every
member function defined outside it (Class::Method in a .cc file), so a short
header over a 1,000-line .cc still counts as a large class, and documenting
an interface costs nothing.

The scan is a brace matcher over the source with comments, string and
character literals and preprocessor lines blanked; it knows namespaces,
classes, enums, brace initialisers and constructor initialiser lists, which
is all the C++ of this repository needs. Prints every violation as
FILE:LINE: what, and exits 1 if any.

Usage: check_sizes.py [REPO_ROOT] [--list] [--max-function N] [--max-class N]
  --list  print every function and class with its length, longest first
"""
import argparse
import os
import re
import sys

CHECKED = ("server", "client", "worker/runtime", "worker/control", "worker/comm", "worker/ddp")
SOURCE_EXT = (".h", ".cc")
MAX_FUNCTION = 80
MAX_CLASS = 500
ABOUT = 1.1  # "~80 lines": up to 10% more passes, with a note
IDENT = re.compile(r"[A-Za-z_~][A-Za-z0-9_]*(?:\s*::\s*~?[A-Za-z_][A-Za-z0-9_]*)*")


def blank(text):
    """The source with comments, literals and preprocessor lines replaced by
    spaces (newlines kept, so line numbers stay)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # preprocessor line, with continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if c == "\n":
            line_start = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == "R" and i + 1 < n and text[i + 1] == '"' and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:end]))
            i = end
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator: 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def top_level(s, stop):
    """Index of the first `stop` character of `s` outside () and [] (-1 if none)."""
    depth = 0
    for i, ch in enumerate(s):
        if ch == stop and depth == 0:
            return i
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
    return -1


def classify(stmt):
    """What a `{` at namespace or class scope opens, from the text before it."""
    s = " ".join(stmt.split())
    if re.match(r"^(inline\s+)?namespace\b", s) or s.startswith('extern "'):
        return "namespace", None
    if re.match(r"^(template\s*<.*>\s*)?enum\b", s):
        return "other", None
    m = re.match(r"^(?:template\s*<.*>\s*)?(?:class|struct|union)\s+(?:\[\[[^\]]*\]\]\s*)?([A-Za-z_][A-Za-z0-9_:]*)", s)
    if m and top_level(s, "(") < 0:
        return "class", m.group(1)
    paren = top_level(s, "(")
    if paren < 0:
        return "other", None  # an aggregate initialiser, an anonymous class, ...
    before = s[:paren]
    if top_level(before, "=") >= 0 and "operator" not in before:
        return "other", None  # `auto f = [](...) {` or `T x = T(...){`
    # The name: the last qualified identifier before the parameter list.
    names = IDENT.findall(before)
    name = re.sub(r"\s+", "", names[-1]) if names else "?"
    if "operator" in before:
        name = re.sub(r"\s+", "", before[before.rfind(names[-1]) if names else 0:].strip()) or "operator"
    return "function", name


def code_lines(src, first, last):
    """Lines first..last (1-based) of the blanked source that hold code."""
    lines = src.split("\n")[first - 1:last]
    return sum(1 for l in lines if l.strip())


def scan(path, text):
    """Yields ('function'|'class', name, first_line, last_line, code_lines):
    code_lines counts the lines with code (not blank, not only comments)."""
    src = blank(text)
    stack = []  # (kind, name, start_line)
    stmt, stmt_line = [], None
    line = 1
    in_init_list = []  # per open 'init' brace: the statement text to resume
    for ch in src:
        if ch == "\n":
            line += 1
        if stack and stack[-1][0] in ("function", "other", "block"):
            # Inside a body: only the braces matter.
            if ch == "{":
                stack.append(("block", None, line))
            elif ch == "}":
                kind, name, start = stack.pop()
                if kind == "function":
                    yield kind, name, start, line, code_lines(src, start, line)
                if kind != "block":
                    stmt, stmt_line = [], None
            continue
        if ch == "{":
            text_before = "".join(stmt)
            kind, name = classify(text_before)
            s = " ".join(text_before.split())
            # A brace initialiser in a constructor's initialiser list: `Foo() : a_{1}, b_(2) {`.
            if kind == "function" and re.search(r"\)\s*(?:noexcept\s*)?:(?!:)", s) and re.search(r"[A-Za-z0-9_>]$", s):
                stack.append(("init", None, line))
                in_init_list.append((stmt, stmt_line))
                stmt = stmt + ["{"]
                continue
            stack.append((kind, name, stmt_line if stmt_line is not None else line))
            stmt, stmt_line = [], None
        elif ch == "}":
            if not stack:
                continue
            kind, name, start = stack.pop()
            if kind == "init":
                stmt, stmt_line = in_init_list.pop()
                stmt = stmt + ["{}"]
                continue
            if kind == "class":
                yield kind, name, start, line, code_lines(src, start, line)
            stmt, stmt_line = [], None
        elif ch == ";":
            stmt, stmt_line = [], None
        elif ch == ":" and stack and stack[-1][0] == "class" and re.fullmatch(r"\s*(public|private|protected)\s*", "".join(stmt)):
            stmt, stmt_line = [], None
        else:
            if stmt_line is None and not ch.isspace():
                stmt_line = line
            stmt.append(ch)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--max-function", type=int, default=MAX_FUNCTION)
    ap.add_argument("--max-class", type=int, default=MAX_CLASS)
    args = ap.parse_args()
    root = os.path.abspath(args.root)

    functions = []  # (lines, path, line, name)
    classes = {}    # (module, name) -> [lines, path, line]
    members = []    # (module, class, lines)
    for top in CHECKED:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for fname in sorted(files):
                if not fname.endswith(SOURCE_EXT):
                    continue
                path = os.path.relpath(os.path.join(dirpath, fname), root)
                module = os.path.dirname(path)
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for kind, name, first, last, code in scan(path, text):
                    if kind == "function":
                        functions.append((last - first + 1, path, first, name))
                        if "::" in name:
                            members.append((module, name.split("::")[-2], code))
                    else:
                        short = name.split("::")[-1]
                        entry = classes.setdefault((module, short), [0, path, first])
                        entry[0] += code
    for module, cls, n in members:
        if (module, cls) in classes:
            classes[(module, cls)][0] += n
    bad, notes = [], []
    for n, path, line, name in functions:
        if n > args.max_function:
            (bad if n > args.max_function * ABOUT else notes).append(
                f"{path}:{line}: function {name} is {n} lines (over ~{args.max_function})")
    for (module, name), (n, path, line) in classes.items():
        if n > args.max_class:
            (bad if n > args.max_class * ABOUT else notes).append(
                f"{path}:{line}: class {name} has {n} lines of code with its out-of-line members "
                f"(over ~{args.max_class})")
    if args.list:
        for n, path, line, name in sorted(functions, reverse=True):
            print(f"{n:5d}  function {name}  {path}:{line}")
        for (module, name), (n, path, line) in sorted(classes.items(), key=lambda kv: -kv[1][0]):
            print(f"{n:5d}  class {name}  {path}:{line}")
    for n in notes:
        print("note: " + n)
    for b in bad:
        print(b)
    print(f"check_sizes: {len(functions)} functions and {len(classes)} classes in {', '.join(CHECKED)}; "
          f"{len(bad)} over the limits (+10%), {len(notes)} near them")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
