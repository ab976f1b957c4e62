#!/bin/sh
# Reproducer of issue 15: a guest under a flushing write load with the path
# switched under it. Runs where a stock Linux guest runs (scripts/nested), by
# hand, e.g. five boots with switching and stop/cont on the dataplane:
#
#   scripts/nested --fs ext4 --disk-size 1G --timeout 7200 -- tests/system/t-flushload.sh
#   scripts/nested --fs ext4 --timeout 7200 --file ... -- env FL_RUNS=3 FL_AIO=io_uring \
#       /files/t-flushload.sh       (knobs: see below; env(1) passes them in L1)
#
# Each boot: vblk with one virtio-blk disk (cache=none, aio=$FL_AIO,
# x-data-plane=$FL_DP) runs fio in the guest: 16 KiB randwrite, QD50, crc32c
# verify with verify_backlog=512, fsync every 16 writes, over $FL_SIZE, with a
# 600 s timeout. Meanwhile a QMP client flips x-data-plane every 0.3 s
# ($FL_SWITCH) and does stop/cont every 10th flip ($FL_STOPCONT). After the
# last passing boot, a fresh boot runs the same job with verify_only=1 over
# the same image ($FL_VERIFY_ONLY).
#
# FL_VMM=qemu runs the same boots under QEMU 7.2 (the control; L1 needs
# scripts/nested --qemu): FL_DP=on gives it an iothread, and as QEMU cannot
# switch paths, only stop/cont is sent (the same cadence).
#
# A verify_only boot that ends in a triple fault (a read-only job: the image
# is unchanged) is run once more, and the summary says "triple-fault,then-R".
# A boot ends as one of:
#   pass          fio rc=0, VBLK-EXIT 0, vblk status 0, no QMP error
#   triple-fault  vblk status 2 (stderr has the vCPU's registers)
#   vblk-error    vblk status 1 (internal error, failed entry...)
#   fio-timeout   the guest's 600 s timeout killed fio (VBLK-EXIT 137): fio
#                 made no or too slow progress; see the probe below
#   guest-panic   the guest's kernel panicked (its console says so) and reset
#                 the machine (panic=-1), which ends vblk with status 0
#   silent-end    vblk status 0 but fio never reported, and no panic printed
#   fio-fail      fio reported rc != 0 (verify failure...)
#   qmp-error     everything passed but a QMP command failed
#   no-switch     everything passed, but the dataplane counters show no switch
#                 although 10 or more flips were sent
#   hang          vblk still running after $FL_DEADLINE s: x-debug-state,
#                 query-status, x-query-virtio-blk-dataplane and SIGUSR2 are
#                 taken, then vblk is killed
# and prints "T-FLUSHLOAD run=N result=R rc=... switches=... stopcont=...".
# A boot whose fio still runs $FL_PROBE s after it started is probed once:
# x-query-virtio-blk-dataplane, x-debug-state (SIGUSR2's dump, into the log),
# 10 s, the same again: whether requests still complete, or sit in flight.
# The last line is "T-FLUSHLOAD-SUMMARY runs=N pass=P ..."; the status is 0
# only if every boot (and the verify_only boot) passed.
#
# POSIX sh (busybox in L1). Environment from scripts/nested: VBLK_BIN
# VBLK_L2_KERNEL VBLK_L2_INITRD VBLK_L2_APPEND VBLK_DISK.
FL_RUNS=${FL_RUNS:-5}             # boots
FL_SWITCH=${FL_SWITCH:-1}         # flip x-data-plane every 0.3 s
FL_STOPCONT=${FL_STOPCONT:-1}     # stop/cont every 10th flip
FL_DP=${FL_DP:-on}                # the path at boot
FL_AIO=${FL_AIO:-native}          # host engine: native | io_uring | alt (native on odd boots, io_uring on even)
FL_BACKING=${FL_BACKING:-file}    # file: a file next to $VBLK_DISK (L1's virtio disk);
                                  # ram: a loop device over a file in L1's RAM (no L1 disk I/O)
FL_ENGINE=${FL_ENGINE:-libaio}    # guest fio engine: libaio | io_uring
FL_SIZE=${FL_SIZE:-320M}          # fio size
FL_SMP=${FL_SMP:-2}
FL_DEADLINE=${FL_DEADLINE:-900}   # s per boot before it counts as a hang
FL_VERIFY_ONLY=${FL_VERIFY_ONLY:-1}
FL_KEEP=${FL_KEEP:-0}             # keep the logs of passing boots too
FL_PROBE=${FL_PROBE:-480}         # s after fio started: one state probe
FL_VMM=${FL_VMM:-vblk}            # vblk | qemu (the control: QEMU 7.2, scripts/nested --qemu)
FL_DISK=${FL_DISK:-file}          # file | nbd: the image exported by qemu-storage-daemon over NBD
                                  # on a unix socket, the disk its nbd+unix:// URI (system test 22)
FL_KVMTRACE=${FL_KVMTRACE:-0}    # 1: L1's KVM tracepoints run through every boot; a failed boot
                                  # prints the last events before its end (what L1's KVM saw and
                                  # injected right before a guest crash)
FL_JOB=${FL_JOB:-flushload}       # flushload (above) | verify: the guest's verify-4k-qd32 job over
                                  # 64 MiB (system test 22's); verify_only boots need flushload

dir=$(dirname "${VBLK_DISK:-/tmp/x}")
[ -w "$dir" ] || dir=/tmp
port=${FL_PORT:-4540}               # QMP ports: FL_PORT+1, +2... one per boot
ifconfig lo 127.0.0.1 up 2>/dev/null || ip link set lo up 2>/dev/null
trap '' PIPE

job() { # job VERIFY_ONLY(0|1): the fio job file text
    cat <<EOF
[global]
filename=/dev/vda
ioengine=$FL_ENGINE
direct=1
verify_fatal=1
[flushload]
rw=randwrite
bs=16k
iodepth=50
size=$FL_SIZE
verify=crc32c
verify_backlog=512
fsync=16
do_verify=1
EOF
    [ "$1" = 1 ] && echo "verify_only=1"
}

# l1_io_report: L1's own side of a stall: its disks' requests in flight and the
# tasks in D state (uninterruptible, e.g. waiting for a disk) with their kernel
# stacks. A host I/O of vblk's that never completes shows here as a request
# stuck in L1's disk, not in vblk (issue 15: a hang with one libaio request in
# flight and vblk's iothread idle in epoll_wait).
l1_io_report() {
    for f in /sys/block/*/inflight; do
        [ -r "$f" ] || continue
        read -r rd wr < "$f" 2>/dev/null || continue
        [ "$rd$wr" = 00 ] || echo "#   L1 disk $(basename "$(dirname "$f")"): in flight reads $rd writes $wr"
    done
    for d in /proc/[0-9]*; do
        st=$(sed 's/.*) //' "$d/stat" 2>/dev/null | cut -d' ' -f1)
        [ "$st" = D ] || continue
        echo "#   L1 task in D state: ${d#/proc/} $(cat "$d/comm" 2>/dev/null)"
        head -n 12 "$d/stack" 2>/dev/null | sed 's/^/#     /'
    done
}
qmp() { echo "$1" 2>/dev/null >&3; } # vblk may be gone: no "Broken pipe" noise
qmp_x() { [ "$FL_VMM" = qemu ] || qmp "$1"; } # vblk's own x- commands
qmp_open() {
    rm -f "$dir/qin"; mkfifo "$dir/qin"
    nc 127.0.0.1 "$port" <"$dir/qin" >"$dir/qmp.out" 2>/dev/null &
    qmp_nc=$!
    exec 3>"$dir/qin"
    qmp '{"execute":"qmp_capabilities"}'
}
qmp_close() { exec 3>&-; sleep 1; kill "$qmp_nc" 2>/dev/null; }

# kvmtrace_start / kvmtrace_stop: L1's KVM tracepoints (exits with their
# exit_int_info, injected exceptions and interrupts, page faults) into a ring
# buffer of 8 MiB per CPU for the whole boot; a triple fault loses the guest's
# state, so what L1's KVM did just before it is the only record.
KT=/sys/kernel/tracing
KT_EVENTS="kvm_exit kvm_inj_exception kvm_inj_virq kvm_page_fault kvm_pio kvm_mmio kvm_msr"
kvmtrace_start() {
    [ "$FL_KVMTRACE" = 1 ] || return 0
    [ -d $KT/events/kvm ] || mount -t tracefs nodev $KT 2>/dev/null
    [ -d $KT/events/kvm/kvm_exit ] || { echo "# kvmtrace: no tracefs or no kvm events in L1"; return 0; }
    echo 0 >$KT/tracing_on; echo 8192 >$KT/buffer_size_kb; : >$KT/trace
    for e in $KT_EVENTS; do [ -d $KT/events/kvm/$e ] && echo 1 >$KT/events/kvm/$e/enable; done
    echo 1 >$KT/tracing_on
}
kvmtrace_stop() { # stop, keep the last 80 events in $dir/kvmtrace.txt
    rm -f "$dir/kvmtrace.txt"
    [ "$FL_KVMTRACE" = 1 ] && [ -d $KT/events/kvm/kvm_exit ] || return 0
    echo 0 >$KT/tracing_on
    grep -v '^#' $KT/trace | tail -n 80 | sed 's/^ *//' | cut -c1-260 >"$dir/kvmtrace.txt"
    for e in $KT_EVENTS; do [ -d $KT/events/kvm/$e ] && echo 0 >$KT/events/kvm/$e/enable; done
    : >$KT/trace
}
# L1's KVM saw the guest shut down (a triple fault): its last exit says so,
# whatever the VMM made of it (QEMU -no-reboot: a guest reset, status 0).
kvmtrace_shutdown() { [ -f "$dir/kvmtrace.txt" ] && grep kvm_exit "$dir/kvmtrace.txt" | tail -n 1 | grep -q 'reason shutdown'; }
kvmtrace_print() {
    [ -s "$dir/kvmtrace.txt" ] || return 0
    echo "#   L1 KVM trace, the last 80 events of the boot (intr_info of an exit: the event in delivery):"
    sed 's/^/#   kvmtrace: /' "$dir/kvmtrace.txt"
}

# boot N VERIFY_ONLY: one boot; sets $result.
boot() {
    n=$1; vo=$2; log="$dir/fl-$n.log"
    port=$((port + 1))
    jb=$(job "$vo" | base64 | tr -d '\n')
    aio=$FL_AIO
    [ "$FL_AIO" = alt ] && { if [ $((n % 2)) = 1 ]; then aio=native; else aio=io_uring; fi; }
    if [ "$FL_BACKING" = ram ]; then
        # The image in L1's RAM behind a loop device: vblk's O_DIRECT host I/O
        # then never waits for L1's own (emulated) disk. A libaio request that
        # L1's virtio disk never completed hung one boot on 2026-12-03.
        [ -e /dev/loop-control ] || insmod /lib/modules/l1/loop.ko 2>/dev/null
        if [ "$vo" = 0 ]; then
            losetup -d /dev/loop0 2>/dev/null
            rm -f /tmp/fl-ram.img; truncate -s 400M /tmp/fl-ram.img
            losetup /dev/loop0 /tmp/fl-ram.img || echo "# boot $n: losetup failed"
        fi
        img=/dev/loop0
    else
        img=$dir/fl.img
        [ "$vo" = 1 ] || { rm -f "$img"; truncate -s 400M "$img"; }
    fi
    drv="file=$img,format=raw,cache=none,aio=$aio"
    if [ "$FL_DISK" = nbd ]; then
        kill "$nbd_qsd" 2>/dev/null; wait "$nbd_qsd" 2>/dev/null; rm -f "$dir/fl-nbd.sock"
        qemu-storage-daemon --blockdev "driver=file,node-name=f0,filename=$img" \
            --nbd-server "addr.type=unix,addr.path=$dir/fl-nbd.sock" \
            --export type=nbd,id=e0,node-name=f0,name=d0,writable=on >>"$dir/fl-nbd-qsd.log" 2>&1 &
        nbd_qsd=$!
        i=0; while ! [ -S "$dir/fl-nbd.sock" ] && [ $i -lt 60 ]; do sleep 0.5; i=$((i + 1)); done
        drv="file=nbd+unix:///d0?socket=$dir/fl-nbd.sock,format=raw"
    fi
    if [ "$FL_JOB" = verify ]; then
        jobarg="vblk.job=verify-4k-qd32 vblk.vsize=64M"
    else
        jobarg="vblk.jobb64=$jb"
    fi
    kvmtrace_start
    start=$(date +%s)
    if [ "$FL_VMM" = qemu ]; then
        # The control: QEMU 7.2 with the same guest, job, disk and QMP load. It
        # cannot switch paths, so FL_DP picks one (on = an iothread) and only
        # stop/cont is sent (every 10th 0.3 s tick, as with switching).
        iot=""; [ "$FL_DP" = on ] && iot=",iothread=io0"
        "$VBLK_QEMU" -enable-kvm -cpu host -m 512 -smp "$FL_SMP" -nodefaults -nographic \
            -serial stdio -monitor none -no-reboot -object iothread,id=io0 \
            -kernel "$VBLK_L2_KERNEL" -initrd "$VBLK_L2_INITRD" \
            -append "$VBLK_L2_APPEND $jobarg vblk.timeout=600" \
            -drive "if=none,id=drive0,$drv" \
            -device "virtio-blk-pci,id=disk0,drive=drive0$iot" \
            -qmp "tcp:127.0.0.1:$port,server=on,wait=off" >"$log" 2>&1 &
    else
        "$VBLK_BIN" -enable-kvm -m 512 -smp "$FL_SMP" -nographic -no-reboot \
            -kernel "$VBLK_L2_KERNEL" -initrd "$VBLK_L2_INITRD" \
            -append "$VBLK_L2_APPEND $jobarg vblk.timeout=600" \
            -drive "if=none,id=drive0,$drv" \
            -device "virtio-blk-pci,id=disk0,drive=drive0,scsi=off,x-data-plane=$FL_DP" \
            -qmp "tcp:127.0.0.1:$port,server=on,wait=off" >"$log" 2>&1 &
    fi
    vpid=$!
    i=0; while ! grep -q 'VBLK-FIO-JOB' "$log" 2>/dev/null && kill -0 "$vpid" 2>/dev/null &&
        [ $i -lt 300 ]; do sleep 1; i=$((i + 1)); done
    qmp_open
    flips=0; stops=0; dp=$FL_DP; hung=0; fio_start=$(date +%s); probed=0
    while kill -0 "$vpid" 2>/dev/null && ! grep -q 'VBLK-FIO-RC' "$log"; do
        if [ $(($(date +%s) - start)) -ge "$FL_DEADLINE" ]; then hung=1; break; fi
        if [ $probed = 0 ] && [ $(($(date +%s) - fio_start)) -ge "$FL_PROBE" ]; then
            probed=1
            echo "# boot $n: fio still runs after $FL_PROBE s: probe"
            qmp '{"execute":"query-status"}'
            qmp '{"execute":"query-blockstats"}'
            qmp_x '{"execute":"x-query-virtio-blk-dataplane"}'
            qmp_x '{"execute":"x-debug-state"}'
            sleep 10
            qmp '{"execute":"query-blockstats"}'
            qmp_x '{"execute":"x-query-virtio-blk-dataplane"}'
            qmp_x '{"execute":"x-debug-state"}'
            sleep 1
            grep '"requests"\|"status"' "$dir/qmp.out" | tail -n 3 | cut -c1-600 | sed 's/^/#   probe qmp: /'
            grep 'debug-state' "$log" | tail -n 24 | sed 's/^/#   probe: /'
            l1_io_report
        fi
        sleep 0.3
        [ "$FL_SWITCH" = 1 ] && [ "$vo" = 0 ] || continue
        if [ "$FL_VMM" != qemu ]; then
            if [ "$dp" = on ]; then dp=off; v=false; else dp=on; v=true; fi
            qmp "{\"execute\":\"qom-set\",\"arguments\":{\"path\":\"/machine/peripheral/disk0\",\"property\":\"x-data-plane\",\"value\":$v}}"
        fi
        flips=$((flips + 1))
        if [ "$FL_STOPCONT" = 1 ] && [ $((flips % 10)) -eq 0 ]; then
            qmp '{"execute":"stop"}'; sleep 0.1; qmp '{"execute":"cont"}'
            stops=$((stops + 1))
        fi
        # the counters now and then: the guest may reboot and vblk exit before
        # the last query is answered
        [ $((flips % 10)) -ne 0 ] || qmp_x '{"execute":"x-query-virtio-blk-dataplane"}'
    done
    if [ $hung = 1 ]; then
        echo "# boot $n: still running after $FL_DEADLINE s: state dump, then kill"
        qmp '{"execute":"query-status"}'
        qmp '{"execute":"query-blockstats"}'
        qmp_x '{"execute":"x-query-virtio-blk-dataplane"}'
        qmp_x '{"execute":"x-debug-state"}'
        sleep 2
        [ "$FL_VMM" = qemu ] || kill -USR2 "$vpid" 2>/dev/null
        sleep 3
        l1_io_report
        kill -9 "$vpid" 2>/dev/null
    fi
    qmp '{"execute":"query-status"}'
    qmp_x '{"execute":"x-query-virtio-blk-dataplane"}'
    i=0; while kill -0 "$vpid" 2>/dev/null && [ $i -lt 120 ]; do sleep 1; i=$((i + 1)); done
    if kill -0 "$vpid" 2>/dev/null; then
        echo "# boot $n: fio reported but vblk did not exit within 120 s: state dump, then kill"
        kill -USR2 "$vpid" 2>/dev/null; sleep 3; kill -9 "$vpid" 2>/dev/null; hung=1
    fi
    wait "$vpid"; rc=$?
    kvmtrace_stop
    qmp_close
    cp "$dir/qmp.out" "$dir/fl-$n.qmp"
    fio_rc=$(grep -o 'VBLK-FIO-RC name=[^ ]* rc=[0-9]*' "$log" | tail -1 | sed 's/.*rc=//')
    # the largest count seen: the guest's reboot at the end resets the device,
    # and with it the counters
    sw=$(grep -o '"switches": [0-9]*' "$dir/qmp.out" | cut -d' ' -f2 | sort -n | tail -1)
    qerr=$(grep -c '"error"' "$dir/qmp.out")
    if [ $hung = 1 ]; then result=hang
    elif [ $rc -eq 2 ] || { [ $rc -eq 0 ] && kvmtrace_shutdown; }; then result=triple-fault
    elif [ $rc -ne 0 ]; then result=vblk-error
    elif [ -z "$fio_rc" ] && grep -q 'VBLK-EXIT 137' "$log"; then result=fio-timeout
    elif [ -z "$fio_rc" ] && grep -q 'Kernel panic' "$log"; then result=guest-panic
    elif [ -z "$fio_rc" ]; then result=silent-end
    elif [ "$fio_rc" != 0 ] || ! grep -q 'VBLK-EXIT 0' "$log"; then result=fio-fail
    elif [ "$qerr" -ne 0 ]; then result=qmp-error
    elif [ "$FL_VMM" = vblk ] && [ "$FL_SWITCH" = 1 ] && [ "$vo" = 0 ] && [ "$flips" -ge 10 ] &&
        [ "${sw:-0}" -eq 0 ]; then result=no-switch
    else result=pass
    fi
    echo "T-FLUSHLOAD run=$n result=$result rc=$rc fio_rc=${fio_rc:--} verify_only=$vo" \
        "switches=${sw:-0} flips=$flips stopcont=$stops qmp_errors=$qerr secs=$(($(date +%s) - start))" \
        "dp=$FL_DP aio=$aio engine=$FL_ENGINE vmm=$FL_VMM backing=$FL_BACKING disk=$FL_DISK job=$FL_JOB smp=$FL_SMP"
    [ $result != pass ] && kvmtrace_print
    if [ $result != pass ]; then
        grep -E 'triple fault|vCPU [0-9]+: (RIP|CR0|CS|RAX|RSI)|debug-state|KVM_EXIT|Kernel panic|BUG|Oops|RIP:|VBLK-|vblk:' "$log" |
            grep -v 'VBLK-IRQ' | tail -n 60 | sed 's/^/#   /'
        tail -n 15 "$log" | sed 's/^/#   tail: /'
        grep '"error"\|"status"\|SHUTDOWN\|RESET' "$dir/qmp.out" | tail -n 10 | sed 's/^/#   qmp: /'
    elif [ "$FL_KEEP" = 0 ]; then
        rm -f "$log" "$dir/fl-$n.qmp"
    fi
}

echo "# t-flushload: vmm=$FL_VMM runs=$FL_RUNS switch=$FL_SWITCH stopcont=$FL_STOPCONT dp=$FL_DP aio=$FL_AIO engine=$FL_ENGINE size=$FL_SIZE smp=$FL_SMP backing=$FL_BACKING"
pass=0; fails=""
k=1
while [ $k -le "$FL_RUNS" ]; do
    boot "$k" 0
    if [ $result = pass ]; then pass=$((pass + 1)); last_pass=$k; else fails="$fails $k:$result"; fi
    k=$((k + 1))
done
vo_result=skipped
if [ "$FL_VERIFY_ONLY" = 1 ] && [ "${last_pass:-0}" = "$FL_RUNS" ]; then
    boot "$((FL_RUNS + 1))" 1
    vo_result=$result
    if [ "$result" = triple-fault ]; then
        # A guest crash in a read-only job leaves the image as it was: verify
        # it once more, and keep the crash in the summary.
        boot "$((FL_RUNS + 2))" 1
        vo_result="triple-fault,then-$result"
    fi
fi
[ -z "${nbd_qsd:-}" ] || { kill "$nbd_qsd" 2>/dev/null; wait "$nbd_qsd" 2>/dev/null; }
echo "T-FLUSHLOAD-SUMMARY runs=$FL_RUNS pass=$pass fails=${fails:- none} verify_only=$vo_result"
[ $pass -eq "$FL_RUNS" ] && { [ $vo_result = pass ] || [ $vo_result = skipped ]; }  # a crash then pass is a failure too
