#!/usr/bin/env python3
"""x-blockdev-remap-vqs over QMP (tests/devices/qmp-blk-helper.c, no KVM):
every invalid mapping is a GenericError with QEMU's one-line message and
changes nothing; a valid one is applied (the device is not started by a
driver here, so the mapping is stored for its start); hostile arguments
never kill the monitor.

usage: qmp-remap.py QMP-BLK-HELPER
"""
import json
import os
import subprocess
import sys
import tempfile


class Peer:
    def __init__(self, argv, env):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)
        json.loads(self.p.stdout.readline())  # greeting

    def cmd(self, name, args=None):
        msg = {"execute": name}
        if args is not None:
            msg["arguments"] = args
        self.p.stdin.write(json.dumps(msg) + "\n")
        self.p.stdin.flush()
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("%s: connection closed" % name)
            r = json.loads(line)
            if "return" in r or "error" in r:
                return r

    def close(self):
        self.cmd("quit")
        self.p.wait(timeout=10)
        return self.p.returncode


def main():
    helper = sys.argv[1]
    failures = []
    with tempfile.NamedTemporaryFile(dir="/var/tmp", prefix="vblk-remap-") as img:
        img.truncate(1 << 20)
        env = dict(os.environ, QMP_BLK_NUM_QUEUES="4", QMP_BLK_IOTHREADS="t0,t1")
        p = Peer([helper, "drive", "id=d0,if=none,file=%s,format=raw" % img.name, "vd0", "t0"],
                 env)
        p.cmd("qmp_capabilities")

        def remap(mapping, dev="vd0"):
            return p.cmd("x-blockdev-remap-vqs", {"id": dev, "iothread-vq-mapping": mapping})

        def bad(mapping, want, cls="GenericError", dev="vd0"):
            r = remap(mapping, dev)
            if "error" not in r:
                failures.append("%r: accepted, expected %r" % (mapping, want))
                return
            e = r["error"]
            if e["class"] != cls or want not in e["desc"] or "\n" in e["desc"]:
                failures.append("%r: %r, expected %s %r" % (mapping, e, cls, want))

        bad([{"iothread": "t9"}], 'IOThread "t9" object does not exist')
        bad([{"iothread": "t0"}, {"iothread": "t0"}],
            'duplicate IOThread name "t0" in iothread-vq-mapping')
        bad([{"iothread": "t0", "vqs": [0, 1, 2, 3]}, {"iothread": "t1"}],
            "either all items in iothread-vq-mapping must have vqs or none of them must have it")
        bad([{"iothread": "t0", "vqs": [0, 4]}, {"iothread": "t1", "vqs": [1, 2, 3]}],
            'vq index 4 for IOThread "t0" must be less than num_queues 4 in iothread-vq-mapping')
        bad([{"iothread": "t0", "vqs": [0, 1]}, {"iothread": "t1", "vqs": [1, 2, 3]}],
            'cannot assign vq 1 to IOThread "t1" because it is already assigned')
        bad([{"iothread": "t0", "vqs": [0, 1]}, {"iothread": "t1", "vqs": [3]}],
            "missing vq 2 IOThread assignment in iothread-vq-mapping")
        bad([], "iothread-vq-mapping is empty")
        bad([{"vqs": [0]}], "Parameter 'iothread-vq-mapping[0].iothread' is missing")
        bad([{"iothread": "t0", "vqs": [-1]}],
            "Parameter 'iothread-vq-mapping[0].vqs[0]' expects uint16_t")
        bad([{"iothread": "t0", "what": 1}], "Parameter 'iothread-vq-mapping[0].what' is unexpected")
        bad([{"iothread": "t0"}], "Device 'nope' not found", cls="DeviceNotFound", dev="nope")
        # hostile shapes: an error each, and the monitor stays
        for m in (None, 3, "t0", [None], [[]], [{"iothread": None}], [{"iothread": "t0", "vqs": 0}],
                  [{"iothread": "t0", "vqs": [[1]]}], [{"iothread": "t0", "vqs": [0.5]}]):
            r = remap(m)
            if "error" not in r or "\n" in r["error"]["desc"]:
                failures.append("hostile %r: %r" % (m, r))
        r = p.cmd("x-blockdev-remap-vqs", {"id": "vd0"})
        if "error" not in r:
            failures.append("missing iothread-vq-mapping accepted")

        # valid: QEMU's example, then round robin over both, then all on t1
        for m in ([{"iothread": "t0", "vqs": [0, 1]}, {"iothread": "t1", "vqs": [2, 3]}],
                  [{"iothread": "t1"}, {"iothread": "t0"}],
                  [{"iothread": "t1", "vqs": [3, 2, 1, 0]}]):
            r = remap(m)
            if r.get("return") != {}:
                failures.append("%r: %r" % (m, r))
        q = p.cmd("x-query-virtio-blk-dataplane")["return"][0]
        if q["device"] != "vd0" or q["started"] or q["iothreads"] != []:
            failures.append("x-query-virtio-blk-dataplane: %r" % q)
        rc = p.close()
        if rc != 0:
            failures.append("helper exit %d: %s" % (rc, p.p.stderr.read()))
    for f in failures:
        print("FAIL:", f)
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
