# Runs inside scripts/nested (busybox sh in L1, or sh on a hardware-KVM host):
# boots the L2 guest image once per VMM with the same fio jobs on the same
# backing disk ($VBLK_DISK) and prints the guest's output framed by
#   BENCH-VMM-BEGIN name=<vmm> round=<r> ... BENCH-VMM-END name=<vmm> round=<r> rc=<n> secs=<s>
# and a boot-only run per VMM: BENCH-BOOT name=<vmm> rc=<n> secs=<s>.
# Parameters come from the environment (set by scripts/bench-guest in bench.env):
#   BENCH_VMMS (e.g. "qemu vblk-dp-on vblk-dp-off vu-vblk vu-qsd"), BENCH_JOBS (comma list),
#   BENCH_RUNTIME, BENCH_RAMP, BENCH_MEM, BENCH_SMP, BENCH_AIO, BENCH_TIMEOUT, BENCH_ROUNDS.
. ./files/bench.env

now() { read -r t _ </proc/uptime; echo "$t"; }

# L1's counters around each VMM run, to tell where L1's CPU goes per request:
# /proc/stat (jiffies by kind, context switches), the backing disk's
# /sys/block/<dev>/stat, and KVM's own counters (debugfs: exits, halts,
# injections). l1snap prints "key value" lines; l1stat prints the deltas as
#   BENCH-L1STAT name=<vmm> round=<r> key=delta ...   (round 0: the boot-only run)
mount -t debugfs none /sys/kernel/debug 2>/dev/null
l1dev=${VBLK_DISK_DEV:-$VBLK_DISK}; l1dev=${l1dev#/dev/}
# KVM's debugfs totals cover live VMs only (a VM's counts go when it is
# destroyed), so a sampler copies them once a second while the VMM runs and
# l1stat uses the last copy: the last second of a run is not counted.
l1kvm() {
    local p x
    (cd /sys/kernel/debug/kvm 2>/dev/null && awk '{ print "kvm_" FILENAME, $1 }' exits halt_exits \
        halt_successful_poll halt_attempted_poll halt_wakeup irq_injections io_exits mmio_exits \
        irq_exits irq_window_exits request_irq_exits insn_emulation 2>/dev/null)
    # the VMM's and daemon's threads: CPU jiffies (user+system; guest time, which
    # is part of user, also apart), summed by thread name
    # (one pidof and one cat a second: a loop over /proc would fork per process)
    p=$(pidof qemu-system-x86_64 vblk vblk-storage-daemon qemu-storage-daemon 2>/dev/null)
    [ -n "$p" ] || return 0
    # each VMM process's resident memory and the part in transparent huge
    # pages (kB; levels, not counters): guest RAM on 4 KiB pages costs L2
    # far more nested page walks than on 2 MiB ones
    for x in $p; do
        c=$(cat "/proc/$x/comm" 2>/dev/null | tr -c 'A-Za-z0-9\n' '_')
        awk -v c="$c" '/^Rss:/ { print "rss_" c, $2 } /^AnonHugePages:/ { print "thp_" c, $2 }' \
            "/proc/$x/smaps_rollup" 2>/dev/null
    done
    # per thread: its stat line and its schedstat (ns on a CPU, ns waiting on a
    # run queue, time slices), read with builtins (no fork per thread), and its
    # voluntary context switches (the times it went to sleep; one grep a process)
    for x in $p; do
        grep -H '^voluntary_ctxt_switches' "/proc/$x/task/"*/status 2>/dev/null |
            awk -F'[/:\t ]+' '{ print "@V", $5, $NF }'
        for t in "/proc/$x/task/"*; do
            read -r st 2>/dev/null <"$t/stat" || continue
            read -r ss 2>/dev/null <"$t/schedstat" || ss="0 0 0"
            echo "$st @@ $ss"
        done
    done | awk '$1 == "@V" { vcs[$2] = $3; next }
                { h = index($0, " @@ "); s = substr($0, 1, h - 1); split(substr($0, h + 4), q, " ")
                  i = index(s, "("); j = 0
                  for (k = length(s); k > 0; k--) if (substr(s, k, 1) == ")") { j = k; break }
                  c = substr(s, i + 1, j - i - 1); gsub(/[^A-Za-z0-9]/, "_", c)
                  n = split(substr(s, j + 2), f, " ")
                  t["thr_" c] += f[12] + f[13]; g["gst_" c] += f[41]
                  w["rqw_" c] += int(q[2] / 1000); z["slc_" c] += q[3]; v["vcs_" c] += vcs[$1] }
                END { for (k in t) print k, t[k]; for (k in g) if (g[k] > 0) print k, g[k]
                      for (k in w) print k, w[k]; for (k in z) print k, z[k]; for (k in v) print k, v[k] }'
}
# vblk's own dataplane counters (QMP x-query-virtio-blk-dataplane, on a TCP
# QMP socket vmm_run gives vblk), summed over the first device's queues:
# dp_requests, dp_kicks, dp_avail_polls, dp_interrupts, dp_batches,
# dp_used_publishes, dp_interrupts_suppressed, the device's dp_bounces,
# dp_submit_calls, its iothreads' dp_completion_events/_polls, and from
# query-iothreads their loops' dp_loop_iterations, dp_blocking_waits,
# dp_epoll_waits, dp_poll_successes.
BENCH_QMP_PORT=${BENCH_QMP_PORT:-4555}
ifconfig lo 127.0.0.1 up 2>/dev/null || ip link set lo up 2>/dev/null # L1 starts with lo down
l1dp() {
    pidof vblk >/dev/null 2>&1 || return 0
    printf '%s\n' '{"execute":"qmp_capabilities"}' '{"execute":"x-query-virtio-blk-dataplane"}' |
        timeout 3 nc -w 1 127.0.0.1 "$BENCH_QMP_PORT" 2>/dev/null | grep '"queues"' | head -n 1 |
        awk 'function add(text, keys,   a, n, i, kv, k) { # sums "key": N pairs of the wanted keys
                 n = split(text, a, /[,{}]/)
                 for (i = 1; i <= n; i++) if (a[i] ~ ("\"(" keys ")\": *[0-9]+")) {
                     split(a[i], kv, /": */); k = kv[1]; gsub(/[^a-z-]/, "", k); gsub(/-/, "_", k)
                     t["dp_" k] += kv[2] } }
             { dev = $0; sub(/"queues".*/, "", dev); q = $0; sub(/.*"queues"/, "", q); sub(/"iothreads".*/, "", q)
               it = $0; sub(/.*"iothreads"/, "", it)
               add(dev, "bounces|submit-calls")
               add(q, "requests|kicks|avail-polls|interrupts|interrupts-suppressed|batches|used-publishes")
               add(it, "completion-events|completion-polls|complete-holds")
               for (k in t) print k, t[k] }'
    # and its iothreads' event loops: how often they slept, polled, woke
    printf '%s\n' '{"execute":"qmp_capabilities"}' '{"execute":"query-iothreads"}' |
        timeout 3 nc -w 1 127.0.0.1 "$BENCH_QMP_PORT" 2>/dev/null | grep '"x-loop-iterations"' | head -n 1 |
        awk '{ n = split($0, a, /[,{}]/)
               for (i = 1; i <= n; i++) if (a[i] ~ /"x-(loop-iterations|blocking-waits|epoll-waits|poll-successes)": *[0-9]+/) {
                   split(a[i], kv, /": */); k = kv[1]; gsub(/[^a-z-]/, "", k); sub(/^x-/, "", k); gsub(/-/, "_", k)
                   t["dp_" k] += kv[2] }
               for (k in t) print k, t[k] }'
}
l1snap() {
    awk '$1 == "cpu" { print "cpu_user", $2 + $3; print "cpu_sys", $4; print "cpu_idle", $5;
                       print "cpu_iowait", $6; print "cpu_irq", $7 + $8 }
         $1 == "ctxt" { print "ctxt", $2 }' /proc/stat
    # L1's memory management that changes the pages under a running guest
    # (each moved or collapsed page invalidates L2's nested page table
    # entries): migration, compaction, THP collapse and split, NUMA hinting
    awk '$1 ~ /^(pgmigrate_success|compact_migrate_scanned|compact_daemon_wake|thp_fault_alloc|thp_collapse_alloc|thp_split_pmd|numa_pte_updates)$/ {
             print "vm_" $1, $2 }' /proc/vmstat
    # L1's interrupts by CPU: local timer, reschedule and function-call IPIs,
    # TLB shootdowns, and the devices' interrupts summed (an interrupt that
    # reaches the CPU running L2 costs L2 an exit)
    awk 'NR == 1 { n = NF; next }
         { k = $1; sub(/:$/, "", k)
           if (k !~ /^(LOC|RES|CAL|TLB)$/) { if (k !~ /^[0-9]+$/) next; k = "DEV" }
           for (i = 2; i <= n + 1 && $i ~ /^[0-9]+$/; i++) c[tolower(k) "_cpu" (i - 2)] += $i }
         END { for (x in c) print "l1irq_" x, c[x] }' /proc/interrupts
    [ -r "/sys/block/$l1dev/stat" ] && awk '{ print "disk_rd", $1; print "disk_rd_ticks", $4
        print "disk_wr", $5; print "disk_wr_ticks", $8 }' "/sys/block/$l1dev/stat"
}
# With BENCH_TRACE_EXITS=1, L1 KVM's exits by reason, from an in-kernel
# histogram on the kvm_exit tracepoint (a hist trigger: counts, no trace
# buffer to overflow), as keys exitr_<isa>_<code> (isa 1 VMX, 2 SVM; the
# report names the codes). It covers every VM in L1 while the VMM runs.
exith=/sys/kernel/debug/tracing/events/kvm/kvm_exit
exithist_start() {
    [ "${BENCH_TRACE_EXITS:-0}" = 1 ] && [ -w "$exith/trigger" ] || return 0
    echo '!hist:keys=exit_reason,isa' > "$exith/trigger" 2>/dev/null
    echo 'hist:keys=exit_reason,isa:size=512' > "$exith/trigger" ||
        echo "BENCH-WARN the kvm_exit hist trigger was refused (no CONFIG_HIST_TRIGGERS?)"
}
exithist_stop() { # prints "exitr_<isa>_<code> count" lines and removes the trigger
    [ "${BENCH_TRACE_EXITS:-0}" = 1 ] && [ -r "$exith/hist" ] || return 0
    awk '/hitcount:/ { r = ""; i = ""; c = ""
             for (k = 1; k < NF; k++) {
                 if ($k == "exit_reason:") r = $(k + 1)
                 if ($k == "isa:") i = $(k + 1)
                 if ($k == "hitcount:") c = $(k + 1) }
             gsub(/[^0-9]/, "", r); gsub(/[^0-9]/, "", i)
             if (r != "" && c != "") print "exitr_" i "_" r, c }' "$exith/hist"
    echo '!hist:keys=exit_reason,isa' > "$exith/trigger" 2>/dev/null
}
l1start() { # snapshot to /tmp/l1snap.before, start the KVM sampler
    l1snap > /tmp/l1snap.before
    l1kvm | grep '^kvm_' | sed 's/ .*/ 0/' >> /tmp/l1snap.before
    exithist_start
    rm -f /tmp/l1kvm.last /tmp/l1dp.last
    l1sampler=
    [ -d /sys/kernel/debug/kvm ] || return 0
    # a sample counts only if the VM still ran when it ended (the totals drop
    # to 0 when it goes, and a sample can straddle that)
    ( while :; do
          l1kvm > /tmp/l1kvm.new
          # the dataplane's counters only grow: keep the last answer QMP gave
          # (a query can time out while vblk is busy, e.g. as the guest ends)
          l1dp > /tmp/l1dp.new && [ -s /tmp/l1dp.new ] && mv /tmp/l1dp.new /tmp/l1dp.last
          read -r e < /sys/kernel/debug/kvm/exits && [ "$e" != 0 ] && mv /tmp/l1kvm.new /tmp/l1kvm.last
          sleep 1
      done ) >/dev/null 2>&1 &
    l1sampler=$!
}
l1stat() { # l1stat NAME ROUND: the deltas since l1start
    if [ -n "$l1sampler" ]; then kill "$l1sampler" 2>/dev/null; wait "$l1sampler" 2>/dev/null; fi
    l1snap > /tmp/l1snap.after
    cat /tmp/l1kvm.last /tmp/l1dp.last >> /tmp/l1snap.after 2>/dev/null
    exithist_stop >> /tmp/l1snap.after
    awk -v n="$1" -v r="$2" 'NR == FNR { b[$1] = $2; next }
        { line = line " " $1 "=" ($2 - b[$1]) }
        END { print "BENCH-L1STAT name=" n " round=" r line }' /tmp/l1snap.before /tmp/l1snap.after
}
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}'; }

# vmm_run NAME APPEND: run the VMM NAME with kernel cmdline APPEND. NAME@split
# pins the VMM's vCPU threads to L1's CPU 0 and its other threads to CPU 1;
# NAME@same pins them all to CPU 0 (where the threads run against L1's two
# CPUs, as a factor of its own).
vmm_run() {
    case $1 in
        *@split|*@same)
            pinner "${1##*@}" &
            pp=$!
            vmm_exec "${1%@*}" "$2"
            vrc=$?
            kill "$pp" 2>/dev/null; wait "$pp" 2>/dev/null
            return $vrc;;
        *@*) echo "BENCH-ERROR unknown placement in $1 (@split or @same)"; return 2;;
        *) vmm_exec "$@";;
    esac
}
pinner() { # pinner split|same: (re)pin the VMM's threads while it runs
    i=0
    while :; do
        for x in $(pidof qemu-system-x86_64 vblk 2>/dev/null); do
            for t in "/proc/$x/task/"*; do
                read -r c 2>/dev/null <"$t/comm" || continue
                cpu=1
                case $c in "CPU "*|vcpu*) cpu=0;; esac
                [ "$1" = same ] && cpu=0
                taskset -p -c "$cpu" "${t##*/}" >/dev/null 2>&1
            done
        done
        i=$((i + 1))
        if [ $i -lt 20 ]; then sleep 0.5; else sleep 5; fi
    done
}

# vmm_exec NAME APPEND: print nothing, run the VMM NAME with kernel cmdline APPEND.
# To add or change a VMM, add a case here; bench-guest picks it up by name.
vmm_exec() {
    name=$1; app=$2
    drive="if=none,id=drive0,file=$VBLK_DISK,format=raw,cache=none,aio=$BENCH_AIO"
    # NAME-pio: the same VMM with modern-pio-notify=on (the guest kicks by port write)
    pio=""
    case $name in *-pio) pio=,modern-pio-notify=on; name=${name%-pio};; esac
    case $name in
        qemu)
            timeout -s KILL "$BENCH_TIMEOUT" "$VBLK_QEMU" -enable-kvm -cpu host -m "$BENCH_MEM" -smp "$BENCH_SMP" -name bench,debug-threads=on \
                -nodefaults -nographic -serial stdio -monitor none -no-reboot \
                -kernel "$VBLK_L2_KERNEL" -initrd "$VBLK_L2_INITRD" -append "$app" \
                -object iothread,id=io0 -drive "$drive" \
                -device virtio-blk-pci,drive=drive0,iothread=io0$pio
            ;;
        vblk-dp-on|vblk-dp-off|vblk-dp-on-nopoll|vblk-dp-on-poll[0-9]*|vblk-dp-on-hold[0-9]*)
            dp=on; [ "$name" = vblk-dp-off ] && dp=off
            # vblk-dp-on-nopoll: the dataplane's iothread with polling off
            # (poll-max-ns=0), to tell its polling's share of the CPU in L1;
            # vblk-dp-on-pollN: with poll-max-ns=N; vblk-dp-on-holdN: with
            # the completion hold x-complete-hold-ns=N (depth: its default),
            # vblk-dp-on-holdNdD: and x-complete-hold-depth=D
            set --
            dev=virtio-blk-pci,drive=drive0,x-data-plane=$dp$pio
            obj=
            case $name in
                vblk-dp-on-nopoll) obj=poll-max-ns=0 ;;
                vblk-dp-on-poll*) obj=poll-max-ns=${name#vblk-dp-on-poll} ;;
                vblk-dp-on-hold*d*)
                    obj=${name#vblk-dp-on-hold}
                    obj=x-complete-hold-ns=${obj%d*},x-complete-hold-depth=${obj#*d} ;;
                vblk-dp-on-hold*) obj=x-complete-hold-ns=${name#vblk-dp-on-hold} ;;
            esac
            if [ -n "$obj" ]; then
                set -- -object "iothread,id=io0,$obj"
                dev=$dev,iothread=io0
            fi
            # VBLK_STATS: vblk prints its userspace exits (PIO, MMIO) when it ends
            # shellcheck disable=SC2086
            VBLK_STATS=1 timeout -s KILL "$BENCH_TIMEOUT" "$VBLK_BIN" -enable-kvm -m "$BENCH_MEM" -smp "$BENCH_SMP" -nographic -no-reboot \
                -qmp "tcp:127.0.0.1:$BENCH_QMP_PORT,server=on,wait=off" \
                -kernel "$VBLK_L2_KERNEL" -initrd "$VBLK_L2_INITRD" -append "$app" "$@" \
                -drive "$drive" -device "$dev" $BENCH_VBLK_EXTRA
            ;;
        vu-vblk|vu-qsd)
            # QEMU 7.2's guest on a vhost-user-blk export of the same disk:
            # vblk-storage-daemon or qemu-storage-daemon, one iothread each.
            d=qemu-storage-daemon; [ "$name" = vu-vblk ] && d=./files/vblk-storage-daemon
            sock=/tmp/bench-vu.sock; rm -f "$sock"
            drv=file; [ -b "$VBLK_DISK" ] && drv=host_device # QEMU refuses driver=file on a block device
            "$d" --blockdev "driver=$drv,node-name=disk,filename=$VBLK_DISK,cache.direct=on,aio=$BENCH_AIO" \
                --object iothread,id=io0 \
                --export "type=vhost-user-blk,id=exp0,node-name=disk,addr.type=unix,addr.path=$sock,writable=on,num-queues=$BENCH_SMP,iothread=io0" \
                >>/tmp/bench-vu-daemon.log 2>&1 &
            dpid=$!
            i=0; while ! [ -S "$sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
            timeout -s KILL "$BENCH_TIMEOUT" "$VBLK_QEMU" -enable-kvm -cpu host -m "$BENCH_MEM" -smp "$BENCH_SMP" -name bench,debug-threads=on \
                -nodefaults -nographic -serial stdio -monitor none -no-reboot \
                -object "memory-backend-memfd,id=mem,size=${BENCH_MEM}M,share=on" -numa node,memdev=mem \
                -kernel "$VBLK_L2_KERNEL" -initrd "$VBLK_L2_INITRD" -append "$app" \
                -chardev "socket,id=vu0,path=$sock" -device vhost-user-blk-pci,chardev=vu0,num-queues=$BENCH_SMP
            vrc=$?
            kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null
            return $vrc
            ;;
        *) echo "BENCH-ERROR unknown vmm $name"; return 2;;
    esac
}

echo "BENCH-START vmms=\"$BENCH_VMMS\" jobs=$BENCH_JOBS runtime=$BENCH_RUNTIME ramp=$BENCH_RAMP mem=$BENCH_MEM smp=$BENCH_SMP aio=$BENCH_AIO rounds=$BENCH_ROUNDS mode=$VBLK_MODE"
# Boot-only run of each VMM (L2 boots, prints its facts, powers off).
for v in $BENCH_VMMS; do
    t=$(now)
    l1start
    vmm_run "$v" "$VBLK_L2_APPEND" >/tmp/boot-$v.log 2>&1
    rc=$?
    grep -q 'VBLK-EXIT 0' /tmp/boot-$v.log || { [ $rc -eq 0 ] && rc=99; tail -20 /tmp/boot-$v.log; }
    grep -E '^VBLK-(INFO|IRQ)' /tmp/boot-$v.log | sed "s/^/BENCH-FACT name=$v /"
    echo "BENCH-BOOT name=$v rc=$rc secs=$(since "$t")"
    l1stat "$v" 0
done
# Job runs: rounds interleave the VMMs, every other round in reverse order,
# so a noisy neighbour on the shared host hits all of them alike.
rev=""
for v in $BENCH_VMMS; do rev="$v $rev"; done
r=1
while [ $r -le "$BENCH_ROUNDS" ]; do
    order=$BENCH_VMMS
    [ $((r % 2)) -eq 0 ] && order=$rev
    for v in $order; do
        echo "BENCH-VMM-BEGIN name=$v round=$r"
        t=$(now)
        l1start
        vmm_run "$v" "$VBLK_L2_APPEND vblk.job=$BENCH_JOBS vblk.runtime=$BENCH_RUNTIME vblk.ramp=$BENCH_RAMP"
        rc=$?
        echo
        echo "BENCH-VMM-END name=$v round=$r rc=$rc secs=$(since "$t")"
        l1stat "$v" "$r"
    done
    r=$((r + 1))
done
echo "BENCH-DONE"
