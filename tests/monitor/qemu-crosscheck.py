#!/usr/bin/env python3
"""Cross-check vblk's QMP replies against a real QEMU, both on -qmp stdio.

Usage: qemu-crosscheck.py HELPER [QEMU]   (exit 77 = skipped: no QEMU)
Version numbers, package strings and timestamps are normalised; every other
byte must match.  KNOWN_DIFFS inputs are printed side by side, not failed.
"""
import os, re, select, shutil, subprocess, sys, time

SAME = [
    '{"execute":"query-status"}',
    '{"execute":"qmp_capabilities","arguments":{"enable":["foo"]}}',
    '{"execute":"qmp_capabilities","arguments":{"enable":"oob"}}',
    '{"execute":"qmp_capabilities","arguments":{"enable":["oob"]}}',
    '{"execute":"qmp_capabilities","arguments":{"x":1}}',
    '{"execute":"qmp_capabilities","id":{"a":[1,"x"]}}',
    '{"execute":"qmp_capabilities"}',
    '{"execute":"query-version","id":5}',
    '{"execute":"nope","id":"x"}',
    '{"execute":"query-status","arguments":{"a":1}}',
    '{"execute":"qom-get","arguments":{"path":"/machine"}}',
    '{"execute":"qom-get","arguments":{"path":1,"property":"x"}}',
    '{"execute":"qom-get","arguments":{"path":"/machine","property":"x","z":1}}',
    '{"execute":"qom-get","arguments":{"path":"/machine/peripheral/x","property":"x"}}',
    '{"execute":"qom-list","arguments":{"path":"/machine/peripheral/x"}}',
    '[1,2]', '"abc"', '{"execute":1}', '{"id":7}',
    '{"execute":"query-status","extra":1}',
    '{"execute":"query-status","arguments":[1]}',
    '{"execute":"query-status","arguments":null}',
    '{"exec-oob":"query-status","id":9}',
    '{"execute":"query-status","id":1} {"execute":"query-status","id":2}',
    '}', '{"a":tru}', '{"a":1,}', '{"a" 1}', '#',
    '{"execute":"query-status","id":1,"id":2}',
    '{"execute":"query-status","id":"\\q"}',
    '{"execute":"query-status","id":"\\ud800"}',
    "{'execute':'query-status','id':'single'}",
    '{"execute":"query-status","id":1.5e3}',
    '{"execute":"query-status","id":-0.0}',
    '{"execute":"query-status","id":0.1}',
    '{"execute":"query-status","id":null}',
    '{"execute":"query-status","id":"\\u00e9\\u0007\\u0000\\/\\t"}',
    '{"execute":"query-status","id":"\\ud83d\\ude00"}',
    '{"execute":"stop"}', '{"execute":"stop"}', '{"execute":"query-status"}',
    '{"execute":"cont"}', '{"execute":"cont"}',
    '{"execute":"system_powerdown"}',
    '{"execute":"system_reset"}',
]
KNOWN_DIFFS = [
    '{"execute":"query-status","id":1e400}',
    '{"execute":"query-status","id":12345678901234567890}',
    '{"execute":"query-status","id":"a\tb"}',
    '{"execute":"query-status","id":01}',
    '{"execute":"qom-get","arguments":{"path":"/machine","property":"yy"}}',
]

def start(argv):
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, bufsize=0)

def read_lines(p, wait=0.4):
    out, end = b"", time.time() + wait
    while time.time() < end:
        r, _, _ = select.select([p.stdout], [], [], 0.05)
        if r:
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                break
            out += chunk
            end = time.time() + 0.15
    return out.decode("utf-8", "replace")

def norm(s):
    s = re.sub(r'"seconds": \d+, "microseconds": \d+', '"seconds": S, "microseconds": U', s)
    s = re.sub(r'"micro": \d+', '"micro": M', s)
    return re.sub(r'"package": "[^"]*"', '"package": P', s)

def exchange(q, v, line):
    for p in (q, v):
        p.stdin.write(line.encode() + b"\n")
    return norm(read_lines(q)), norm(read_lines(v, 0.2))

def main():
    qemu = sys.argv[2] if len(sys.argv) > 2 else shutil.which("qemu-system-x86_64")
    if not qemu:
        print("skip: no qemu-system-x86_64"); return 77
    q = start([qemu, "-machine", "none", "-nodefaults", "-display", "none", "-qmp", "stdio"])
    v = start([sys.argv[1]])
    failed = 0
    gq, gv = norm(read_lines(q, 5)), norm(read_lines(v, 5))
    print("greeting:", "same" if gq == gv else "DIFF\n qemu: %s vblk: %s" % (gq, gv))
    failed += gq != gv
    for line in SAME:
        a, b = exchange(q, v, line)
        if a != b:
            failed += 1
            print("DIFF %s\n  qemu: %r\n  vblk: %r" % (line, a, b))
    for line in KNOWN_DIFFS:
        a, b = exchange(q, v, line)
        print("known %s\n  qemu: %r\n  vblk: %r" % (line, a, b))
    for p in (q, v):
        p.kill(); p.wait()
    print("%d of %d inputs differ" % (failed, len(SAME) + 1))
    return 1 if failed else 0

sys.exit(main())
