#!/usr/bin/env python3
"""Doxygen input filter for psync's public headers (docs/Doxyfile).

The headers are written for people: plain // comments above what they
describe. This filter shows them to Doxygen as documentation, without
changing the files:
  - the comment block at the top of a header becomes its \\file text;
  - a // block on the lines above a declaration becomes /// (its brief and details);
  - a trailing `int x = 0;  // text` becomes `///< text`;
  - in comment text, the characters Doxygen would read as commands or HTML
    (\\ @ < > & # % $) are escaped, so prose like `<psync/psync.h>` prints as written.
Comments inside inline function bodies (within braces that open after a
`)`) stay plain. Usage: doxygen_filter.py FILE (writes to stdout).
"""
import re
import sys

ESCAPE = re.compile(r"([\\@<>&#%$])")
FULL = re.compile(r"^(\s*)//(?!/)\s?(.*)$")
BODY = re.compile(r"\)\s*(const\s*)?(noexcept\s*)?(override\s*)?(final\s*)?(->\s*[\w:<>, ]+\s*)?\{")
TRAILING = re.compile(r"^(.*?[;,])(\s+)//(?!/)\s?(.*)$")


def esc(text):
    return ESCAPE.sub(r"\\\1", text)


def main():
    lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
    out = []
    i = 0
    # The file's header comment.
    header = []
    while i < len(lines) and FULL.match(lines[i]):
        header.append(esc(FULL.match(lines[i]).group(2)))
        i += 1
    if header:
        out.append("/// \\file")
        out.extend("/// " + h if h else "///" for h in header)
    body_stack = []  # per open brace: True when it opened a function body
    for line in lines[i:]:
        m = FULL.match(line)
        if m and not any(body_stack):
            text = esc(m.group(2))
            out.append(f"{m.group(1)}/// {text}" if text else f"{m.group(1)}///")
            continue
        t = TRAILING.match(line)
        if t and not any(body_stack) and '"' not in t.group(1):
            out.append(f"{t.group(1)}{t.group(2)}///< {esc(t.group(3))}")
        else:
            out.append(line)
        code = re.sub(r"//.*", "", re.sub(r'"(\\.|[^"\\])*"', '""', line))
        is_body = bool(BODY.search(code))
        for ch in code:
            if ch == "{":
                body_stack.append(is_body)
            elif ch == "}" and body_stack:
                body_stack.pop()
    sys.stdout.write("\n".join(out))


if __name__ == "__main__":
    main()
