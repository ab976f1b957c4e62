# Lean fio for the guest: fio from Debian is linked (with BIND_NOW) against
# gluster, ceph, rdma, nbd and pmem libraries whose ldd closure is ~85 MB.
# The guest only uses the libaio, io_uring, psync and sync engines, so each of
# those libraries is replaced by a tiny stub .so with the same SONAME that
# exports exactly the (versioned) functions fio imports from it; every stub
# function traps if it is ever called (only the unused engines would call them).
#
# fio_lean_install ROOT [FIO]  installs fio + real small libs + stubs into ROOT.

# Libraries kept for real (small, and the engines we use need them).
FIO_KEEP_RE='^(libc|libm|libz|libaio|libnuma|ld-linux-x86-64)\.so'

# make_stub REAL_LIB BINARY OUT_SO : stub for REAL_LIB covering BINARY's imports.
make_stub() {
    local real=$1 bin=$2 out=$3 soname work defs
    soname=$(readelf -d "$real" | awk -F'[][]' '/SONAME/{print $2}')
    [ -n "$soname" ] || soname=$(basename "$real")
    work=$(mktemp -d)
    # Names the real library defines (any version).
    nm -D --defined-only "$real" | awk '{print $3}' | sed 's/@.*//' | sort -u > "$work/defs"
    # fio's imports, as name[@VERSION].
    nm -D --undefined-only "$bin" | awk '$1=="U"{print $2}' | sort -u > "$work/imports"
    : > "$work/stub.c"
    : > "$work/pairs"
    while IFS= read -r imp; do
        name=${imp%%@*}
        grep -qxF "$name" "$work/defs" || continue
        ver=""; [ "$imp" != "$name" ] && ver=${imp#*@}
        echo "void $name(void) { __builtin_trap(); }" >> "$work/stub.c"
        echo "$ver $name" >> "$work/pairs"
    done < "$work/imports"
    # Version script: one node per version fio asks for.
    defs=""
    for v in $(awk '$1!="" && NF==2 {print $1}' "$work/pairs" | sort -u); do
        defs+="$v { global: $(awk -v v="$v" 'NF==2 && $1==v {printf "%s; ", $2}' "$work/pairs") };"$'\n'
    done
    if [ -n "$defs" ]; then
        printf '%s' "$defs" > "$work/ver.map"
        gcc -shared -fPIC -nostdlib -O0 -o "$out" "$work/stub.c" -Wl,-soname,"$soname" \
            -Wl,--version-script,"$work/ver.map" || { rm -rf "$work"; return 1; }
    else
        gcc -shared -fPIC -nostdlib -O0 -o "$out" "$work/stub.c" -Wl,-soname,"$soname" ||
            { rm -rf "$work"; return 1; }
    fi
    rm -rf "$work"
}

fio_lean_install() {
    local root=$1 fio=${2:-$(command -v fio)} lib base
    [ -x "$fio" ] || vdie "fio not found (apt-get install fio)"
    need_cmd gcc nm readelf
    mkdir -p "$root/usr/bin"
    cp -L "$fio" "$root/usr/bin/fio"
    for lib in $(ldd "$fio" | awk '$2=="=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
        base=$(basename "$lib")
        mkdir -p "$root$(dirname "$lib")"
        if [[ $base =~ $FIO_KEEP_RE ]]; then
            cp -L "$lib" "$root$lib"
            # their own dependencies (e.g. libnuma -> libc) are in the keep set
        elif readelf -d "$fio" | grep -q "NEEDED.*\[$base\]"; then
            make_stub "$lib" "$fio" "$root$lib" || vdie "stub for $base failed"
        fi
        # indirect dependencies of stubbed libraries are simply not copied
    done
}
