#!/usr/bin/env python3
"""Parse the log of scripts/bench-guest (guest output relayed by scripts/nested)
and print a table of IOPS / mean latency / p99 latency per VMM and job, the
vblk/QEMU ratios, and the final line
    BENCH guest qd32_ratio=<r> qd1_ratio=<r>
Usage: bench-report.py LOG [--json OUT]"""
import json
import re
import statistics
import sys

BASE = "qemu"
PRIMARY = "vblk-dp-on"   # the VMM whose ratio goes on the BENCH line


def parse(path):
    runs = {}      # vmm -> {job: metrics}
    boots = {}     # vmm -> secs
    status = {}    # vmm -> (rc, secs)
    order = []
    begins = {}    # vmm -> job runs started (rounds)
    vmm = None
    job = None
    buf = None
    with open(path, errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\r\n")
            if buf is not None:
                if "===VBLK-FIO-JSON-END===" in line:
                    pre = line.split("===VBLK-FIO-JSON-END===")[0]
                    buf.append(pre)
                    try:
                        runs.setdefault(vmm, {}).setdefault(job, []).append(
                            metrics(json.loads("\n".join(buf))))
                    except ValueError as e:
                        print(f"warning: bad JSON for {vmm}/{job}: {e}", file=sys.stderr)
                    buf = None
                else:
                    buf.append(line)
                continue
            m = re.search(r"BENCH-BOOT name=(\S+) rc=(\d+) secs=([\d.]+)", line)
            if m:
                boots[m.group(1)] = (int(m.group(2)), float(m.group(3)))
                continue
            m = re.search(r"BENCH-VMM-BEGIN name=(\S+)", line)
            if m:
                vmm = m.group(1)
                begins[vmm] = begins.get(vmm, 0) + 1
                if vmm not in order:
                    order.append(vmm)
                continue
            m = re.search(r"BENCH-VMM-END name=(\S+)(?: round=\d+)? rc=(\d+) secs=([\d.]+)", line)
            if m:
                status.setdefault(m.group(1), []).append((int(m.group(2)), float(m.group(3))))
                continue
            m = re.search(r"VBLK-FIO-JOB name=(\S+)", line)
            if m:
                job = m.group(1)
                continue
            if "===VBLK-FIO-JSON-BEGIN===" in line:
                buf = []
    # median over rounds of each metric; keep the spread of IOPS
    agg = {}
    for v, js in runs.items():
        for j, ms in js.items():
            a = {k: statistics.median(m[k] for m in ms) for k in ("iops", "mean_us", "p99_us")}
            a["n"] = len(ms)
            a["iops_min"] = min(m["iops"] for m in ms)
            a["iops_max"] = max(m["iops"] for m in ms)
            a["rounds"] = begins.get(v, len(ms))
            agg.setdefault(v, {})[j] = a
    return order, agg, boots, status


def metrics(doc):
    """IOPS (read+write), mean total (submission+completion)+submission latency and p99 clat, in us."""
    jobs = doc["jobs"]
    bad = [j.get("jobname") for j in jobs if j.get("error")]
    if bad:
        raise ValueError(f"fio reported an error for {bad}")
    iops = 0.0
    lat_sum = 0.0
    n = 0
    p99 = 0.0
    for j in jobs:
        for d in ("read", "write"):
            s = j[d]
            if s["total_ios"] == 0 and s["iops"] == 0:
                continue
            iops += s["iops"]
            lat = s["lat_ns"]
            lat_sum += lat["mean"] * lat["N"]
            n += lat["N"]
            pct = s["clat_ns"].get("percentile", {})
            p99 = max(p99, pct.get("99.000000", 0.0))
    return {"iops": iops, "mean_us": (lat_sum / n / 1000.0) if n else 0.0, "p99_us": p99 / 1000.0}


def fmt_ratio(a, b):
    if a is None or b is None or b == 0:
        return "na"
    return f"{a / b:.2f}"


def main():
    path = sys.argv[1]
    order, runs, boots, status = parse(path)
    jobs = []
    for v in order:
        for j in runs.get(v, {}):
            if j not in jobs:
                jobs.append(j)
    print()
    print(f"{'vmm':<13} {'job':<22} {'IOPS':>10} {'mean lat us':>12} {'p99 lat us':>11}  {'rounds (IOPS min-max)'}")
    print("-" * 96)
    for v in order:
        for j in jobs:
            m = runs.get(v, {}).get(j)
            if m:
                print(f"{v:<13} {j:<22} {m['iops']:>10.0f} {m['mean_us']:>12.1f} {m['p99_us']:>11.1f}"
                      f"  {m['n']} ({m['iops_min']:.0f}-{m['iops_max']:.0f})")
            else:
                print(f"{v:<13} {j:<22} {'(no result)':>10}")
    short = [(v, j, m) for v in order for j, m in runs.get(v, {}).items() if m["n"] < m["rounds"]]
    for v, j, m in short:
        print(f"warning: {v} {j}: {m['rounds'] - m['n']} of {m['rounds']} rounds gave no result"
              " (the guest ended or fio failed before this job: see the log); the figure is of the rest")
    print()
    for v in order:
        b = boots.get(v)
        st = status.get(v, [])
        print(f"{v:<13} boot-only run {b[1] if b else float('nan'):.1f} s (rc {b[0] if b else '?'}),"
              f" job runs " + ", ".join(f"{x[1]:.1f} s (rc {x[0]})" for x in st))
    others = [v for v in order if v != BASE]
    if BASE in runs and others:
        print()
        print("ratios vs qemu (IOPS ratio; latency ratio: lower is better)")
        for v in others:
            for j in jobs:
                a = runs.get(v, {}).get(j)
                b = runs[BASE].get(j)
                print(f"  {v:<13} {j:<22} iops x{fmt_ratio(a and a['iops'], b and b['iops'])}"
                      f"  mean-lat x{fmt_ratio(a and a['mean_us'], b and b['mean_us'])}")
    out = {"order": order, "runs": runs, "boots": boots, "status": status}
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            json.dump(out, f, indent=1)

    def ratio(job):
        a = runs.get(PRIMARY, {}).get(job)
        b = runs.get(BASE, {}).get(job)
        return fmt_ratio(a and a["iops"], b and b["iops"])
    print()
    def vu_ratio(job):
        a = runs.get("vu-vblk", {}).get(job)
        b = runs.get("vu-qsd", {}).get(job)
        return fmt_ratio(a and a["iops"], b and b["iops"])
    vu = ""
    if "vu-vblk" in runs and "vu-qsd" in runs:
        vu = f" vu_qd32_ratio={vu_ratio('randread-4k-qd32')} vu_qd1_ratio={vu_ratio('randread-4k-qd1')}"
    print(f"BENCH guest qd32_ratio={ratio('randread-4k-qd32')} qd1_ratio={ratio('randread-4k-qd1')}{vu}")
    ok = (BASE in runs or "vu" in vu) and all(st and all(x[0] == 0 for x in st) for st in (status.get(v) for v in order))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
