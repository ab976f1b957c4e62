#!/usr/bin/env python3
"""Self-test of tests/system/lwlog.c without a kernel: builds dm-log-writes
logs by hand (the format lwlog.c describes) holding records of
tests/system/crashw.c, and checks that `lwlog check` passes a log where every
acknowledged record precedes its mark, and fails one where a mark comes
before the acknowledged data (what cache=unsafe produces), one torn record,
and one truncated log; `lwlog replay --to-mark` stops at the mark.

Usage: lwlog-selftest.py LWLOG"""
import os
import struct
import subprocess
import sys
import tempfile

SS = 512
REC = 4096
MAGIC = 0x7672636b72656331
FLUSH, FUA, DISCARD, MARK = 1, 2, 4, 8


def fnv(b):
    h = 0xcbf29ce484222325
    for x in b:
        h ^= x
        h = (h * 0x100000001b3) & 0xffffffffffffffff
    return h


def record(thread, slot, seq):
    hdr = struct.pack("<QQQII", MAGIC, seq, 0, thread, slot)
    x = ((seq << 8) ^ thread ^ 0x9e3779b97f4a7c15) & 0xffffffffffffffff
    body = bytearray(hdr)
    while len(body) + 8 <= REC:
        x ^= (x << 13) & 0xffffffffffffffff
        x ^= x >> 7
        x ^= (x << 17) & 0xffffffffffffffff
        body += struct.pack("<Q", x)
    body += bytes(REC - len(body))
    h = fnv(bytes(body))
    body[16:24] = struct.pack("<Q", h)
    return bytes(body)


class Log:
    def __init__(self):
        self.entries = []

    def write(self, sector, data, flags=0):
        self.entries.append((sector, len(data) // SS, flags, data, b""))

    def flush(self):
        self.entries.append((0, 0, FLUSH, b"", b""))

    def mark(self, text):
        self.entries.append((0, 0, MARK, b"", text.encode()))

    def bytes(self, nr=None):
        out = bytearray(struct.pack("<QQQI", 0x6a736677736872, 1, nr if nr is not None else len(self.entries), SS))
        out += bytes(SS - len(out))
        for sector, n, flags, data, text in self.entries:
            hdr = struct.pack("<QQQQ", sector, n, flags, len(text)) + text
            out += hdr + bytes(SS - len(hdr)) + data
        return bytes(out)


def run(lwlog, log, *args):
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(log)
        path = f.name
    try:
        p = subprocess.run([lwlog, "check", path, "--threads", "2", "--slots", "4"] + list(args),
                           capture_output=True, text=True)
        return p.returncode, p.stdout
    finally:
        os.unlink(path)


def workload(good, torn=False):
    """2 threads x 8 records, 4 slots each, fdatasync + ack every 2 records."""
    lg = Log()
    lg.mark("start")
    for n in range(1, 9):
        for t in range(2):
            slot = t * 4 + (n - 1) % 4
            rec = record(t, slot, n)
            if torn and t == 1 and n == 6:
                rec = rec[:2048] + record(t, slot, n - 4)[2048:]
            if good:
                lg.write(slot * (REC // SS), rec)
        if n % 2 == 0:
            lg.flush()
            for t in range(2):
                lg.mark(f"ack-{t}-{n}")
    if not good:  # unsafe: the data reaches the log at the end, after the marks
        for n in range(1, 9):
            for t in range(2):
                slot = t * 4 + (n - 1) % 4
                lg.write(slot * (REC // SS), record(t, slot, n))
    lg.mark("dm-log-writes-end")
    return lg


def main():
    lwlog = sys.argv[1]
    fails = 0

    def expect(name, cond, out):
        nonlocal fails
        print(("ok - " if cond else "FAIL - ") + name)
        if not cond:
            print(out)
            fails += 1

    rc, out = run(lwlog, workload(True).bytes())
    expect("ordered log: nothing lost", rc == 0 and " lost_points=0 " in out and " acks=8 " in out, out)
    rc, out = run(lwlog, workload(False).bytes())
    expect("marks before data (cache=unsafe): losses found", rc == 1 and " lost_points=0 " not in out, out)
    rc, out = run(lwlog, workload(True, torn=True).bytes())
    expect("torn acknowledged record: loss found", rc == 1 and "found=torn" in out, out)
    lg = workload(True)
    rc, out = run(lwlog, lg.bytes(nr=len(lg.entries) - 1))
    expect("log without its end mark: refused", rc == 1 and "end_mark=0" in out, out)
    # replay --to-mark: the image holds exactly the records up to ack-1-4.
    with tempfile.TemporaryDirectory() as d:
        lp, tp = os.path.join(d, "log"), os.path.join(d, "img")
        open(lp, "wb").write(lg.bytes())
        open(tp, "wb").write(bytes(8 * REC))
        p = subprocess.run([lwlog, "replay", lp, tp, "--to-mark", "ack-1-4"], capture_output=True, text=True)
        img = open(tp, "rb").read()
        want = record(1, 4 + 3, 4)
        expect("replay --to-mark stops at the mark", p.returncode == 0 and img[7 * REC:8 * REC] == want and
               struct.unpack_from("<Q", img, 4 * REC + 8)[0] == 1, p.stdout + p.stderr)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
