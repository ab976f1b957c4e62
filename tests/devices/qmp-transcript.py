#!/usr/bin/env python3
"""QMP transcript: QEMU 7.2 (TCG, -S) and vblk's virtio-blk-pci QMP side
(qmp-blk-helper: the device model without KVM) get the same command sequence;
the replies are compared key by key: the set of keys and the JSON type of
every value (values such as filenames, node names and counters differ
legitimately). Error replies must match in class and text. The differences
that remain are listed in KNOWN with their reason (also in docs/qmp.md);
any other difference fails. Exit 77 (skip) without qemu-system-x86_64.

usage: qmp-transcript.py QMP-BLK-HELPER
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

QEMU = shutil.which("qemu-system-x86_64")

# (command, path, what) -> reason. path is the key path in the reply.
KNOWN = {
    ("query-block", "[0].x-data-plane", "extra"):
        "vblk's own: which path serves the device",
    ("query-iothreads", "", "length"):
        "every vblk device has a thread to switch to (<id>-dataplane), listed as an iothread",
    ("qom-list", "x-data-plane", "extra"):
        "vblk's own runtime-switchable property",
    ("qom-set x-data-plane", "", "reply"):
        "vblk's own property: QEMU has no x-data-plane",
    ("qom-get x-data-plane", "", "reply"):
        "vblk's own property: QEMU has no x-data-plane",
    ("qom-list virtio-backend", "", "members"):
        "the virtio-blk-device child lists only 'type' in vblk",
}


def shape(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "str"
    if v is None:
        return "null"
    if isinstance(v, list):
        return "array"
    return "object"


def compare(a, b, path, out):
    """a: QEMU's value, b: vblk's. Appends (path, what, detail)."""
    if shape(a) != shape(b):
        out.append((path, "type", "%s vs %s" % (shape(a), shape(b))))
        return
    if isinstance(a, dict):
        for k in a:
            if k not in b:
                out.append((path + "." + k if path else k, "missing", ""))
        for k in b:
            if k not in a:
                out.append((path + "." + k if path else k, "extra", ""))
            else:
                compare(a[k], b[k], path + "." + k if path else k, out)
    elif isinstance(a, list):
        if len(a) != len(b):
            out.append((path, "length", "%d vs %d" % (len(a), len(b))))
        for i, (x, y) in enumerate(zip(a, b)):
            compare(x, y, "%s[%d]" % (path, i), out)


class Peer:
    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
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
        try:
            self.cmd("quit")
        except (RuntimeError, BrokenPipeError, ValueError):
            pass
        self.p.wait(timeout=10)


def schema_expand(by, name, depth=0):
    """A SchemaInfo type as a comparable tree (recursion cut at depth 6)."""
    e = by[name]
    m = e["meta-type"]
    if m == "builtin":
        return name
    if m == "array":
        return [schema_expand(by, e["element-type"], depth)]
    if m == "enum":
        return {"enum": e["values"]}
    if m == "alternate" or depth > 6:
        return "..."
    r = {("*" if "default" in x else "") + x["name"]: schema_expand(by, x["type"], depth + 1)
         for x in e.get("members", [])}
    # a union: every variant's members, optional (present for their case only)
    for var in e.get("variants", []):
        sub = schema_expand(by, var["type"], depth + 1)
        if isinstance(sub, dict):
            for k, t in sub.items():
                r.setdefault("*" + k.lstrip("*"), t)
    return r


def schema_compare(q, v, path, out):
    """vblk's type v must be QEMU's q restricted: no member QEMU lacks, every
    mandatory QEMU member present, enum values a subset."""
    if q == "..." or v == "...":
        return
    if isinstance(q, str) or isinstance(v, str):
        if q != v:
            out.append((path, "type", "%s vs %s" % (q, v)))
        return
    if isinstance(q, list) != isinstance(v, list):
        out.append((path, "type", "array vs not"))
        return
    if isinstance(q, list):
        schema_compare(q[0], v[0], path + "[]", out)
        return
    if "enum" in q or "enum" in v:
        if set(v.get("enum", [])) - set(q.get("enum", [])):
            out.append((path, "enum", "values QEMU lacks"))
        return
    for k in v:
        if k not in q and ("*" + k if k[0] != "*" else k[1:]) not in q:
            out.append((path + "." + k.lstrip("*"), "extra", ""))
        elif k in q:
            schema_compare(q[k], v[k], path + "." + k.lstrip("*"), out)
        elif k[0] == "*":
            # vblk may omit what QEMU always sends; the reverse (vblk always
            # sends a member QEMU may omit, e.g. a union's variant) is fine
            out.append((path + "." + k[1:], "optional", "QEMU mandatory, vblk optional"))
        else:
            schema_compare(q["*" + k], v[k], path + "." + k, out)
    for k in q:
        if k[0] != "*" and k not in v and "*" + k not in v:
            out.append((path + "." + k, "missing", ""))


def run(name, qemu_argv, vblk_argv, resize, failures, known_seen):
    q = Peer(qemu_argv)
    v = Peer(vblk_argv)
    seq = []

    def both(label, cmd, args=None, errors_exact=True):
        a, b = q.cmd(cmd, args), v.cmd(cmd, args)
        diffs = []
        if ("error" in a) != ("error" in b):
            diffs.append(("", "reply", "%s vs %s" % (json.dumps(a)[:160], json.dumps(b)[:160])))
        elif "error" in a:
            if errors_exact and a["error"] != b["error"]:
                diffs.append(("", "error", "%s vs %s" % (a["error"], b["error"])))
        else:
            compare(a["return"], b["return"], "", diffs)
        seq.append(label)
        for path, what, detail in diffs:
            reason = KNOWN.get((label, path, what)) or KNOWN.get((cmd, path, what))
            if (not reason and cmd == "query-iothreads" and what == "extra"
                    and path.split(".")[-1].startswith("x-")):
                reason = "vblk's own per-iothread figures (x- members)"
                known_seen.add("query-iothreads: " + reason)
                continue
            line = "%s: %s %s %s %s" % (name, label, path or "-", what, detail)
            if reason:
                known_seen.add("%s: %s" % (label if (label, path, what) in KNOWN else cmd, reason))
            else:
                failures.append(line)
        return a, b

    both("qmp_capabilities", "qmp_capabilities")
    both("query-status", "query-status")
    qb0, vb0 = both("query-block", "query-block")
    if name.startswith("nbd"):
        # Values too: the URI QEMU prints for the node, the driver, the size.
        for keys in (("file",), ("drv",), ("image", "filename"),
                     ("image", "format"), ("image", "virtual-size")):
            x, y = qb0["return"][0]["inserted"], vb0["return"][0]["inserted"]
            for k in keys:
                x, y = x.get(k), y.get(k)
            if x != y:
                failures.append("%s: query-block %s: %r vs %r" % (name, ".".join(keys), x, y))
    both("query-blockstats", "query-blockstats")
    both("query-iothreads", "query-iothreads")
    dev = "/machine/peripheral/vd0"
    ql = q.cmd("qom-list", {"path": dev})["return"]
    vl = v.cmd("qom-list", {"path": dev})["return"]
    qs = {(p["name"], p["type"]) for p in ql}
    vs = {(p["name"], p["type"]) for p in vl}
    for n, t in sorted(qs - vs):
        failures.append("%s: qom-list %s (%s) missing" % (name, n, t))
    for n, t in sorted(vs - qs):
        if ("qom-list", n, "extra") in KNOWN:
            known_seen.add("qom-list: " + KNOWN[("qom-list", n, "extra")])
        else:
            failures.append("%s: qom-list %s (%s) extra" % (name, n, t))
    # Every property: qom-get's JSON type, and qom-set of the value read back
    # (QEMU's after-realize refusals, "not writable", the no-ops) exactly.
    for p in ql:
        if p["type"].startswith("child<"):
            continue
        a, _ = both("qom-get " + p["name"], "qom-get", {"path": dev, "property": p["name"]})
        val = a.get("return", 0)
        if p["name"] == "drive":
            val = "nope"  # QEMU 7.2 hangs when a realized device gets its own node again
        both("qom-set " + p["name"], "qom-set", {"path": dev, "property": p["name"], "value": val})
    qb = q.cmd("qom-list", {"path": dev + "/virtio-backend"})["return"]
    vb = v.cmd("qom-list", {"path": dev + "/virtio-backend"})["return"]
    if len(qb) != len(vb):
        known_seen.add("qom-list virtio-backend: " + KNOWN[("qom-list virtio-backend", "", "members")])
    both("qom-set nope", "qom-set", {"path": dev, "property": "nope", "value": 1})
    both("qom-get nope", "qom-get", {"path": dev, "property": "nope"})
    both("qom-get bad path", "qom-get", {"path": "/machine/peripheral/nope", "property": "type"})
    both("block_resize no device", "block_resize", {"device": "nope", "size": 1 << 20})
    both("block_resize no node", "block_resize", {"node-name": "nope", "size": 1 << 20})
    both("block_set_io_throttle no device", "block_set_io_throttle",
         {"device": "nope", "bps": 0, "bps_rd": 0, "bps_wr": 0, "iops": 0, "iops_rd": 0,
          "iops_wr": 0})
    both("block_set_io_throttle both", "block_set_io_throttle",
         {"device": "x", "id": "vd0", "bps": 0, "bps_rd": 0, "bps_wr": 0, "iops": 0,
          "iops_rd": 0, "iops_wr": 0})
    both("block_set_io_throttle", "block_set_io_throttle",
         {"id": "vd0/virtio-backend", "bps": 1000000, "bps_rd": 0, "bps_wr": 0, "iops": 0, "iops_rd": 0,
          "iops_wr": 500, "iops_wr_max": 1000, "iops_size": 4096})
    both("query-block throttled", "query-block")
    both("block_resize same size", "block_resize", dict(resize, size=64 << 20))

    # query-qmp-schema: every command and event vblk lists must be QEMU's
    # (vblk's own x-/VBLK_ names apart), with QEMU's argument and return types
    # restricted to what vblk sends.
    qsch = {e["name"]: e for e in q.cmd("query-qmp-schema")["return"]}
    vsch = {e["name"]: e for e in v.cmd("query-qmp-schema")["return"]}
    for n, e in vsch.items():
        if e["meta-type"] not in ("command", "event"):
            continue
        if n not in qsch:
            if n.startswith("x-") or n.startswith("VBLK_"):
                known_seen.add("schema %s: vblk's own" % n)
            else:
                failures.append("%s: schema %s: QEMU has no such %s" % (name, n, e["meta-type"]))
            continue
        out = []
        schema_compare(schema_expand(qsch, qsch[n]["arg-type"]),
                       schema_expand(vsch, e["arg-type"]), "arg", out)
        if e["meta-type"] == "command":
            schema_compare(schema_expand(qsch, qsch[n]["ret-type"]),
                           schema_expand(vsch, e["ret-type"]), "ret", out)
        for path, what, detail in out:
            if n == "query-iothreads" and what == "extra" and path.split(".")[-1].startswith("x-"):
                known_seen.add("schema query-iothreads: vblk's own per-iothread figures")
                continue
            if n == "query-block" and path.endswith("x-data-plane"):
                known_seen.add("schema query-block: " + KNOWN[("query-block", "[0].x-data-plane",
                                                                "extra")])
                continue
            failures.append("%s: schema %s %s %s %s" % (name, n, path, what, detail))
    for n in ("query-block", "query-blockstats", "qom-list", "qmp_capabilities", "STOP"):
        if n not in vsch:
            failures.append("%s: schema lacks %s" % (name, n))
    q.close()
    v.close()
    return len(seq)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if not QEMU:
        print("SKIP: qemu-system-x86_64 not installed")
        return 77
    helper = os.path.abspath(sys.argv[1])
    failures, known = [], set()
    with tempfile.TemporaryDirectory() as d:
        img = os.path.join(d, "disk.img")
        with open(img, "wb") as f:
            f.truncate(64 << 20)
        base = [QEMU, "-M", "pc", "-nodefaults", "-S", "-display", "none", "-qmp", "stdio"]
        n = run("drive",
                base + ["-object", "iothread,id=io0",
                        "-drive", "if=none,id=d0,file=%s,format=raw,cache=none,aio=native" % img,
                        "-device", "virtio-blk-pci,drive=d0,id=vd0,iothread=io0"],
                [helper, "drive", "id=d0,file=%s,format=raw,cache=none,aio=native" % img, "vd0",
                 "io0"], {"device": "d0"}, failures, known)
        n += run("blockdev",
                 base + ["-blockdev", "driver=file,filename=%s,node-name=f0" % img,
                         "-blockdev", "driver=raw,file=f0,node-name=n0",
                         "-device", "virtio-blk-pci,drive=n0,id=vd0"],
                 [helper, "blockdev",
                  "driver=raw,node-name=n0,file.driver=file,file.filename=%s,file.node-name=f0"
                  % img, "vd0"], {"node-name": "n0"}, failures, known)
        nconf = 2
        nbdkit = shutil.which("nbdkit")
        if nbdkit:
            # The nbd driver: the same nbdkit export (64 MiB in memory) for both.
            sock = os.path.join(d, "nbd.sock")
            srv = subprocess.Popen([nbdkit, "-f", "-U", sock, "memory", "64M"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                for _ in range(500):
                    if os.path.exists(sock):
                        break
                    time.sleep(0.01)
                uri = "nbd+unix:///exp?socket=%s" % sock
                n += run("nbd-drive",
                         base + ["-drive", "if=none,id=d0,file=%s,format=raw" % uri,
                                 "-device", "virtio-blk-pci,drive=d0,id=vd0"],
                         [helper, "drive", "id=d0,file=%s,format=raw" % uri, "vd0"],
                         {"device": "d0"}, failures, known)
                nbd = "driver=nbd,node-name=n0,server.type=unix,server.path=%s,export=exp" % sock
                n += run("nbd-blockdev",
                         base + ["-blockdev", nbd, "-device", "virtio-blk-pci,drive=n0,id=vd0"],
                         [helper, "blockdev", nbd, "vd0"], {"node-name": "n0"}, failures, known)
                nconf += 2
            finally:
                srv.kill()
                srv.wait()
        else:
            print("nbd configurations skipped: nbdkit not installed")
    print("%d commands compared in %d configurations" % (n, nconf))
    for k in sorted(known):
        print("known difference:", k)
    for f in failures:
        print("DIFFERENCE:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
