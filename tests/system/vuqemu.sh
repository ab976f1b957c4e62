#!/bin/sh
# A real vhost-user-blk front end in L1: QEMU 7.2 (scripts/nested --qemu puts it
# in L1) boots the guest image with its RAM in a shared memfd and one
# vhost-user-blk-pci disk (two queues) on a storage daemon's socket; the guest
# runs fio 4 KiB randwrite QD32 with crc32c verify on /dev/vda.
# POSIX sh (busybox). Sourced by inner.sh (section 20), or run alone:
#   sh vuqemu.sh vblk|qsd [restart]
# VUQ_DAEMON is the daemon binary; "restart" kills it with SIGKILL while fio
# runs and starts it again on the same socket: QEMU (chardev reconnect=1)
# reconnects, and fio must still verify.
#
# vuq_run NAME KIND RESTART: KIND = vblk (vblk-storage-daemon) or qsd
# (qemu-storage-daemon, the peer, when it is in L1). Sets vuq_rc (0 pass) and
# vuq_why; everything is logged in $VUQ_DIR/NAME.*.

vuq_log() { echo "# vuqemu: $*"; }

# vuq_daemon KIND NAME: start the daemon in the background (vuq_dpid).
vuq_daemon() {
    case $1 in
    vblk) bin=${VUQ_VBLK_DAEMON:-/files/vblk-storage-daemon};;
    qsd)  bin=${VUQ_QSD:-qemu-storage-daemon};;
    esac
    rm -f "$VUQ_DIR/$2.pid"
    "$bin" \
        --blockdev driver=file,node-name=disk,filename="$VUQ_DIR/$2.img",cache.direct=on,aio=native \
        --object iothread,id=io0 \
        --export type=vhost-user-blk,id=exp0,node-name=disk,addr.type=unix,addr.path="$VUQ_DIR/$2.sock",writable=on,num-queues=2,iothread=io0 \
        --pidfile "$VUQ_DIR/$2.pid" >>"$VUQ_DIR/$2.daemon" 2>&1 &
    vuq_dpid=$!
    i=0; while ! [ -S "$VUQ_DIR/$2.sock" ] && kill -0 $vuq_dpid 2>/dev/null && [ $i -lt 100 ]; do
        sleep 0.1; i=$((i + 1)); done
    [ -S "$VUQ_DIR/$2.sock" ]
}

vuq_run() {
    name=$1; kind=$2; restart=$3
    vuq_rc=1; vuq_why=""; t0=$(date +%s)
    : > "$VUQ_DIR/$name.daemon"
    rm -f "$VUQ_DIR/$name.sock"
    truncate -s 256M "$VUQ_DIR/$name.img"
    vuq_daemon "$kind" "$name" || { vuq_why="$kind daemon did not start"; tail -n 5 "$VUQ_DIR/$name.daemon" | sed 's/^/#   /'; return; }
    # shellcheck disable=SC2086
    timeout -k 10 "${VUQ_TIMEOUT:-400}" "$VBLK_QEMU" -enable-kvm -cpu host -m 512 -smp 1 -nodefaults \
        -nographic -serial stdio -monitor none -no-reboot \
        -object memory-backend-memfd,id=mem,size=512M,share=on -numa node,memdev=mem \
        -chardev socket,id=vu0,path="$VUQ_DIR/$name.sock",reconnect=1 \
        -device vhost-user-blk-pci,chardev=vu0,num-queues=2 \
        -kernel "$VBLK_L2_KERNEL" -initrd "$VBLK_L2_INITRD" \
        -append "$VBLK_L2_APPEND vblk.job=verify-4k-qd32 vblk.dev=/dev/vda vblk.engine=libaio vblk.vsize=64M vblk.timeout=300" \
        >"$VUQ_DIR/$name.console" 2>&1 &
    qpid=$!
    nkill=0
    if [ "$restart" = restart ]; then
        # Once fio has written for a few seconds: SIGKILL, then the same daemon
        # again on the same socket and image (vblk's inflight region lets
        # QEMU's requests in flight complete exactly once).
        i=0; while ! grep -q 'VBLK-FIO-JOB' "$VUQ_DIR/$name.console" && kill -0 $qpid 2>/dev/null && [ $i -lt 300 ]; do
            sleep 1; i=$((i + 1)); done
        sleep 4
        if kill -0 $qpid 2>/dev/null; then
            kill -9 $vuq_dpid 2>/dev/null; wait $vuq_dpid 2>/dev/null
            nkill=1
            echo "VUQ-RESTART at $(date +%T)" >> "$VUQ_DIR/$name.daemon"
            vuq_daemon "$kind" "$name" || vuq_why="$kind daemon did not start again"
        fi
    fi
    wait $qpid; qrc=$?
    kill $vuq_dpid 2>/dev/null; wait $vuq_dpid 2>/dev/null
    c=$VUQ_DIR/$name.console
    grep -E 'VBLK-INFO vda|VBLK-FIO-RC|VBLK-EXIT' "$c" | head -n 3 | sed 's/^/#   /'
    vuq_log "$name: $(($(date +%s) - t0)) s, qemu status $qrc, daemon killed and restarted $nkill times"
    if [ -n "$vuq_why" ]; then :
    elif [ "$restart" = restart ] && [ $nkill = 0 ]; then vuq_why="the guest ended before the daemon was killed"
    elif grep -q 'Kernel panic' "$c"; then vuq_why="guest kernel panic"
    elif ! grep -q 'VBLK-FIO-RC name=verify-4k-qd32 rc=0' "$c"; then vuq_why="no passing fio verify (qemu status $qrc)"
    elif ! grep -q 'VBLK-EXIT 0' "$c"; then vuq_why="the guest did not finish (qemu status $qrc)"
    elif [ $qrc -ne 0 ]; then vuq_why="qemu status $qrc"
    elif grep -qi 'error' "$VUQ_DIR/$name.daemon" && [ "$kind" = vblk ]; then
        vuq_why="the daemon logged an error"
    else
        vuq_rc=0
    fi
    if [ $vuq_rc -ne 0 ]; then
        tail -n 12 "$c" | sed 's/^/#   console: /'
        tail -n 6 "$VUQ_DIR/$name.daemon" | sed 's/^/#   daemon: /'
    fi
    rm -f "$VUQ_DIR/$name.img"
}

if [ -z "${VUQ_SOURCED:-}" ]; then
    VUQ_DIR=${VUQ_DIR:-/tmp/vuqemu}; mkdir -p "$VUQ_DIR"
    vuq_run "vuq-$1" "$1" "${2:-}"
    echo "VUQ-RESULT kind=$1 restart=${2:-no} rc=$vuq_rc ${vuq_why:+why=\"$vuq_why\"}"
    exit $vuq_rc
fi
