#!/bin/sh
# vblk-fio NAME|FILE [fio args...]: run one fio job file in the guest and print
# its JSON between markers. NAME is a baked job (/etc/vblk/jobs/NAME.fio).
# Prints: VBLK-FIO-JOB name=<n> / ===VBLK-FIO-JSON-BEGIN=== / json / ===VBLK-FIO-JSON-END=== /
#         VBLK-FIO-RC name=<n> rc=<fio exit status>
j=$1; shift
case $j in
    */*) f=$j; name=$(basename "$j" .fio);;
    *) f=/etc/vblk/jobs/$j.fio; name=$j;;
esac
[ -f "$f" ] || { echo "VBLK-FIO-RC name=$name rc=2 (no such job)"; exit 2; }
echo "VBLK-FIO-JOB name=$name"
fio --eta=never --output-format=json --output=/tmp/fio.$$.json "$@" "$f"; rc=$?
echo "===VBLK-FIO-JSON-BEGIN==="
# drop fio's notes before the JSON object and the indentation (the serial line is slow)
sed -n '/^{/,$p' /tmp/fio.$$.json | sed 's/^[ \t]*//'
echo "===VBLK-FIO-JSON-END==="
echo "VBLK-FIO-RC name=$name rc=$rc"
rm -f /tmp/fio.$$.json
exit $rc
