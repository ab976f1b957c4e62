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
    l1 = {}        # vmm -> {round: {key: delta}} (BENCH-L1STAT; round 0 = boot only)
    gave = set()   # (vmm, round) whose job runs gave at least one fio result
    facts = {}     # vmm -> {"cpu": ..., "vda": ...} (the boot-only run's VBLK-INFO lines)
    gst = {}       # vmm -> {job: [delta of the guest's VBLK-STAT counters around one run of it]}
    before = None
    rnd = 0
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
                        gave.add((vmm, rnd))
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
            m = re.search(r"BENCH-FACT name=(\S+) VBLK-INFO (cpu|vda) (.*)", line)
            if m:
                facts.setdefault(m.group(1), {})[m.group(2)] = m.group(3).strip()
                continue
            m = re.search(r"VBLK-STAT name=(\S+) phase=(before|after)((?: \w+=[\d.]+)*)", line)
            if m:
                d = {k: float(v) for k, v in (kv.split("=") for kv in m.group(3).split())}
                if m.group(2) == "before":
                    before = (vmm, m.group(1), d)
                elif before and before[:2] == (vmm, m.group(1)):
                    gst.setdefault(vmm, {}).setdefault(m.group(1), []).append(
                        {k: d[k] - before[2].get(k, 0.0) for k in d})
                    before = None
                continue
            m = re.search(r"BENCH-L1STAT name=(\S+) round=(\d+)((?: \w+=-?\d+)*)", line)
            if m:
                l1.setdefault(m.group(1), {})[int(m.group(2))] = {
                    k: int(v) for k, v in (kv.split("=") for kv in m.group(3).split())}
                continue
            m = re.search(r"BENCH-VMM-BEGIN name=(\S+)(?: round=(\d+))?", line)
            if m:
                vmm = m.group(1)
                rnd = int(m.group(2) or 0)
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
    l1 = {v: {r: d for r, d in rs.items() if r == 0 or (v, r) in gave} for v, rs in l1.items()}
    return order, agg, boots, status, l1, facts, gst


GUEST_CPU = ("usr", "sys", "irq", "sirq", "idl", "stl")


def guest_table(order, jobs, agg, gst):
    """The guest's own use of its time around each job (VBLK-STAT): jiffies
    (USER_HZ 100) of each kind over the job's wall time, per request at the
    job's median IOPS; context switches and interrupts per request. Medians
    over the rounds that printed both lines."""
    rows = []
    for v in order:
        for j in jobs:
            ds = [d for d in gst.get(v, {}).get(j, []) if d.get("up", 0) > 0]
            iops = agg.get(v, {}).get(j, {}).get("iops", 0)
            if not ds or iops <= 0:
                continue
            per = []
            for d in ds:
                reqs = iops * d["up"]
                x = {k: d.get(k, 0.0) * 10000.0 / reqs for k in GUEST_CPU}
                x["idl"] += d.get("iow", 0.0) * 10000.0 / reqs
                x.update({k: d.get(k, 0.0) / reqs for k in ("ctxt", "intr", "loc", "res", "cal")})
                per.append(x)
            rows.append((v, j, len(per), {k: statistics.median(p[k] for p in per) for k in per[0]}))
    if not rows:
        return
    print()
    print("The guest's own time per request (its /proc/stat around each job, over the job's wall time at")
    print("its median IOPS; us, all guest CPUs; idle includes iowait), and its context switches,")
    print("interrupts, local timer ticks, reschedule and call-function IPIs per request (medians)")
    print(f"{'vmm':<13} {'job':<22} {'n':>2} " + " ".join(f"{k:>6}" for k in GUEST_CPU)
          + f" {'ctxsw':>6} {'intr':>6} {'timer':>6} {'resched':>7} {'call':>6}")
    for v, j, n, m in rows:
        print(f"{v:<13} {j:<22} {n:>2} " + " ".join(f"{m[k]:>6.0f}" for k in GUEST_CPU)
              + f" {m['ctxt']:>6.2f} {m['intr']:>6.2f} {m['loc']:>6.3f} {m['res']:>7.3f} {m['cal']:>6.3f}")


def guest_view(order, facts):
    """What each guest saw of its machine: CPU flags and PV features, the
    disk's queue limits. A difference is a reason for a gap that is not the
    device path's."""
    seen = [(v, facts[v]) for v in order if v in facts]
    if not seen:
        return
    print()
    print("what each guest saw (its boot-only run: CPU flags count:hash, PV features; the disk)")
    for v, f in seen:
        print(f"  {v:<13} cpu {f.get('cpu', '(not printed)')}")
        print(f"  {'':<13} vda {f.get('vda', '(not printed)')}")
    for key in ("cpu", "vda"):
        vals = {f.get(key) for _, f in seen if f.get(key)}
        if len(vals) > 1:
            print(f"note: the guests did not see the same {'CPU' if key == 'cpu' else 'disk'}"
                  " (above): compare them before reading the ratios as the device path's")


# KVM exit codes by isa (1 VMX, 2 SVM), for the --trace-exits table
EXIT_NAMES = {
    1: {0: "nmi", 1: "extint", 2: "triple", 7: "irq_window", 10: "cpuid", 12: "hlt",
        28: "cr", 30: "io", 31: "rdmsr", 32: "wrmsr", 44: "apic_access", 45: "eoi",
        48: "ept_viol", 49: "ept_misc", 52: "preempt_tmr", 56: "apic_write"},
    2: {0x60: "intr", 0x61: "nmi", 0x64: "vintr", 0x65: "cr0_sel_wr", 0x72: "cpuid", 0x73: "rsm",
        0x74: "iret", 0x77: "pause", 0x78: "hlt", 0x7b: "io", 0x7c: "msr", 0x7f: "shutdown",
        0x81: "vmmcall", 0x89: "wbinvd", 0x400: "npf", 0x401: "avic_ipi", 0x402: "avic_noaccel",
        **{c: f"rd_cr{c}" for c in range(0x10)}, **{0x10 + c: f"wr_cr{c}" for c in range(0x10)},
        **{0x20 + c: f"rd_dr{c}" for c in range(0x10)}, **{0x30 + c: f"wr_dr{c}" for c in range(0x10)},
        **{0x40 + c: f"exc{c}" for c in range(0x20)}},
}


def exit_name(key):
    _, isa, code = key.split("_")
    return EXIT_NAMES.get(int(isa), {}).get(int(code), f"{int(code):#x}")


def l1_table(order, l1):
    """L1's cost per backing-disk request, from the job runs' counters minus
    the boot-only run's (so the boot's own work drops out); medians over
    rounds that gave a fio result. cpu = user+sys+irq jiffies (USER_HZ 100,
    guest time included in user) over disk requests."""
    rows = []
    for v in order:
        rs = l1.get(v, {})
        boot = rs.get(0)
        per = []
        for r, d in sorted(rs.items()):
            if r == 0 or boot is None:
                continue
            # levels (memory) as they were; counters minus the boot-only run
            x = {k: d.get(k, 0) - (0 if k.startswith(("rss_", "thp_")) else boot.get(k, 0))
                 for k in d}
            ios = x.get("disk_rd", 0) + x.get("disk_wr", 0)
            if ios <= 0:
                continue
            def us(*keys):  # jiffies (USER_HZ 100) per request, in us
                return sum(x.get(k, 0) for k in keys) * 10000.0 / ios

            def per_req(key):
                return x.get(key, 0) / ios
            per.append({
                "ios": ios,
                "cpu_us": us("cpu_user", "cpu_sys", "cpu_irq"),
                "user_us": us("cpu_user"),
                "sys_us": us("cpu_sys"),
                "idle_us": us("cpu_idle", "cpu_iowait"),
                "exits": per_req("kvm_exits"),
                "io": per_req("kvm_io_exits"),
                "extirq": per_req("kvm_irq_exits"),
                "halts": per_req("kvm_halt_exits"),
                "inj": per_req("kvm_irq_injections"),
                "ctxt": per_req("ctxt"),
                "disk_us": (x.get("disk_rd_ticks", 0) + x.get("disk_wr_ticks", 0)) * 1000.0 / ios,
            })
            # the VMM's threads (sampled each second, so counted from 0)
            per[-1].update({k: us(k) for k in x if k.startswith(("thr_", "gst_"))})
            # and per thread: run-queue wait (us) and time slices, per request
            per[-1].update({k: per_req(k) for k in x if k.startswith(("rqw_", "slc_", "vcs_", "l1irq_"))})
            # exits by reason (--trace-exits), per request
            per[-1].update({k: per_req(k) for k in x if k.startswith("exitr_")})
            per[-1].update({k: float(x[k]) for k in x if k.startswith(("rss_", "thp_", "vm_"))})
            # vblk's dataplane counters (QMP), per request the device saw
            dreq = x.get("dp_requests", 0)
            if dreq > 0:
                per[-1]["dp_requests"] = dreq
                per[-1].update({k + "_per_req": x.get(k, 0) / dreq for k in (
                    "dp_kicks", "dp_interrupts", "dp_interrupts_suppressed", "dp_batches",
                    "dp_used_publishes", "dp_submit_calls", "dp_bounces", "dp_avail_polls",
                    "dp_completion_events", "dp_completion_polls", "dp_loop_iterations",
                    "dp_blocking_waits", "dp_epoll_waits", "dp_poll_successes", "dp_complete_holds")})
        if per:
            keys = sorted({k for p in per for k in p})
            rows.append((v, len(per), {k: statistics.median(p.get(k, 0.0) for p in per) for k in keys}))
    if not rows:
        return
    print()
    print("L1's cost per backing-disk request (job runs minus the boot-only run, medians over rounds;")
    print("cpu/user/sys/idle: L1 CPU time in us per request over both L1 vCPUs, guest time in user;")
    print("exits (all), pio (port I/O), extint (host interrupts), halts, inject (interrupts injected):")
    print("L1 KVM's counters per request, sampled each second; ctxsw: L1's context switches per request;")
    print("disk_us: the backing disk's mean latency in L1)")
    print(f"{'vmm':<13} {'n':>2} {'requests':>9} {'cpu':>7} {'user':>7} {'sys':>7} {'idle':>7}"
          f" {'exits':>6} {'pio':>6} {'extint':>6} {'halts':>6} {'inject':>6} {'ctxsw':>6} {'disk_us':>7}")
    for v, n, m in rows:
        print(f"{v:<13} {n:>2} {m['ios']:>9.0f} {m['cpu_us']:>7.0f} {m['user_us']:>7.0f} {m['sys_us']:>7.0f}"
              f" {m['idle_us']:>7.0f} {m['exits']:>6.2f} {m['io']:>6.2f} {m['extirq']:>6.2f} {m['halts']:>6.2f} {m['inj']:>6.2f}"
              f" {m['ctxt']:>6.2f} {m['disk_us']:>7.0f}")
    print()
    print("The VMM's threads in L1: CPU us per request (job run minus boot-only run, medians;")
    print("'guest' is the part of a vCPU thread's time spent running the guest; 'waited' its us")
    print("ready but waiting for an L1 CPU (schedstat), 'slices' the times it was put on a CPU,")
    print("'sleeps' the times it went to sleep (voluntary context switches))")
    for v, n, m in rows:
        thr = sorted((k[4:], val) for k, val in m.items() if k.startswith("thr_") and val >= 1)
        parts = []
        for name, val in sorted(thr, key=lambda t: -t[1]):
            g = m.get("gst_" + name, 0.0)
            extra = ([f"guest {g:.0f}"] if g >= 1 else []) + (
                [f"waited {m['rqw_' + name]:.0f}", f"slices {m.get('slc_' + name, 0.0):.2f}"]
                if "rqw_" + name in m else []) + (
                [f"sleeps {m['vcs_' + name]:.2f}"] if "vcs_" + name in m else [])
            parts.append(f"{name} {val:.0f}" + (f" ({', '.join(extra)})" if extra else ""))
        print(f"  {v:<13} " + (", ".join(parts) if parts else "(no thread figures)"))
    cpus = sorted({k.rsplit("_cpu", 1)[1] for _, _, m in rows for k in m if k.startswith("l1irq_")}, key=int)
    if cpus:
        kinds = ("loc", "res", "cal", "tlb", "dev")
        print()
        print("L1's interrupts per request by CPU (job run minus boot-only run, medians): local timer,")
        print("reschedule and function-call IPIs, TLB shootdowns, device interrupts; with NAME@split the")
        print("vCPU thread is on CPU 0, where each of them costs the running L2 an exit")
        print(f"{'vmm':<17} " + " | ".join(" ".join(f"{k + c:>6}" for k in kinds) for c in cpus))
        for v, n, m in rows:
            print(f"{v:<17} " + " | ".join(" ".join(f"{m.get(f'l1irq_{k}_cpu{c}', 0.0):>6.3f}" for k in kinds)
                                           for c in cpus))
    vmk = ("thp_collapse_alloc", "thp_split_pmd", "pgmigrate_success", "compact_migrate_scanned",
           "numa_pte_updates", "thp_fault_alloc")
    if any(f"vm_{k}" in m for _, _, m in rows for k in vmk):
        print()
        print("L1's memory management during a job run (counts per run, job run minus boot-only run,")
        print("medians): each collapsed, split or migrated page under a running guest invalidates")
        print("its nested page table entries")
        print(f"{'vmm':<17} " + " ".join(f"{k:>23}" for k in vmk))
        for v, n, m in rows:
            print(f"{v:<17} " + " ".join(f"{m.get('vm_' + k, 0.0):>23.0f}" for k in vmk))
    mem = [(v, m) for v, _, m in rows if any(k.startswith("rss_") for k in m)]
    if mem:
        print()
        print("The VMM processes' memory at the end of the job run (MiB resident, of it in transparent")
        print("huge pages; medians): guest RAM on 4 KiB pages makes every L2 TLB miss a longer nested walk")
        for v, m in mem:
            procs = sorted(k[4:] for k in m if k.startswith("rss_"))
            print(f"  {v:<13} " + ", ".join(
                f"{c} {m['rss_' + c] / 1024:.0f} ({m.get('thp_' + c, 0) / 1024:.0f} in THP)" for c in procs))
    dprows = [(v, m) for v, _, m in rows if m.get("dp_requests", 0) > 0]
    if dprows:
        print()
        print("vblk's dataplane counters (QMP x-query-virtio-blk-dataplane, sampled each second; job run")
        print("minus boot-only run, medians), per request the device saw: kicks (guest notifications")
        print("taken), irqs (interrupts sent), suppressed (interrupts EVENT_IDX spared), publishes of the")
        print("used ring, io_submit/io_uring_enter calls, bounced requests; req/pass: requests per ring pass")
        print(f"{'vmm':<13} {'requests':>9} {'req/pass':>8} {'kicks':>6} {'irqs':>6} {'suppr':>6}"
              f" {'publish':>7} {'submits':>7} {'bounces':>7}")
        for v, m in dprows:
            b = m["dp_batches_per_req"]
            print(f"{v:<13} {m['dp_requests']:>9.0f} {(1 / b if b else 0):>8.2f} {m['dp_kicks_per_req']:>6.3f}"
                  f" {m['dp_interrupts_per_req']:>6.3f} {m['dp_interrupts_suppressed_per_req']:>6.3f}"
                  f" {m['dp_used_publishes_per_req']:>7.3f} {m['dp_submit_calls_per_req']:>7.3f}"
                  f" {m['dp_bounces_per_req']:>7.3f}")
        if any(m.get("dp_loop_iterations_per_req", 0) > 0 for _, m in dprows):
            print()
            print("How the dataplane's iothread learned of work, per request (same runs): sleeps (epoll_wait")
            print("calls that blocked), epolls (all epoll_wait calls), loop iterations, polls that found work;")
            print("kick ev / avail poll: queue passes started by a kick's eventfd or by polling the avail ring;")
            print("cmpl ev / cmpl poll: completions learned from the IOQ's eventfd or by polling its ring;")
            print("holds: passes that left their completions to the completion hold's timer")
            print(f"{'vmm':<13} {'sleeps':>6} {'epolls':>6} {'iters':>6} {'polls':>6} {'kick ev':>7}"
                  f" {'avail poll':>10} {'cmpl ev':>7} {'cmpl poll':>9} {'holds':>6}")
            for v, m in dprows:
                g = lambda k: m.get(k + "_per_req", 0.0)
                print(f"{v:<13} {g('dp_blocking_waits'):>6.3f} {g('dp_epoll_waits'):>6.3f}"
                      f" {g('dp_loop_iterations'):>6.3f} {g('dp_poll_successes'):>6.3f} {g('dp_kicks'):>7.3f}"
                      f" {g('dp_avail_polls'):>10.3f} {g('dp_completion_events'):>7.3f} {g('dp_completion_polls'):>9.3f}"
                      f" {g('dp_complete_holds'):>6.3f}")
    codes = sorted({k for _, _, m in rows for k in m if k.startswith("exitr_")},
                   key=lambda k: -max(m.get(k, 0.0) for _, _, m in rows))
    if codes:
        print()
        print("L1 KVM's exits by reason per request (--trace-exits; every VM in L1 while the VMM ran,")
        print("job run minus boot-only run, medians; reasons under 0.01 a request left out)")
        codes = [k for k in codes if max(m.get(k, 0.0) for _, _, m in rows) >= 0.01]
        print(f"{'vmm':<13} " + " ".join(f"{exit_name(k):>11}" for k in codes))
        for v, n, m in rows:
            print(f"{v:<13} " + " ".join(f"{m.get(k, 0.0):>11.3f}" for k in codes))


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
    order, runs, boots, status, l1, facts, gst = parse(path)
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
    guest_view(order, facts)
    guest_table(order, jobs, runs, gst)
    l1_table(order, l1)
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
