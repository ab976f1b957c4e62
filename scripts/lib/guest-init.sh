#!/bin/busybox sh
# /init of the vblk L2 guest image (built by scripts/guest-image).
# Kernel command line knobs (all optional):
#   vblk.job=NAME[,NAME..]  run baked fio jobs /etc/vblk/jobs/NAME.fio in order
#   vblk.jobb64=BASE64      run this fio job file text (base64)
#   vblk.sh=NAME            run baked script /etc/vblk/scripts/NAME.sh
#   vblk.shb64=BASE64       run this shell script text (busybox sh, base64)
#   vblk.shdev=DEV          run the script stored at the start of block device DEV
#                           (first MiB, NUL padding stripped), for scripts too long for the cmdline
#   vblk.runtime=S vblk.ramp=S vblk.size=SIZE vblk.vsize=SIZE vblk.engine=E vblk.dev=DEV
#                           exported as VBLK_RUNTIME, VBLK_RAMP, VBLK_SIZE, VBLK_VSIZE,
#                           VBLK_ENGINE, VBLK_DEV for ${VAR} use in job files
#   vblk.timeout=S          kill the script/jobs after S seconds (rc 137)
#   vblk.shell=1            interactive shell instead of powering off
# Output lines (machine-readable, one per line):
#   VBLK-BOOT uptime=<s> kernel=<release>
#   VBLK-INFO cpus=<n> mem_kb=<n> clocksource=<cs>
#   VBLK-INFO <vdX> size=<bytes> lbs=<n> pbs=<n> serial=<s> ro=<0|1> wc=<write-back|write-through>
#             discard_max=<bytes> write_zeroes_max=<bytes> queues=<n> max_segments=<n>
#             max_segment_size=<bytes> max_sectors_kb=<n> nr_requests=<n>
#   VBLK-INFO cpu flags=<n>:<md5 prefix of the flag list> pv=<the kvm-guest features the kernel
#             set up, from its log> (so that two VMMs' guests can be told to see the same machine)
#   VBLK-IRQ <the /proc/interrupts line of each PCI-MSI vector, spaces squeezed>
#   VBLK-IRQ-AFTER name=<job> <the same lines after each fio job>
#   VBLK-STAT name=<job> phase=before|after up=<s> usr= nic= sys= idl= iow= irq= sirq= stl=<jiffies
#             of /proc/stat's cpu line> ctxt=<n> intr=<n> loc= res= cal= tlb=<those interrupts summed
#             over the CPUs>: around each fio job, so that the guest's own use of its time per request
#             can be compared between VMMs
#   VBLK-FIO-JOB name=<job>  ===VBLK-FIO-JSON-BEGIN===  <json>  ===VBLK-FIO-JSON-END===
#   VBLK-FIO-RC name=<job> rc=<n>
#   VBLK-EXIT <status>      then reboot -f (reboot=k: port 0x64 reset) and poweroff -f.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
/bin/busybox mount -t devtmpfs dev /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sys /sys
mkdir -p /dev/pts /dev/shm /tmp /run
mount -t tmpfs tmp /tmp
mount -t tmpfs shm /dev/shm
read -r up _ </proc/uptime
echo "VBLK-BOOT uptime=$up kernel=$(uname -r)"

for m in $(cat /etc/vblk/modules); do
    insmod /lib/modules/vblk/$m.ko 2>/tmp/insmod.err || echo "VBLK-WARN insmod $m: $(cat /tmp/insmod.err)"
done
# The ACPI power button driver, only when the guest runs with ACPI (not acpi=off).
if [ -e /sys/firmware/acpi/tables/DSDT ]; then
    for m in $(cat /etc/vblk/modules-acpi 2>/dev/null); do
        insmod /lib/modules/vblk/$m.ko 2>/tmp/insmod.err || echo "VBLK-WARN insmod $m: $(cat /tmp/insmod.err)"
    done
fi
# virtio-blk devices (vendor 0x1af4, device 0x1001 legacy / 0x1042 modern): wait for their disks.
want=0
for d in /sys/bus/pci/devices/*; do
    [ "$(cat $d/vendor 2>/dev/null)" = 0x1af4 ] || continue
    case $(cat $d/device) in 0x1001|0x1042) want=$((want + 1));; esac
done
i=0
while [ $i -lt 100 ]; do
    n=$(ls -d /sys/block/vd* 2>/dev/null | wc -l)
    [ "$n" -ge "$want" ] && break
    sleep 0.05; i=$((i + 1))
done

cs=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)
mem=$(awk '/MemTotal/{print $2}' /proc/meminfo)
echo "VBLK-INFO cpus=$(nproc) mem_kb=$mem clocksource=$cs virtio_blk_pci=$want"
for d in /sys/block/vd*; do
    [ -e "$d" ] || continue
    n=${d##*/}
    wc=$(cat $d/queue/write_cache 2>/dev/null | tr ' ' '-')
    serial=$(cat $d/serial 2>/dev/null | tr ' ' '_')
    echo "VBLK-INFO $n size=$(($(cat $d/size) * 512)) lbs=$(cat $d/queue/logical_block_size)" \
         "pbs=$(cat $d/queue/physical_block_size) serial=${serial:--} ro=$(cat $d/ro) wc=${wc:--}" \
         "discard_max=$(cat $d/queue/discard_max_bytes) write_zeroes_max=$(cat $d/queue/write_zeroes_max_bytes)" \
         "queues=$(ls -d $d/mq/* 2>/dev/null | wc -l) max_segments=$(cat $d/queue/max_segments)" \
         "max_segment_size=$(cat $d/queue/max_segment_size) max_sectors_kb=$(cat $d/queue/max_sectors_kb)" \
         "nr_requests=$(cat $d/queue/nr_requests)"
done
fl=$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2)
pv=$(dmesg 2>/dev/null | grep -oE 'kvm-guest: [A-Za-z][A-Za-z ]*|kvm-clock: Using msrs|x2apic enabled|TSC deadline timer available' |
     sed 's/^kvm-guest: //' | tr ' ' '-' | sort -u | tr '\n' ',' | sed 's/,$//')
echo "VBLK-INFO cpu flags=$(echo $fl | wc -w):$(echo $fl | md5sum | cut -c1-8) pv=${pv:--}"
# irq_lines PREFIX: each PCI-MSI line of /proc/interrupts, spaces squeezed
irq_lines() { grep -E 'MSI' /proc/interrupts | tr -s ' ' | sed "s/^ */$1 /"; }
irq_lines VBLK-IRQ
# gstat PREFIX: the guest's CPU time by kind, context switches and interrupts so far
gstat() {
    p=$1
    read -r up _ </proc/uptime
    set -- $(grep '^cpu ' /proc/stat)
    echo "$p up=$up usr=$2 nic=$3 sys=$4 idl=$5 iow=$6 irq=$7 sirq=$8 stl=$9" \
         "$(awk '/^(ctxt|intr) / {printf "%s=%s ", $1, $2}' /proc/stat)$(awk '
             $1 ~ /^(LOC|RES|CAL|TLB):$/ {
                 s = 0; for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i
                 printf "%s=%d ", tolower(substr($1, 1, 3)), s }' /proc/interrupts)"
}

# Parse our knobs from /proc/cmdline (the kernel keeps dotted parameters there).
JOBS=""; JOBB64=""; SH=""; SHB64=""; SHDEV=""; TMO=""; SHELL_MODE=0
export VBLK_RUNTIME=10 VBLK_RAMP=2 VBLK_SIZE=100% VBLK_VSIZE=64M VBLK_ENGINE=libaio VBLK_DEV=/dev/vda
for w in $(cat /proc/cmdline); do
    case $w in
        vblk.job=*) JOBS=$(echo "${w#*=}" | tr ',' ' ');;
        vblk.jobb64=*) JOBB64=${w#*=};;
        vblk.sh=*) SH=${w#*=};;
        vblk.shb64=*) SHB64=${w#*=};;
        vblk.shdev=*) SHDEV=${w#*=};;
        vblk.runtime=*) VBLK_RUNTIME=${w#*=};;
        vblk.ramp=*) VBLK_RAMP=${w#*=};;
        vblk.size=*) VBLK_SIZE=${w#*=};;
        vblk.vsize=*) VBLK_VSIZE=${w#*=};;
        vblk.engine=*) VBLK_ENGINE=${w#*=};;
        vblk.dev=*) VBLK_DEV=${w#*=};;
        vblk.timeout=*) TMO=${w#*=};;
        vblk.shell=1) SHELL_MODE=1;;
    esac
done

run() { # run with the optional timeout
    if [ -n "$TMO" ]; then timeout -s KILL "$TMO" "$@"; else "$@"; fi
}

rc=0
if [ -n "$SH" ] || [ -n "$SHB64" ] || [ -n "$SHDEV" ]; then
    if [ -n "$SHB64" ]; then echo "$SHB64" | base64 -d > /tmp/job.sh
    elif [ -n "$SHDEV" ]; then head -c 1048576 "$SHDEV" | tr -d '\000' > /tmp/job.sh
    else cp "/etc/vblk/scripts/$SH.sh" /tmp/job.sh; fi
    echo "===VBLK-SH-BEGIN==="
    run sh /tmp/job.sh; r=$?
    echo "===VBLK-SH-END=== rc=$r"
    [ $r -ne 0 ] && rc=$r
fi
if [ -n "$JOBB64" ]; then
    echo "$JOBB64" | base64 -d > /tmp/custom.fio
    run vblk-fio /tmp/custom.fio; r=$?
    [ $r -ne 0 ] && [ $rc -eq 0 ] && rc=$r
fi
for j in $JOBS; do
    gstat "VBLK-STAT name=$j phase=before"
    run vblk-fio "$j"; r=$?
    gstat "VBLK-STAT name=$j phase=after"
    # the interrupt counts after each job: the delta is the job's interrupts
    irq_lines "VBLK-IRQ-AFTER name=$j"
    [ $r -ne 0 ] && [ $rc -eq 0 ] && rc=$r
done

if [ $SHELL_MODE = 1 ]; then
    echo "VBLK-SHELL (exit the shell to power off)"
    setsid cttyhack sh
fi
sync
echo "VBLK-EXIT $rc"
reboot -f
sleep 2
poweroff -f
while :; do sleep 1000; done
