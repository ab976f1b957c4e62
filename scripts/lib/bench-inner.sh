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
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}'; }

# vmm_cmd NAME APPEND: print nothing, run the VMM NAME with kernel cmdline APPEND.
# To add or change a VMM, add a case here; bench-guest picks it up by name.
vmm_run() {
    name=$1; app=$2
    drive="if=none,id=drive0,file=$VBLK_DISK,format=raw,cache=none,aio=$BENCH_AIO"
    case $name in
        qemu)
            timeout -s KILL "$BENCH_TIMEOUT" "$VBLK_QEMU" -enable-kvm -cpu host -m "$BENCH_MEM" -smp "$BENCH_SMP" \
                -nodefaults -nographic -serial stdio -monitor none -no-reboot \
                -kernel "$VBLK_L2_KERNEL" -initrd "$VBLK_L2_INITRD" -append "$app" \
                -object iothread,id=io0 -drive "$drive" \
                -device virtio-blk-pci,drive=drive0,iothread=io0
            ;;
        vblk-dp-on|vblk-dp-off|vblk-dp-on-nopoll)
            dp=on; [ "$name" = vblk-dp-off ] && dp=off
            # vblk-dp-on-nopoll: the dataplane's iothread with polling off
            # (poll-max-ns=0), to tell its polling's share of the CPU in L1
            set --
            dev=virtio-blk-pci,drive=drive0,x-data-plane=$dp
            if [ "$name" = vblk-dp-on-nopoll ]; then
                set -- -object iothread,id=io0,poll-max-ns=0
                dev=$dev,iothread=io0
            fi
            # VBLK_STATS: vblk prints its userspace exits (PIO, MMIO) when it ends
            # shellcheck disable=SC2086
            VBLK_STATS=1 timeout -s KILL "$BENCH_TIMEOUT" "$VBLK_BIN" -enable-kvm -m "$BENCH_MEM" -smp "$BENCH_SMP" -nographic -no-reboot \
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
            timeout -s KILL "$BENCH_TIMEOUT" "$VBLK_QEMU" -enable-kvm -cpu host -m "$BENCH_MEM" -smp "$BENCH_SMP" \
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
    vmm_run "$v" "$VBLK_L2_APPEND" >/tmp/boot-$v.log 2>&1
    rc=$?
    grep -q 'VBLK-EXIT 0' /tmp/boot-$v.log || { [ $rc -eq 0 ] && rc=99; tail -20 /tmp/boot-$v.log; }
    grep -E '^VBLK-(INFO|IRQ)' /tmp/boot-$v.log | sed "s/^/BENCH-FACT name=$v /"
    echo "BENCH-BOOT name=$v rc=$rc secs=$(since "$t")"
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
        vmm_run "$v" "$VBLK_L2_APPEND vblk.job=$BENCH_JOBS vblk.runtime=$BENCH_RUNTIME vblk.ramp=$BENCH_RAMP"
        rc=$?
        echo
        echo "BENCH-VMM-END name=$v round=$r rc=$rc secs=$(since "$t")"
    done
    r=$((r + 1))
done
echo "BENCH-DONE"
