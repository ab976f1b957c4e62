#!/bin/sh
# Power-loss test with dm-log-writes, the part that runs where vblk runs (in
# the nested harness's L1; started by scripts/crashtest, or as one section of
# the system tests). POSIX sh (busybox).
#
#   sh crashtest.sh [--quick]
#
# For each disk of the guest: a data file and a log file in tmpfs, each on a
# loop device, a dm-log-writes target "lw-TAG" over them, and vblk serving
# /dev/dm-N to the L2 guest with the disk's cache mode, aio engine and
# x-data-plane setting. In L2, tests/system/crashw.c writes seq-tagged 4 KiB
# records with O_DIRECT and fdatasync()s every few records, printing
# "CRASHW-ACK TAG THREAD SEQ" once the flush returned; `lwlog ackmark` turns
# each such line, as vblk prints it, into the dm-log-writes mark ack-THREAD-SEQ.
# After vblk exits the target is removed and `lwlog check` replays the log onto
# a zeroed copy of the base image, stopping at every FLUSH, FUA and mark entry
# (a crash point): each record acknowledged by a mark logged before that point
# must be present. cache=unsafe disks are the negative control: vblk completes
# their FLUSH without a sync, so their acknowledged records reach the log only
# after the marks, and the check must find them lost.
#
# Needs: vblk ($VBLK_BIN), the L2 image ($VBLK_L2_KERNEL, $VBLK_L2_INITRD,
# $VBLK_L2_APPEND), lwlog and crashw (built by meson in build/tests/system/)
# in $CRASHTEST_TOOLS (default $VBLK_FILES, else /files), dmsetup, busybox,
# and the modules dm-mod, dm-log-writes and loop (in the L1 image of
# scripts/nested: /lib/modules/l1/).
# Prints one line per disk ("CRASH-DISK ...") and last exactly one line
#   RESULT crashtest points=N lost=N control_points=N control_lost=N
# Status: 0 when lost=0, control_lost>0 and every sanity check held.
#
# Sourcing it defines crashtest_main (arguments as above) without running it
# (set CRASHTEST_SOURCED=1 before sourcing).

ct_log() { echo "# crashtest: $*"; }
ct_err() { echo "# crashtest: $*" >&2; }

# ct_setup_disk TAG SIZE_MIB: data + log files, loop devices, dm-log-writes
# target lw-TAG; prints the dm device path.
ct_setup_disk() {
    tag=$1; mib=$2
    rm -f "$W/$tag.data" "$W/$tag.log" "$W/$tag.base"
    truncate -s "${mib}M" "$W/$tag.data"
    case $tag in e*) # ext4 workload: the base image is a fresh file system
        /sbin/mke2fs -t ext4 -q -F -b 4096 -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 "$W/$tag.data" >&2 || return 1
        cp "$W/$tag.data" "$W/$tag.base" || return 1;;
    esac
    truncate -s "$((mib * 4))M" "$W/$tag.log"
    dl=$(losetup -f) && losetup "$dl" "$W/$tag.data" || return 1
    ll=$(losetup -f) && losetup "$ll" "$W/$tag.log" || return 1
    echo "$dl $ll" > "$W/$tag.loops"
    wc=$(cat /sys/block/${dl#/dev/}/queue/write_cache 2>/dev/null)
    [ "$wc" = "write back" ] || { ct_err "$dl has write_cache '$wc': flushes would vanish"; return 1; }
    dmsetup --noudevsync create "lw-$tag" --table "0 $((mib * 2048)) log-writes $dl $ll" || return 1
    for b in /sys/block/dm-*; do
        [ "$(cat "$b/dm/name" 2>/dev/null)" = "lw-$tag" ] && { dmdev=/dev/${b##*/}; break; }
    done
    i=0; while [ ! -b "$dmdev" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    [ -b "$dmdev" ] || return 1
    wc=$(cat /sys/block/${dmdev#/dev/}/queue/write_cache 2>/dev/null)
    [ "$wc" = "write back" ] || { ct_err "lw-$tag has write_cache '$wc'"; return 1; }
    dmsetup message "lw-$tag" 0 mark start || return 1
    echo "$dmdev"
}

# ct_finish_disk TAG: status, remove the target, detach the loops.
ct_finish_disk() {
    tag=$1
    st=$(dmsetup status "lw-$tag" 2>&1)
    echo "$st" > "$W/$tag.status"
    dmsetup --noudevsync remove "lw-$tag" || { sleep 1; dmsetup --noudevsync remove "lw-$tag"; }
    for l in $(cat "$W/$tag.loops"); do losetup -d "$l"; done
    case $st in *logging_disabled*) return 1;; esac
    return 0
}

# ct_boot NAME SWITCH DISKSPEC...: one L2 boot; DISKSPEC = TAG:CACHE:AIO:DP.
# SWITCH=1 toggles x-data-plane of every disk over QMP while the guest writes.
ct_boot() {
    name=$1; sw=$2; shift 2
    args=""; script=""; ndisk=0
    for spec in "$@"; do
        IFS=: read -r tag cache aio dp <<EOF
$spec
EOF
        mib=$CT_MIB; case $tag in e*) mib=$CT_EMIB;; esac
        dev=$(ct_setup_disk "$tag" "$mib") || { ct_log "setting up lw-$tag failed"; CT_SANE=0; return 1; }
        echo "$spec" >> "$W/$name.disks"
        args="$args -drive if=none,id=d-$tag,file=$dev,format=raw,cache=$cache,aio=$aio"
        if [ "$CT_VMM" = qemu ]; then # QEMU's dataplane is an iothread
            [ "$dp" = on ] && args="$args -object iothread,id=io-$tag" &&
                dp="off,iothread=io-$tag"
            args="$args -device virtio-blk-pci,id=disk-$tag,drive=d-$tag,serial=$tag${dp#off}"
        else
            args="$args -device virtio-blk-pci,id=disk-$tag,drive=d-$tag,x-data-plane=$dp,serial=$tag"
        fi
        ndisk=$((ndisk + 1))
    done
    # The guest's script, in an initramfs appended to the L2 image.
    rm -rf "$W/l2x"; mkdir -p "$W/l2x/bin" "$W/l2x/etc/vblk/scripts"
    cp "$TOOLS/crashw" "$W/l2x/bin/crashw"; chmod 755 "$W/l2x/bin/crashw"
    mkdir -p "$W/l2x/lib/modules/ct"
    for m in crc16 mbcache jbd2 crc32c_generic ext4; do
        [ -f "/lib/modules/l1/$m.ko" ] && cp "/lib/modules/l1/$m.ko" "$W/l2x/lib/modules/ct/"
    done
    cat > "$W/l2x/etc/vblk/scripts/crash.sh" <<EOF
for b in /sys/block/vd*; do
    d=\${b##*/}; tag=\$(cat \$b/serial)
    echo "CRASH-GUEST \$d tag=\$tag wc=\$(cat \$b/queue/write_cache | tr ' ' -)"
    case \$tag in
    e*) (for m in crc16 mbcache jbd2 crc32c_generic ext4; do insmod /lib/modules/ct/\$m.ko 2>/dev/null; done
         mkdir -p /mnt/\$tag && mount -t ext4 /dev/\$d /mnt/\$tag && crashw --fs /mnt/\$tag \$tag $CT_FILES $CT_FBATCH
         umount /mnt/\$tag; echo "CRASH-UMOUNT \$tag rc=\$?") &;;
    *) crashw /dev/\$d \$tag $CT_THREADS $CT_SLOTS $CT_RECORDS $CT_BATCH &;;
    esac
done
wait
EOF
    (cd "$W/l2x" && find . | cpio -o -H newc 2>/dev/null) > "$W/l2x.cpio"
    cat "$VBLK_L2_INITRD" "$W/l2x.cpio" > "$W/initrd"
    port=$((port + 1))
    ct_log "$name: booting L2 with $ndisk disks ($(date +%T))"
    # shellcheck disable=SC2086
    ( timeout -k 20 "$CT_TIMEOUT" $CT_VMMCMD -enable-kvm -m 512 -smp 1 -nographic -no-reboot \
        -kernel "$VBLK_L2_KERNEL" -initrd "$W/initrd" -append "$VBLK_L2_APPEND vblk.sh=crash" \
        $args -qmp tcp:127.0.0.1:$port,server=on,wait=off 2>&1; echo "CRASH-VBLK-RC $?" ) |
        "$TOOLS/lwlog" ackmark lw- > "$W/$name.out" 2>&1 &
    bpid=$!
    nsw=0
    if [ "$sw" = 1 ]; then
        i=0; while ! grep -q CRASHW-ACK "$W/$name.out" && kill -0 $bpid 2>/dev/null && [ $i -lt 600 ]; do
            sleep 0.5; i=$((i + 1)); done
        rm -f "$W/qin"; mkfifo "$W/qin"
        nc 127.0.0.1 "$port" <"$W/qin" >"$W/$name.qmp" 2>/dev/null &
        ncpid=$!
        exec 3>"$W/qin"
        echo '{"execute":"qmp_capabilities"}' >&3
        val=false
        while kill -0 $bpid 2>/dev/null && [ "$(grep -c CRASHW-DONE "$W/$name.out")" -lt $ndisk ]; do
            for spec in "$@"; do
                echo "{\"execute\":\"qom-set\",\"arguments\":{\"path\":\"/machine/peripheral/disk-${spec%%:*}\",\"property\":\"x-data-plane\",\"value\":$val}}" >&3
            done
            nsw=$((nsw + 1))
            if [ $val = false ]; then val=true; else val=false; fi
            sleep 0.3
        done
        exec 3>&-; sleep 1; kill $ncpid 2>/dev/null
    fi
    wait $bpid
    vrc=$(sed -n 's/.*CRASH-VBLK-RC \([0-9]*\).*/\1/p' "$W/$name.out" | tail -1)
    if [ "$sw" = 1 ]; then
        nerr=$(grep -c '"error"' "$W/$name.qmp")
        ct_log "$name: $nsw rounds of x-data-plane switches on $ndisk disks, $nerr QMP errors"
        [ "$nerr" -eq 0 ] || { CT_SANE=0; grep '"error"' "$W/$name.qmp" | head -3 | sed 's/^/#   /'; }
    fi
    ct_log "$name: $CT_VMM exited ${vrc:-?}; $(grep -c CRASHW-ACK "$W/$name.out") acks"
    [ "$vrc" = 0 ] || { CT_SANE=0; tail -n 15 "$W/$name.out" | sed 's/^/#   /'; }
    # Why the guest ended, when it did not finish its writers: a guest kernel
    # panic (the harness's rare L2 fault, docs/harness.md) or vblk's own
    # shutdown reason. inner.sh retries the section once on CRASH-PANIC.
    ndone=$(grep -c 'CRASHW-DONE .* rc=0' "$W/$name.out")
    if [ "$ndone" -lt "$#" ]; then
        ct_log "$name: only $ndone of $# writers finished"
        grep -m6 -E 'Kernel panic|BUG|Oops|RIP:|double fault|triple fault|SHUTDOWN|RESET|terminating|VBLK-EXIT|vblk:' "$W/$name.out" | sed 's/^/#   /'
        grep -q 'Kernel panic' "$W/$name.out" && echo "CRASH-PANIC boot=$name"
        tail -n 8 "$W/$name.out" | sed 's/^/#   tail: /'
    fi
    grep -q 'LWMARK-FAIL' "$W/$name.out" && { CT_SANE=0; grep -m3 LWMARK-FAIL "$W/$name.out" | sed 's/^/#   /'; }
    for spec in "$@"; do
        IFS=: read -r tag cache aio dp <<EOF
$spec
EOF
        ct_log "$name: checking lw-$tag ($(date +%T))"
        ct_finish_disk "$tag" || { ct_log "lw-$tag: $(cat "$W/$tag.status")"; CT_SANE=0; }
        case $tag in
        e*) # ext4: at each crash point, journal recovery on a copy, e2fsck -fn, acknowledged files intact
            cp "$W/$tag.base" "$W/$tag.replay"
            "$TOOLS/lwlog" check "$W/$tag.log" --threads 1 --slots 0 --replay "$W/$tag.replay" \
                --exec "sh $W/ext4point.sh" > "$W/$tag.check" 2>&1;;
        *)  truncate -s "${CT_MIB}M" "$W/$tag.replay"
            "$TOOLS/lwlog" check "$W/$tag.log" --threads "$CT_THREADS" --slots "$CT_SLOTS" \
                --replay "$W/$tag.replay" > "$W/$tag.check" 2>&1;;
        esac
        line=$(grep '^LWCHECK' "$W/$tag.check")
        val() { echo "$line" | sed -n "s/.* $1=\\([0-9]*\\).*/\\1/p"; }
        pts=$(val points); lp=$(val lost_points); miss=$(val missing); fl=$(val flushes); ma=$(val acks)
        ef=$(val exec_fail); lp=$((${lp:-0} + ${ef:-0}))
        gacks=$(grep -c "CRASHW-ACK $tag " "$W/$name.out")
        gdone=$(grep -c "CRASHW-DONE $tag rc=0" "$W/$name.out")
        gwc=$(sed -n "s/.*CRASH-GUEST .* tag=$tag wc=\\([a-z-]*\\).*/\\1/p" "$W/$name.out" | head -1)
        same=yes; cmp -s "$W/$tag.replay" "$W/$tag.data" || same=no
        mode=$dp; [ "$sw" = 1 ] && mode=switched
        echo "CRASH-DISK boot=$name tag=$tag cache=$cache aio=$aio dataplane=$mode points=${pts:-0} lost=${lp:-0}" \
             "missing_records=${miss:-0} flushes=${fl:-0} guest_acks=$gacks logged_acks=${ma:-0} guest_wc=${gwc:-?} replay_equals_disk=$same"
        grep -E '^(LWLOST|LWEXECFAIL|LWEXT4)' "$W/$tag.check" | head -4 | sed 's/^/#   /'
        # Sanity: the run did what it should, or its figures mean nothing.
        bad=""
        [ -n "$line" ] || bad="$bad no-check-output"
        [ "$gdone" = 1 ] || bad="$bad writer-failed"
        [ "$gacks" -gt 0 ] && [ "$gacks" = "${ma:-0}" ] || bad="$bad acks-not-all-logged"
        [ "$gwc" = write-back ] || bad="$bad guest-not-write-back"
        [ "$same" = yes ] || bad="$bad full-replay-differs"
        echo "$line" | grep -q 'complete=1' && echo "$line" | grep -q 'end_mark=1' || bad="$bad log-incomplete"
        if [ "$cache" = unsafe ]; then
            CT_CPOINTS=$((CT_CPOINTS + ${pts:-0})); CT_CLOST=$((CT_CLOST + ${lp:-0}))
        else
            [ "${fl:-0}" -gt 0 ] || bad="$bad no-flush-logged"
            CT_POINTS=$((CT_POINTS + ${pts:-0})); CT_LOST=$((CT_LOST + ${lp:-0}))
        fi
        [ -z "$bad" ] || { ct_log "lw-$tag: sanity check failed:$bad"; CT_SANE=0; tail -n 5 "$W/$tag.check" | sed 's/^/#   /'; }
        rm -f "$W/$tag.data" "$W/$tag.log" "$W/$tag.replay" "$W/$tag.base"
    done
}

crashtest_main() {
    quick=0
    [ "${1:-}" = --quick ] && quick=1
    TOOLS=${CRASHTEST_TOOLS:-${VBLK_FILES:-/files}}
    W=${CRASHTEST_WORK:-/tmp/crashtest}
    rm -rf "$W"; mkdir -p "$W"
    port=${CRASHTEST_PORT:-4540}
    CT_POINTS=0; CT_LOST=0; CT_CPOINTS=0; CT_CLOST=0; CT_SANE=1
    # Raw disks 64 MiB; the ext4 disk 16 MiB: each of its crash points copies
    # the image and runs e2fsck twice under TCG (about 4 s a point at 64 MiB).
    CT_MIB=64; CT_EMIB=16; CT_THREADS=2; CT_SLOTS=32
    if [ $quick = 1 ]; then
        CT_RECORDS=24; CT_BATCH=4; CT_FILES=12; CT_FBATCH=2; CT_TIMEOUT=${CRASHTEST_TIMEOUT:-400}
    else
        CT_RECORDS=${CRASHTEST_RECORDS:-120}; CT_BATCH=2; CT_FILES=30; CT_FBATCH=2; CT_TIMEOUT=${CRASHTEST_TIMEOUT:-900}
    fi
    for m in $(cat /etc/vblk-l1/dm-modules 2>/dev/null || echo dm-mod dm-log-writes loop); do
        [ -d "/sys/module/$(echo "$m" | tr - _)" ] && continue
        if [ -f "/lib/modules/l1/$m.ko" ]; then
            case $m in loop) insmod "/lib/modules/l1/$m.ko" max_loop=16;; *) insmod "/lib/modules/l1/$m.ko";; esac
        else
            modprobe "$m"
        fi
    done
    ifconfig lo 127.0.0.1 up 2>/dev/null || ip link set lo up 2>/dev/null
    # CRASHTEST_VMM=qemu: QEMU in L1 (scripts/nested --qemu) as the reference;
    # x-data-plane=on becomes an iothread, and there is no switch boot.
    CT_VMM=${CRASHTEST_VMM:-vblk}
    if [ "$CT_VMM" = qemu ]; then
        CT_VMMCMD="$VBLK_QEMU -cpu host -nodefaults -serial stdio -monitor none"; vmmbin=$VBLK_QEMU
    else
        CT_VMMCMD=$VBLK_BIN; vmmbin=$VBLK_BIN
    fi
    for t in "$vmmbin" "$TOOLS/lwlog" "$TOOLS/crashw"; do
        [ -x "$t" ] || { ct_log "missing $t"; echo "RESULT crashtest points=0 lost=0 control_points=0 control_lost=0"; return 1; }
    done
    command -v dmsetup >/dev/null && [ -c /dev/mapper/control ] ||
        { ct_log "no dmsetup or /dev/mapper/control"; echo "RESULT crashtest points=0 lost=0 control_points=0 control_lost=0"; return 1; }
    # The ext4 disk's check at each crash point (lwlog check --exec): a copy
    # of the replay, its journal replayed (e2fsck -E journal_only), then
    # e2fsck -fn must be clean and files f1..f$LW_ACKED intact (debugfs dump).
    CT_EXT4=0
    if [ -x /sbin/mke2fs ] && [ -x /sbin/e2fsck ] && [ -x /sbin/debugfs ] && ! [ -L /sbin/mke2fs ] &&
        [ -f /lib/modules/l1/ext4.ko ]; then
        CT_EXT4=1
    fi
    printf '[options]\n\tbroken_system_clock = 1\n' > "$W/e2fsck.conf"
    cat > "$W/ext4point.sh" <<EOF
export E2FSCK_CONFIG=$W/e2fsck.conf
cp "\$LW_TARGET" $W/pt.img || exit 1
/sbin/e2fsck -E journal_only -y $W/pt.img >$W/pt.jo 2>&1; r=\$?
[ \$r -le 1 ] || { echo "LWEXT4 entry=\$LW_ENTRY journal recovery status \$r"; exit 1; }
/sbin/e2fsck -fn $W/pt.img >$W/pt.fsck 2>&1 || { echo "LWEXT4 entry=\$LW_ENTRY e2fsck -fn status \$?"; sed 's/^/LWEXT4   /' $W/pt.fsck | head -8; exit 1; }
rm -rf $W/pt.d; mkdir $W/pt.d; : > $W/pt.cmd
i=1; while [ \$i -le \${LW_ACKED:-0} ]; do echo "dump /f\$i $W/pt.d/f\$i" >> $W/pt.cmd; i=\$((i + 1)); done
[ -s $W/pt.cmd ] && /sbin/debugfs -f $W/pt.cmd $W/pt.img >/dev/null 2>&1
$TOOLS/lwlog checkfiles $W/pt.d \${LW_ACKED:-0} > $W/pt.files; r=\$?
grep -v '^LWFILES' $W/pt.files | sed "s/^/LWEXT4 entry=\$LW_ENTRY /"
exit \$r
EOF
    ct_log "records per thread $CT_RECORDS, threads $CT_THREADS, fdatasync every $CT_BATCH records, $CT_SLOTS slots per thread"
    # Every disk: TAG:CACHE:AIO:X-DATA-PLANE. aio=native needs cache.direct=on (cache=none).
    # Tags starting with e run the ext4 workload (when e2fsprogs is in L1).
    e1=""; e2=""
    [ $CT_EXT4 = 1 ] && { e1=e1:none:native:on; e2=e2:writeback:io_uring:off; }
    [ $CT_EXT4 = 1 ] || ct_log "no mke2fs/e2fsck/debugfs or ext4.ko here: the ext4 workload is skipped"
    ct_boot a 0 n1:none:native:on n2:none:io_uring:off w1:writeback:io_uring:on w2:writeback:threads:off \
        u1:unsafe:io_uring:on $e1
    if [ $quick = 0 ]; then
        ct_boot b 0 n3:none:io_uring:on n4:none:native:off w3:writeback:io_uring:off w4:writeback:threads:off \
            u2:unsafe:threads:off $e2
        [ "$CT_VMM" = qemu ] || ct_boot c 1 s1:none:native:on s2:none:io_uring:off s3:writeback:io_uring:on s4:writeback:io_uring:off \
            u3:unsafe:io_uring:on
    fi
    st=0
    [ $CT_LOST -eq 0 ] || { st=1; ct_log "acknowledged writes lost at $CT_LOST crash points"; }
    [ $CT_CLOST -gt 0 ] || { st=1; ct_log "the negative control (cache=unsafe) lost nothing: the test cannot fail"; }
    [ $CT_SANE = 1 ] || { st=1; ct_log "a sanity check failed (see above)"; }
    echo "RESULT crashtest points=$CT_POINTS lost=$CT_LOST control_points=$CT_CPOINTS control_lost=$CT_CLOST"
    return $st
}

if [ -z "${CRASHTEST_SOURCED:-}" ]; then
    crashtest_main "$@"
fi
