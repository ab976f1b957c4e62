#!/usr/bin/env python3
"""Module dependency check: every folder of src/ is a module, and its public
headers are include/<module>/*.h. A file of module M may include its own
module's headers, the headers of the modules M may use (the table below, the
same as docs/architecture.md), and system headers. Anything else is a
forbidden edge and fails the check.

Usage: depcheck.py [ROOT]          check the tree at ROOT (default: ..)
       depcheck.py --self-test     add a forbidden include to a copy of the
                                   tree and show that the check fails on it
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

# module -> modules it may use (besides itself). Keep in step with
# docs/architecture.md, "Module map".
MAY_USE = {
    "util": set(),
    "monitor": {"util"},
    "event": {"util", "monitor"},
    "virtio": {"util"},
    "ioq": {"util"},
    "dataplane": {"util", "event", "virtio", "ioq"},
    "block": {"util", "event", "ioq"},
    "vmm": {"util", "event", "monitor", "block"},
    "devices": {"util", "event", "virtio", "ioq", "dataplane", "block", "vmm", "monitor"},
}
# src/main.c is the program: it may use every module.
PROGRAM = "main"

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def module_of_header(inc):
    """'block/block.h' -> 'block'; a bare name is the includer's own folder."""
    if "/" in inc:
        return inc.split("/", 1)[0]
    return None


def check(root):
    errors = []
    src = os.path.join(root, "src")
    inc_dir = os.path.join(root, "include")
    modules = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    header_modules = sorted(d for d in os.listdir(inc_dir) if os.path.isdir(os.path.join(inc_dir, d)))
    for m in modules:
        if m not in MAY_USE:
            errors.append(f"src/{m}: a folder that is not a module in the table")
    for m in header_modules:
        if m not in MAY_USE:
            errors.append(f"include/{m}: a header folder that is not a module in the table")
    files = []
    for m in modules:
        for dp, _, fs in os.walk(os.path.join(src, m)):
            files += [(m, os.path.join(dp, f)) for f in fs if f.endswith((".c", ".h"))]
    for m in header_modules:
        for dp, _, fs in os.walk(os.path.join(inc_dir, m)):
            files += [(m, os.path.join(dp, f)) for f in fs if f.endswith(".h")]
    for f in os.listdir(src):
        if f.endswith((".c", ".h")):
            files.append((PROGRAM, os.path.join(src, f)))
    edges = 0
    for mod, path in files:
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                mt = INCLUDE_RE.match(line)
                if not mt:
                    continue
                inc = mt.group(1)
                target = module_of_header(inc)
                if target is None:
                    # A private header next to the file: must exist in the same folder.
                    if not os.path.exists(os.path.join(os.path.dirname(path), inc)):
                        errors.append(f"{rel}:{lineno}: \"{inc}\" is not a header of this folder")
                    continue
                edges += 1
                if not os.path.exists(os.path.join(inc_dir, inc)):
                    errors.append(f"{rel}:{lineno}: \"{inc}\" is not a public header (include/{inc})")
                    continue
                if mod == PROGRAM or target == mod:
                    continue
                if target not in MAY_USE.get(mod, set()):
                    errors.append(f"{rel}:{lineno}: module '{mod}' may not use '{target}' (\"{inc}\")")
    return errors, len(files), edges


def self_test(root):
    tmp = tempfile.mkdtemp(prefix="depcheck-")
    try:
        for d in ("src", "include"):
            shutil.copytree(os.path.join(root, d), os.path.join(tmp, d))
        errors, _, _ = check(tmp)
        if errors:
            print("self-test: the unmodified tree already fails:", *errors, sep="\n  ")
            return 1
        # The forbidden edge the layout is about: the block layer reaching into virtio.
        victim = os.path.join(tmp, "src", "block", "io.c")
        with open(victim) as fh:
            text = fh.read()
        with open(victim, "w") as fh:
            fh.write('#include "virtio/virtio-blk.h"\n' + text)
        errors, _, _ = check(tmp)
        want = "src/block/io.c:1: module 'block' may not use 'virtio'"
        if not any(e.startswith(want) for e in errors):
            print("self-test: a forbidden include was not caught:", errors)
            return 1
        print(f"self-test: the forbidden include was caught: {errors[0]}")
        return 0
    finally:
        shutil.rmtree(tmp)


def main():
    args = sys.argv[1:]
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    if args and args[0] == "--self-test":
        return self_test(args[1] if len(args) > 1 else root)
    if args:
        root = args[0]
    errors, nfiles, edges = check(root)
    for e in errors:
        print(e)
    print(f"depcheck: {nfiles} files, {edges} module includes, {len(errors)} forbidden")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
