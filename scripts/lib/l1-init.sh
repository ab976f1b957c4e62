#!/bin/busybox sh
# /init of the L1 VM of scripts/nested (QEMU TCG with emulated SVM).
# Loads kvm + kvm-amd (nested SVM) and the virtio modules for L1's own disk
# (/dev/vda, the O_DIRECT backing store), then runs /vblk/cmd.sh (written by
# the host for this run) in /vblk with its output framed by markers on the
# serial console, and powers off.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
/bin/busybox mount -t devtmpfs dev /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sys /sys
mkdir -p /dev/pts /dev/shm /tmp /run /var/tmp
mount -t devpts devpts /dev/pts
mount -t tmpfs shm /dev/shm
mount -t tmpfs tmp /tmp
# keep the console quiet: only emergencies from the kernel
echo 1 > /proc/sys/kernel/printk
stty -F /dev/console -onlcr -echo 2>/dev/null
read -r up _ </proc/uptime
echo "VBLK-L1-UP uptime=$up"
# scripts/nested --npt off: L2 on shadow paging (kvm_amd npt=0)
npt=on
case " $(cat /proc/cmdline) " in *" vblk.l1npt=off "*) npt=off;; esac
for m in $(cat /etc/vblk-l1/modules); do
    args=""
    [ "$m" = kvm-amd ] && [ $npt = off ] && args="npt=0"
    insmod /lib/modules/l1/$m.ko $args 2>/tmp/insmod.err || echo "VBLK-L1-WARN insmod $m: $(cat /tmp/insmod.err)"
done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
export VBLK_DISK=/dev/vda
for w in $(cat /proc/cmdline); do
    case $w in
        vblk.l1fs=ext4)
            for m in $(cat /etc/vblk-l1/fs-modules); do insmod /lib/modules/l1/$m.ko 2>/dev/null; done
            mkdir -p /mnt/disk
            if mount -t ext4 /dev/vda /mnt/disk; then
                sz=$(sed -n 's/.*vblk.l1disk=\([0-9]*\).*/\1/p' /proc/cmdline)
                [ -f /mnt/disk/disk.img ] || truncate -s "${sz:-2147483648}" /mnt/disk/disk.img
                export VBLK_DISK=/mnt/disk/disk.img VBLK_DISK_DEV=/dev/vda
            else
                echo "VBLK-L1-WARN mounting /dev/vda as ext4 failed"
            fi
            ;;
    esac
done
net=none
case " $(cat /proc/cmdline) " in
    *" vblk.l1net=1 "*)
        # scripts/nested --net: QEMU's user-mode network, static addresses
        for m in $(cat /etc/vblk-l1/net-modules); do insmod /lib/modules/l1/$m.ko 2>/dev/null; done
        i=0; while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
        if ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2; then
            net=10.0.2.15
        else
            echo "VBLK-L1-WARN no network: eth0 did not come up"
        fi
        ;;
esac
[ -c /dev/kvm ] && kvm=ok || kvm=missing
# One idle VM held open for the whole run (scripts/lib/kvm-hold.c): L2 starts
# and ends then never make L1's kernel rewrite KVM's static-key sites.
kvmhold=off
case " $(cat /proc/cmdline) " in
    *" vblk.l1kvmhold=off "*) ;;
    *)
        if [ $kvm = ok ] && [ -x /bin/kvm-hold ]; then
            /bin/kvm-hold >/tmp/kvm-hold.out 2>&1 &
            i=0; while ! grep -q 'holding vm' /tmp/kvm-hold.out && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
            if grep -q 'holding vm' /tmp/kvm-hold.out; then
                kvmhold=on
            else
                kvmhold=failed; echo "VBLK-L1-WARN kvm-hold: $(cat /tmp/kvm-hold.out)"
            fi
        else
            kvmhold=missing
        fi
        ;;
esac
[ -b /dev/vda ] && disk=ok || disk=missing
read -r up _ </proc/uptime
echo "VBLK-L1-READY uptime=$up kvm=$kvm disk=$disk net=$net kvmhold=$kvmhold npt=$(cat /sys/module/kvm_amd/parameters/npt 2>/dev/null) vblk_disk=$VBLK_DISK"

export HOME=/root VBLK_MODE=nested VBLK_WORK=/vblk VBLK_FILES=/files
export VBLK_L2_KERNEL=/l2/bzImage VBLK_L2_INITRD=/l2/initrd VBLK_L2_VMLINUX=/l2/vmlinux
[ -f /etc/vblk-l1/l2-append ] && export VBLK_L2_APPEND="$(cat /etc/vblk-l1/l2-append)"
if [ -x /bin/vblk ]; then export VBLK_BIN=/bin/vblk; else export VBLK_BIN=; fi
if [ -x /usr/bin/qemu-system-x86_64 ]; then export VBLK_QEMU=/usr/bin/qemu-system-x86_64; else export VBLK_QEMU=; fi
mkdir -p /root /files /vblk
cd /vblk
ln -sf /l2/bzImage bzImage; ln -sf /l2/initrd initrd; ln -sf /l2/vmlinux vmlinux; ln -sf "$VBLK_DISK" disk
[ -x /bin/vblk ] && ln -sf /bin/vblk vblk
[ -e files ] || ln -sf /files files

echo "===VBLK-L1-CMD-BEGIN==="
sh /vblk/cmd.sh </dev/null 2>&1
rc=$?
echo "===VBLK-L1-CMD-END=== rc=$rc"
sync
mountpoint -q /mnt/disk 2>/dev/null && umount /mnt/disk
# QEMU runs L1 with -no-reboot: a reboot ends it, with or without ACPI
reboot -f
sleep 5
poweroff -f
sleep 5
echo o > /proc/sysrq-trigger
