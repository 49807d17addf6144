#!/usr/bin/env python3
"""Checks that psync's public headers (include/psync/) include only public
headers, Abseil and the C++ standard library, so the private ones
(common/, worker/, the protos) can change freely and an installed prefix
holds everything a user's #include <psync/psync.h> reaches.

    #include "psync/..."   must exist under include/ (psync/version.h is generated)
    #include <absl/...> or "absl/..."   Abseil: psync::psync's interface
    #include <name>         the standard library (no '/' and no '.h'), or a C header <c...>

Also checks that psync/psync.h includes every public header, so the umbrella
stays whole. Prints every violation as FILE:LINE: what, and exits 1 if any.
Usage: check_public_headers.py [REPO_ROOT]
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]')
GENERATED = {"psync/version.h"}


def bad_include(root, quote, name):
    if name.startswith("absl/"):
        return None
    if name.startswith("psync/"):
        if name in GENERATED or os.path.isfile(os.path.join(root, "include", name)):
            return None
        return "not a public header (include/psync/ has no such file)"
    if quote == "<" and "/" not in name and not name.endswith(".h"):
        return None  # <vector>, <cstdint>, ...
    return "a public header may include only psync/..., absl/... and the standard library"


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    base = os.path.join(root, "include")
    bad, headers = [], []
    for dirpath, _, files in os.walk(os.path.join(base, "psync")):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, base)
            if not name.endswith(".h"):
                bad.append(f"include/{rel}: only headers belong in include/psync/")
                continue
            headers.append(rel)
            with open(path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m:
                        why = bad_include(root, m.group(1), m.group(2))
                        if why:
                            bad.append(f"include/{rel}:{lineno}: #include {m.group(2)}: {why}")
    umbrella_path = os.path.join(base, "psync", "psync.h")
    umbrella = open(umbrella_path, encoding="utf-8").read() if os.path.isfile(umbrella_path) else ""
    for rel in headers:
        if rel != "psync/psync.h" and f'#include "{rel}"' not in umbrella and not transitively(base, umbrella, rel):
            bad.append(f"include/psync/psync.h: does not include {rel} (directly or through another public header)")
    for b in bad:
        print(b)
    print(f"check_public_headers: {len(headers)} public headers, {len(bad)} problems")
    return 1 if bad else 0


def transitively(base, umbrella, target):
    """True when a header the umbrella includes reaches `target`."""
    seen, todo = set(), [m.group(2) for m in map(INCLUDE.match, umbrella.splitlines()) if m]
    while todo:
        h = todo.pop()
        if h == target:
            return True
        if h in seen or not h.startswith("psync/") or not os.path.isfile(os.path.join(base, h)):
            continue
        seen.add(h)
        with open(os.path.join(base, h), encoding="utf-8") as f:
            todo.extend(m.group(2) for m in map(INCLUDE.match, f.read().splitlines()) if m)
    return False


if __name__ == "__main__":
    sys.exit(main())
