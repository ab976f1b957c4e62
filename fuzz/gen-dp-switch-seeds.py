#!/usr/bin/env python3
# The seed corpus of fuzz-dp-switch (fuzz/fuzz-dp-switch.c, whose header
# describes the input layout): writes one file per seed into the directory
# given, e.g. `fuzz/gen-dp-switch-seeds.py fuzz/corpus/dp-switch`.
# SPDX-License-Identifier: GPL-2.0-or-later
import os, sys
out = sys.argv[1]
def rec(op, a=0, b=0, c=0, d=0, e=0, f=0, g=0): return bytes([op, a, b, c, d, e, f, g])
def W(q, sector, nsec, pat=0, kick=False, ind=False): return rec(0, 1 | q << 3, sector, nsec & 15, pat & 0xfc | (2 if kick else 0) | (1 if ind else 0))
def R(q, sector, nsec, kick=False, segs=1): return rec(0, 0 | q << 3, sector, (nsec & 15) | (segs - 1) << 5, 2 if kick else 0)
def T(q, t, sector=0, c=1, d=0): return rec(1, t | q << 3, sector, c, d)
KICK = lambda q=0, all_=False: rec(3, q | (4 if all_ else 0))
SW = rec(4); SAME = rec(4, 1); SETTLE = rec(6); SETTLE_W = rec(6, 1)
STOP_DP = rec(5, 1); STOP_BL = rec(5, 0)
def REMAP(bits): return rec(4, 2, bits)
def H(q, mode, b=0, c=0, d=0, e=0): return rec(2, mode | q << 3, b, c, d, e)
def P(q, avail, off, val): return rec(7, q | (4 if avail else 0), *val, off, 0)
FEAT = 0x3f  # everything, queue size 8 (bits 6-7 = 0)
def hdr(be, nq, dp, thr=0, final_bl=False, feat=FEAT, qs=1):
    return bytes([be | (nq - 1) << 2 | (0x10 if dp else 0) | thr << 5 | (0x80 if final_bl else 0), feat & 0x3f | qs << 6])
seeds = {
 'null-rw-switch': hdr(0, 1, True) + W(0, 3, 2, 0x40) + R(0, 3, 2, True) + SW + R(0, 0, 4) + KICK() + SW + SETTLE,
 'uring-write-switch-read': hdr(1, 1, True) + W(0, 10, 4, 0x80, True) + SW + SETTLE_W + R(0, 10, 4, True) + SW + R(0, 10, 4, True, 2) + SETTLE,
 'threads-mq2-inflight-switches': hdr(2, 2, False) + W(0, 0, 8, 0x10) + W(1, 20, 8, 0x20) + KICK(0, True) + SW + W(0, 40, 2, 0x30, True) + SW + SW + SETTLE + R(0, 0, 8) + R(1, 20, 8) + R(0, 40, 2, True) + SW + SETTLE,
 'native-mq4-stopstart': hdr(3, 4, True) + b''.join(W(q, 8 * q, 4, 0x50 + 4 * q) for q in range(4)) + KICK(0, True) + STOP_BL + SETTLE + b''.join(R(q, 8 * q, 4) for q in range(4)) + STOP_DP + SETTLE,
 'uring-types-flush-getid-discard-wz': hdr(1, 1, False) + W(0, 50, 4, 0x60) + T(0, 2) + T(0, 3, 0, 1) + T(0, 4, 60, 3) + T(0, 5, 70, 3) + T(0, 6) + KICK() + SW + SETTLE + R(0, 50, 4) + R(0, 70, 4, True) + SETTLE,
 'null-throttled-iops-switch': hdr(0, 2, False, thr=3) + b''.join(W(i & 1, i, 1, i * 4) for i in range(12)) + KICK(0, True) + SW + SETTLE + SW + SETTLE,
 'uring-throttle-bps-mq3': hdr(1, 3, True, thr=2, qs=2) + b''.join(W(i % 3, 2 * i, 8, i * 8) for i in range(9)) + KICK(0, True) + SW + STOP_DP + SETTLE,
 'hostile-loop-switch': hdr(1, 1, True, qs=1) + W(0, 1, 1, 0x44) + H(0, 2, 0, 0, 0, 1) + KICK() + SW + R(0, 1, 1, True) + SW + SETTLE,
 'hostile-badaddr-mq2': hdr(2, 2, False, qs=2) + H(1, 0, 1) + W(0, 5, 1, 0x22, True) + SW + H(0, 5, 0, 1, 3, 1) + KICK(0, True) + SW + SETTLE,
 'hostile-rawhead-avail-jump': hdr(0, 1, False, qs=1) + W(0, 2, 1) + H(0, 3, 0, 0, 0, 3) + H(0, 7, 0, 0, 0, 4) + KICK() + SW + SETTLE,
 'poke-avail-switch': hdr(1, 1, True, qs=1) + W(0, 9, 1, 0x90) + P(0, True, 4, [1, 0, 2, 0]) + KICK() + SW + SETTLE,
 'indirect-no-event-idx': hdr(1, 2, False, feat=0x3e, qs=1) + W(0, 30, 3, 0x70, ind=True) + W(1, 30, 3, 0x74, ind=True) + KICK(0, True) + SW + R(0, 30, 3, True) + SETTLE,
 'kick-then-switch-no-rekick': hdr(1, 2, True, qs=1) + W(0, 90, 2, 0x24) + W(1, 92, 2, 0x28) + KICK(0, True) + SW + SETTLE_W + W(0, 94, 1, 0x2c, True) + SW + STOP_DP + SETTLE_W + R(0, 90, 5, True) + SW + SETTLE_W,
 'native-flush-order': hdr(3, 1, False, qs=1) + W(0, 100, 4, 0x34) + T(0, 2) + W(0, 104, 4, 0x38) + T(0, 2) + KICK() + SW + SETTLE_W + R(0, 100, 8, True) + SETTLE,
 'remap-mq4-switch': hdr(1, 4, True, qs=2) + b''.join(W(q, 16 * q, 2, 0x84 + 4 * q) for q in range(4)) + KICK(0, True) + REMAP(0b0101) + SW + REMAP(0b1010) + SETTLE_W + b''.join(R(q, 16 * q, 2, True) for q in range(4)) + SW + REMAP(0) + SETTLE_W,
 'remap-null-inflight': hdr(0, 2, False, thr=1, qs=1) + W(0, 1, 1) + W(1, 2, 1, kick=True) + REMAP(0b10) + SW + REMAP(0b01) + KICK(0, True) + SETTLE_W,
 'publish-no-kick-switch': hdr(2, 1, True, qs=1) + W(0, 11, 2, 0x14) + W(0, 13, 2, 0x18) + SW + SW + SW + R(0, 11, 4) + SAME + SW + SETTLE,
}
os.makedirs(out, exist_ok=True)
for n, b in seeds.items():
    open(os.path.join(out, n), 'wb').write(b)
print(len(seeds), 'seeds')
