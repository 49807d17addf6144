#!/usr/bin/env python3
"""Checks psync's layering on the #include lines: an include may only point
down (docs/architecture.md, "Layers").

    common, protos            the bottom: include nothing of the repository above them
    worker/tensor             level 1
    (a module's public headers, include/psync/<module>/ included as "psync/<module>/...",
    are part of that module; include/psync/common/ of common)
    worker/autograd, comm, safetensors, tokenizer     level 2
    worker/nn, optim          level 3
    worker/ddp, data, checkpoint                      level 4
    worker/control            level 5
    worker/runtime, sample, tools    level 6
    server/, client/          common and protos only (never worker/, never each other)

A module may include its own files and any module of a lower level; two
modules of one level never include each other. bench/ and tests/ may include
anything. In worker/, only control/ talks gRPC (includes <grpcpp/...> or a
*.grpc.pb.h). Prints every violation as FILE:LINE: what, and exits 1 if any.
Usage: check_layers.py [REPO_ROOT]
"""
import os
import re
import sys

WORKER_LEVELS = {
    "tensor": 1,
    "autograd": 2, "comm": 2, "safetensors": 2, "tokenizer": 2,
    "nn": 3, "optim": 3,
    "ddp": 4, "data": 4, "checkpoint": 4,
    "control": 5,
    "runtime": 6, "sample": 6, "tools": 6,
}
SOURCE_EXT = (".h", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
GRPC = re.compile(r'^\s*#\s*include\s+[<"](grpcpp/[^>"]+|[^>"]+\.grpc\.pb\.h)[>"]')


def module_of(path):
    """('worker', 'nn') for worker/nn/... and its public headers (psync/nn/..., in
    include/psync/nn/), ('common', None) for common/ and psync/common/, ('protos', None),
    ...; None outside."""
    parts = path.split("/")
    if parts[0] == "include":
        parts = parts[1:]
    if parts[0] == "psync" and len(parts) > 2 and parts[1] != "v1":
        parts = parts[1:] if parts[1] == "common" else ["worker"] + parts[1:]
    if parts[0] == "psync" and len(parts) == 2:  # psync/psync.h, psync/version.h: the whole API
        return ("api", None)
    if parts[0] == "worker" and len(parts) > 2:
        return ("worker", parts[1])
    if parts[0] in ("common", "server", "client"):
        return (parts[0], None)
    if parts[0] == "psync" or parts[0] == "protos":  # generated protos: psync/v1/*.pb.h
        return ("protos", None)
    return None


def allowed(src, dst):
    """None when `src` may include `dst`, else why not."""
    if dst is None or src == dst or src == ("api", None):
        return None
    if dst == ("api", None):
        return "only programs outside psync include the whole API (psync/psync.h)"
    if dst in (("common", None), ("protos", None)):
        return None if src != ("common", None) or dst == ("common", None) else "common includes protos"
    if src[0] in ("common", "protos"):
        return f"{src[0]} is the bottom layer"
    if src[0] in ("server", "client"):
        return f"{src[0]}/ may include only common/ and the protos"
    if src[0] == "worker" and dst[0] == "worker":
        s, d = WORKER_LEVELS.get(src[1]), WORKER_LEVELS.get(dst[1])
        if s is None:
            return f"worker/{src[1]} has no layer (add it to WORKER_LEVELS here and to docs/architecture.md's table)"
        if d is None:
            return f"worker/{dst[1]} has no layer"
        if d < s:
            return None
        return f"worker/{src[1]} (level {s}) includes worker/{dst[1]} (level {d}): includes only point down"
    return f"{src[0]}/ includes {dst[0]}/"


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    bad = []
    checked = 0
    for top in ("common", "server", "client", "worker", "include"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                src = module_of(path)
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        g = GRPC.match(line)
                        if g and src[0] == "worker" and src[1] != "control":
                            bad.append(f"{path}:{lineno}: #include {g.group(1)}: only worker/control talks gRPC")
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        checked += 1
                        why = allowed(src, module_of(m.group(1)))
                        if why:
                            bad.append(f"{path}:{lineno}: #include \"{m.group(1)}\": {why}")
    for b in bad:
        print(b)
    print(f"check_layers: {checked} includes checked, {len(bad)} against the layering")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
