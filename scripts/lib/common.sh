# Shared helpers for scripts/guest-image, scripts/nested and scripts/bench-guest.
# Sourced by bash scripts; not executable on its own.
#
# Cache directory: $VBLK_CACHE, default $HOME/.cache/vblk (falls back to
# <repo>/build/cache when $HOME is unset or not writable).

VBLK_TOP=${VBLK_TOP:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
if [ -z "${VBLK_CACHE:-}" ]; then
    if [ -n "${HOME:-}" ] && mkdir -p "$HOME/.cache/vblk" 2>/dev/null && [ -w "$HOME/.cache/vblk" ]; then
        VBLK_CACHE=$HOME/.cache/vblk
    else
        VBLK_CACHE=$VBLK_TOP/build/cache
    fi
fi
mkdir -p "$VBLK_CACHE"
export VBLK_CACHE

# Progress goes to stderr so stdout stays machine-readable.
vlog() { [ "${VBLK_QUIET:-0}" = 1 ] || printf '[%s %s] %s\n' "${VBLK_PROG:-vblk}" "$(date +%T)" "$*" >&2; }
vdie() { printf '[%s] error: %s\n' "${VBLK_PROG:-vblk}" "$*" >&2; exit 1; }

# Serialise cache builds between concurrent runs: cache_lock NAME takes an
# exclusive flock on $VBLK_CACHE/NAME.lock, held until cache_unlock or exit.
cache_lock() {
    exec {CACHE_LOCK_FD}>"$VBLK_CACHE/$1.lock"
    if ! flock -n "$CACHE_LOCK_FD"; then
        vlog "waiting for another build ($1.lock)"
        flock "$CACHE_LOCK_FD"
    fi
}
cache_unlock() { [ -n "${CACHE_LOCK_FD:-}" ] && exec {CACHE_LOCK_FD}>&- && CACHE_LOCK_FD=""; return 0; }

# sha256 of stdin, first 16 hex digits.
vhash() { sha256sum | cut -c1-16; }

# Version of an installed Debian package, or "none".
dpkg_ver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo none; }

need_cmd() {
    local c
    for c in "$@"; do command -v "$c" >/dev/null 2>&1 || vdie "missing command '$c' (run scripts/setup-deps)"; done
}

# Resolve the versioned kernel package behind linux-image-amd64.
# Honours $VBLK_KERNEL_PKG. Runs apt-get update once if the lists are empty.
kernel_pkg_name() {
    if [ -n "${VBLK_KERNEL_PKG:-}" ]; then echo "$VBLK_KERNEL_PKG"; return; fi
    local p
    p=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    if [ -z "$p" ]; then
        vlog "apt lists empty: running apt-get update"
        apt-get update -qq >&2 || true
        p=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    fi
    if [ -z "$p" ]; then
        # Offline fallback: newest kernel already in the cache.
        p=$(ls -1d "$VBLK_CACHE"/kernel/linux-image-* 2>/dev/null | sort -V | tail -1)
        p=${p##*/}; p=${p%%_*}
    fi
    [ -n "$p" ] || vdie "cannot resolve the kernel package from 'apt-cache depends linux-image-amd64'"
    echo "$p"
}

# Download (apt-get download, no install) and unpack the kernel image package
# into $VBLK_CACHE/kernel/<pkg>_<ver>/ . Sets KDIR (unpacked root), KREL
# (uname -r of the guest kernel), KVMLINUZ, KMODS and KPKGID (pkg_ver).
# kernel_fetch's extra module sets: TAG WHAT PATTERN... unpacks the members
# matching PATTERN from the package into $dir unless $dir/.done-TAG exists.
# Uses kernel_fetch's locals dir, pkg, ver and tmp (the download, made once).
kernel_fetch_extra() {
    local tag=$1 what=$2
    shift 2
    [ ! -f "$dir/.done-$tag" ] || return 0
    vlog "fetching $what of $pkg $ver"
    if [ -z "$tmp" ]; then
        tmp=$(mktemp -d "$VBLK_CACHE/dl.XXXXXX")
        chmod 755 "$tmp"
        (cd "$tmp" && apt-get download -q "$pkg=$ver" >/dev/null 2>&1) ||
            (cd "$tmp" && apt-get download "$pkg=$ver" >&2) || { rm -rf "$tmp"; vdie "apt-get download $pkg failed"; }
    fi
    dpkg-deb --fsys-tarfile "$(ls "$tmp"/*.deb | head -1)" | tar -x -C "$dir" --wildcards "$@" ||
        { rm -rf "$tmp"; vdie "unpacking $what failed"; }
    touch "$dir/.done-$tag"
}

kernel_fetch() {
    local pkg ver dir deb tmp stamp memo=$VBLK_CACHE/kernel/resolved
    # apt-cache takes ~2 s: remember its answer until the apt lists change.
    stamp="$( (stat -c %Y /var/lib/apt/lists /var/cache/apt/pkgcache.bin 2>/dev/null || true) | tr "\n" " ")${VBLK_KERNEL_PKG:-}"
    if [ -f "$memo" ] && [ "$(sed -n 1p "$memo")" = "$stamp" ]; then
        pkg=$(sed -n 2p "$memo"); ver=$(sed -n 3p "$memo")
    else
        pkg=$(kernel_pkg_name)
        ver=$(apt-cache show --no-all-versions "$pkg" 2>/dev/null | awk '/^Version:/{print $2; exit}')
        if [ -n "$ver" ]; then
            mkdir -p "$VBLK_CACHE/kernel"
            printf '%s\n%s\n%s\n' "$stamp" "$pkg" "$ver" > "$memo.$$" && mv "$memo.$$" "$memo"
        fi
    fi
    if [ -z "$ver" ]; then
        dir=$(ls -1d "$VBLK_CACHE/kernel/${pkg}_"* 2>/dev/null | sort -V | tail -1)
        [ -n "$dir" ] || vdie "no version for $pkg and nothing cached"
        ver=${dir##*_}
    fi
    KPKGID=${pkg}_${ver}
    dir=$VBLK_CACHE/kernel/$KPKGID
    tmp="" # the package's download, kept for kernel_fetch_extra
    if [ ! -f "$dir/.done2" ]; then
        vlog "downloading $pkg $ver (apt-get download, not installed)"
        rm -rf "$dir"; mkdir -p "$dir"
        tmp=$(mktemp -d "$VBLK_CACHE/dl.XXXXXX")
        chmod 755 "$tmp"
        (cd "$tmp" && apt-get download -q "$pkg=$ver" >/dev/null 2>&1) ||
            (cd "$tmp" && apt-get download "$pkg=$ver" >&2) || { rm -rf "$tmp"; vdie "apt-get download $pkg failed"; }
        deb=$(ls "$tmp"/*.deb | head -1)
        vlog "unpacking the kernel and the modules we need (dpkg-deb -x subset)"
        dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dir" --wildcards \
            './boot/vmlinuz-*' './boot/config-*' \
            './lib/modules/*/kernel/drivers/virtio/*' \
            './lib/modules/*/kernel/drivers/block/virtio_blk.ko' \
            './lib/modules/*/kernel/drivers/acpi/button.ko' \
            './lib/modules/*/kernel/arch/x86/kvm/*' \
            './lib/modules/*/kernel/virt/lib/irqbypass.ko' \
            './lib/modules/*/kernel/drivers/crypto/ccp/ccp.ko' \
            './lib/modules/*/kernel/fs/ext4/ext4.ko' './lib/modules/*/kernel/fs/jbd2/jbd2.ko' \
            './lib/modules/*/kernel/fs/mbcache.ko' './lib/modules/*/kernel/lib/crc16.ko' \
            './lib/modules/*/kernel/crypto/crc32c_generic.ko' \
            || { rm -rf "$tmp"; vdie "unpacking $deb failed"; }
        touch "$dir/.done2"
    fi
    # Modules added after the first download, fetched into an existing cache
    # without redoing it; the package is downloaded at most once per call.
    kernel_fetch_extra acpi "the ACPI button module" './lib/modules/*/kernel/drivers/acpi/button.ko'
    # the power-loss test (scripts/crashtest)
    kernel_fetch_extra dm "the dm-mod, dm-log-writes and loop modules" \
        './lib/modules/*/kernel/drivers/md/dm-mod.ko' './lib/modules/*/kernel/drivers/md/dm-log-writes.ko' \
        './lib/modules/*/kernel/drivers/block/loop.ko'
    # scripts/nested --net: L1's virtio-net card on QEMU's user-mode network
    kernel_fetch_extra net "the virtio_net, net_failover and failover modules" \
        './lib/modules/*/kernel/drivers/net/virtio_net.ko' './lib/modules/*/kernel/drivers/net/net_failover.ko' \
        './lib/modules/*/kernel/net/core/failover.ko'
    [ -z "$tmp" ] || rm -rf "$tmp"
    KDIR=$dir
    KVMLINUZ=$(ls "$dir"/boot/vmlinuz-* | head -1)
    KREL=${KVMLINUZ##*/vmlinuz-}
    KMODS=$dir/lib/modules/$KREL/kernel
}

# Copy an ELF binary and its ldd closure into root dir $1 at the same paths.
# Usage: copy_elf ROOT SRC [DEST_IN_ROOT]
copy_elf() {
    local root=$1 src=$2 dst=${3:-$2} lib
    mkdir -p "$root$(dirname "$dst")"
    cp -L "$src" "$root$dst"
    for lib in $(ldd "$src" 2>/dev/null | awk '$2=="=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
        [ -e "$root$lib" ] && continue
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
}

# Make a newc cpio of directory $1 into file $2 (uncompressed, or gzip when $3=gz).
make_cpio() {
    local dir=$1 out=$2 comp=${3:-none}
    (cd "$dir" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) > "$out.tmp.$$" ||
        vdie "cpio failed for $dir"
    case $comp in
        gz) gzip -1 -c "$out.tmp.$$" > "$out.tmp2.$$" && rm -f "$out.tmp.$$" && mv "$out.tmp2.$$" "$out" ;;
        *) mv "$out.tmp.$$" "$out" ;;
    esac
}

# The vblk binary: $VBLK_BIN_HOST, else build/src/vblk, else build/src/vmm/vblk
# (where meson puts it today). Prints nothing when there is none.
find_vblk_bin() {
    local c
    for c in "${VBLK_BIN_HOST:-}" "$VBLK_TOP/build/src/vblk" "$VBLK_TOP/build/src/vmm/vblk"; do
        [ -n "$c" ] && [ -x "$c" ] && [ -f "$c" ] && { echo "$c"; return 0; }
    done
    return 0
}

# Does this host's /dev/kvm run a stock Linux guest? (hardware VT-x/AMD-V, no kvm_pvm)
host_has_hw_kvm() {
    [ -e /dev/kvm ] || return 1
    [ -d /sys/module/kvm_pvm ] && return 1
    grep -qE '^flags.*\b(vmx|svm)\b' /proc/cpuinfo || return 1
    return 0
}
