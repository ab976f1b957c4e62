#!/usr/bin/env python3
"""State of a silent L1 (scripts/nested --silence), through its QEMU's QMP socket.

    l1-probe.py SOCKET state   print run state, each vCPU's registers and local APIC
    l1-probe.py SOCKET nmi     inject an NMI into every vCPU of L1
    l1-probe.py SOCKET key     press and release shift on L1's PS/2 keyboard

Used by scripts/nested when the command in L1 printed nothing for --silence
seconds: first the state (whether L1's vCPUs are halted, with interrupts
enabled, and whether its APIC timer is armed or an interrupt sits in IRR
undelivered), then an NMI, which wakes a halted vCPU; then a key press, an
external interrupt through the IOAPIC, which makes the emulated local APIC
re-evaluate what it has pending (an NMI does not: on 2026-12-03 an L1 sat
halted with IF=1 and vectors 236, 251, 253 in IRR, and stayed so after the
NMI). Whether output resumes afterwards tells a lost wakeup from a dead L1. Prints to stdout; exit status 1
when the socket does not answer.
"""
import json
import socket
import sys


class Qmp:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(20)
        self.s.connect(path)
        self.f = self.s.makefile("rw")
        json.loads(self.f.readline())  # greeting
        self.cmd("qmp_capabilities")

    def cmd(self, name, **args):
        self.f.write(json.dumps({"execute": name, "arguments": args}) + "\n")
        self.f.flush()
        while True:
            r = json.loads(self.f.readline())
            if "event" in r:
                continue
            if "error" in r:
                return "error: " + r["error"].get("desc", "?")
            return r["return"]

    def hmp(self, line):
        return self.cmd("human-monitor-command", **{"command-line": line})


def keep(text, words):
    """The lines of an HMP dump that say whether a vCPU can be woken."""
    return [l for l in text.splitlines() if any(w in l for w in words)]


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("state", "nmi", "key"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    try:
        q = Qmp(sys.argv[1])
        if sys.argv[2] == "nmi":
            r = q.cmd("inject-nmi")
            print("L1 probe: inject-nmi: %s" % ("ok" if r == {} else r))
            return 0
        if sys.argv[2] == "key":
            r = q.cmd("send-key", keys=[{"type": "qcode", "data": "shift"}])
            print("L1 probe: send-key shift: %s" % ("ok" if r == {} else r))
            return 0
        st = q.cmd("query-status")
        print("L1 probe: status %s" % (st.get("status") if isinstance(st, dict) else st))
        cpus = q.cmd("query-cpus-fast")
        for c in cpus if isinstance(cpus, list) else []:
            idx = c.get("cpu-index", 0)
            q.hmp("cpu %d" % idx)
            regs = keep(q.hmp("info registers"), ("RIP=", "EFL=", "CR0=", "HLT=", "GIF="))
            apic = keep(q.hmp("info lapic"), ("timer", "LVT0", "LVTT", "ISR", "IRR", "PPR", "Timer", "TSC"))
            for l in regs + apic:
                print("L1 probe: vCPU %d: %s" % (idx, l.strip()))
        return 0
    except (OSError, ValueError) as e:
        print("L1 probe: no answer on %s: %s" % (sys.argv[1], e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
