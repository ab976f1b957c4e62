#!/bin/sh
# Alternated boots of tests/system/t-flushload.sh variants in one L1: whose
# crash is it, vblk's or the harness's? Each round boots every variant once,
# in order, so host load and L1 age fall on all of them alike. By hand:
#
#   scripts/nested --qemu --fs ext4 --disk-size 2G --timeout 5400 --silence 600 \
#       --file tests/system/t-flushload.sh -- \
#       env ALT_ROUNDS=12 ALT_VARIANTS="qemu vblk" FL_DISK=nbd FL_JOB=verify FL_SMP=1 \
#       tests/system/t-alternate.sh
#
# Variants (ALT_VARIANTS, space-separated; the FL_* environment of the caller
# applies to all of them, a variant sets only what it names):
#   qemu           QEMU 7.2 with an iothread (FL_VMM=qemu FL_DP=on), stop/cont
#   vblk           vblk, dataplane at boot, x-data-plane flipped every 0.3 s
#   vblk-noswitch  vblk, dataplane, no switching and no stop/cont (no QMP load)
#   vblk-off       vblk, block layer at boot, switching
# Each boot prints "T-ALT round=R variant=V result=..." (t-flushload's result
# classes: pass, triple-fault, fio-fail, hang, ...); the last lines are one
# "T-ALT-SUMMARY variant=V boots=N pass=P other=..." per variant.
ALT_ROUNDS=${ALT_ROUNDS:-6}
ALT_VARIANTS=${ALT_VARIANTS:-qemu vblk}
here=$(dirname "$0")
fl=$here/t-flushload.sh
[ -f "$fl" ] || fl=/files/t-flushload.sh
sumdir=$(mktemp -d)
port=5100
r=1
while [ "$r" -le "$ALT_ROUNDS" ]; do
    for v in $ALT_VARIANTS; do
        case $v in
        qemu) set -- FL_VMM=qemu FL_DP=on ;;
        vblk) set -- FL_VMM=vblk FL_DP=on FL_SWITCH=1 ;;
        vblk-noswitch) set -- FL_VMM=vblk FL_DP=on FL_SWITCH=0 FL_STOPCONT=0 ;;
        vblk-off) set -- FL_VMM=vblk FL_DP=off FL_SWITCH=1 ;;
        *) echo "t-alternate: unknown variant $v" >&2; exit 2 ;;
        esac
        port=$((port + 20))
        t0=$(date +%s)
        out=$(env "$@" FL_RUNS=1 FL_VERIFY_ONLY=0 FL_PORT=$port sh "$fl" 2>&1)
        line=$(echo "$out" | grep '^T-FLUSHLOAD run=' | tail -n 1)
        res=$(echo "$line" | sed -n 's/.*result=\([^ ]*\).*/\1/p')
        [ -n "$res" ] || res=no-result
        echo "T-ALT round=$r variant=$v result=$res secs=$(($(date +%s) - t0)) ${line#T-FLUSHLOAD run=1 }"
        # a failed boot's own lines (its state dumps, the guest's last words)
        [ "$res" = pass ] || echo "$out" | grep -v "^T-FLUSHLOAD" | tail -n 160 | sed 's/^/#   /'
        echo "$res" >>"$sumdir/$v"
    done
    r=$((r + 1))
done
for v in $ALT_VARIANTS; do
    n=$(wc -l <"$sumdir/$v")
    p=$(grep -c '^pass$' "$sumdir/$v")
    other=$(grep -v '^pass$' "$sumdir/$v" | sort | uniq -c | awk '{printf "%s%s:%s", s, $2, $1; s=","}')
    echo "T-ALT-SUMMARY variant=$v boots=$n pass=$p other=${other:-none}"
done
rm -rf "$sumdir"
