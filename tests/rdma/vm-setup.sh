#!/bin/bash
# One-time preparation of the soft-RoCE test VM, kept in a cache outside the
# build tree ($PD_RDMA_VM_CACHE, default ~/.cache/pipedream-rdma-vm) so that
# repeated runs download and unpack nothing:
#   debs/                      the Debian packages, fetched with apt-get download
#   <kver>/vmlinux             the kernel, uncompressed (PVH boot: no in-guest decompression)
#   <kver>/modules/...         only the modules the VM loads, decompressed
#   <kver>/modules.load        their insmod order (dependencies first)
#   perftest/usr/bin/...       perftest's binaries (ib_write_bw), unpacked
# Nothing is installed on the host: apt-get download + dpkg -x only.
# Exit status: 0 ready; 77 something cannot be obtained here (the reason on
# stderr); 1 a step failed.
set -euo pipefail

CACHE=${PD_RDMA_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pipedream-rdma-vm}
# rxe needs crc32 at link creation (not in modules.dep); veth carries it.
WANT="configfs crc32_generic udp_tunnel ip6_udp_tunnel ib_core ib_uverbs iw_cm ib_cm rdma_cm rdma_ucm rdma_rxe veth"
# Loaded when the kernel has it: rxe's per-packet CRC with PCLMULQDQ, many
# times faster than the generic table under the emulator.
OPTIONAL="crc32-pclmul"

skip() { echo "vm-setup: $*" >&2; exit 77; }

for tool in apt-get apt-cache dpkg python3 busybox; do
    command -v "$tool" >/dev/null 2>&1 || skip "$tool is not installed"
done
mkdir -p "$CACHE/debs"
cd "$CACHE/debs"
# One preparation at a time (parallel make check runs share the cache).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$CACHE/.lock"
    flock 9
fi

# ---- perftest (the reference: ib_write_bw)
if [ ! -x "$CACHE/perftest/usr/bin/ib_write_bw" ]; then
    ls perftest_*.deb >/dev/null 2>&1 || apt-get download -q perftest >&2 ||
        skip "cannot download perftest with apt-get"
    rm -rf "$CACHE/perftest"
    dpkg -x perftest_*.deb "$CACHE/perftest"
fi

# ---- the kernel: reuse one prepared with this module list, else unpack a
# cached package, else download the current linux-image-amd64
for d in "$CACHE"/*/modules.want; do
    [ -f "$d" ] && [ "$(cat "$d")" = "$WANT $OPTIONAL" ] && [ -f "$(dirname "$d")/vmlinux" ] &&
        { basename "$(dirname "$d")"; exit 0; }
done
KPKG=$(ls linux-image-*-amd64_*.deb 2>/dev/null | grep -v cloud | sed 's/_.*//' | sort -V | tail -1)
if [ -z "$KPKG" ]; then
    KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    [ -n "$KPKG" ] || skip "apt-cache knows no linux-image-amd64 (no Debian package lists?)"
    case "$KPKG" in *cloud*) skip "$KPKG is a cloud kernel, which has no rdma_rxe" ;; esac
    apt-get download -q "$KPKG" >&2 || skip "cannot download $KPKG with apt-get"
fi
KVER=${KPKG#linux-image-}

tmp=$(mktemp -d "$CACHE/unpack.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
dpkg -x "${KPKG}"_*.deb "$tmp/root"
MODDIR="$tmp/root/lib/modules/$KVER"
[ -d "$MODDIR" ] || { echo "vm-setup: $KPKG has no lib/modules/$KVER" >&2; exit 1; }
# The .deb has no modules.dep (depmod runs in postinst) and the host may
# have no kmod: busybox depmod writes it.
busybox depmod -b "$tmp/root" "$KVER"

out="$tmp/$KVER"
mkdir -p "$out/modules"
declare -A seen
order=()
resolve() { # dependencies first
    local name=$1 path deps d
    path=$(grep -E "/$name\.ko(\.xz|\.zst)?:" "$MODDIR/modules.dep" | cut -d: -f1 | head -1)
    [ -n "$path" ] || { echo "vm-setup: module $name is not in $KPKG (no soft-RoCE?)" >&2; exit 1; }
    [ -n "${seen[$path]:-}" ] && return
    seen[$path]=1
    deps=$(grep -E "^$path:" "$MODDIR/modules.dep" | cut -d: -f2)
    for d in $deps; do
        d=$(basename "$d")
        resolve "${d%%.ko*}"
    done
    order+=("$path")
}
for m in $OPTIONAL; do # before rxe, so that its CRC is the fast one
    grep -q -E "/$m\.ko(\.xz|\.zst)?:" "$MODDIR/modules.dep" && resolve "$m"
done
for m in $WANT; do resolve "$m"; done
echo "$WANT $OPTIONAL" >"$out/modules.want"
: >"$out/modules.load"
for p in "${order[@]}"; do
    name=$(basename "$p")
    case "$p" in # newer kernels ship compressed modules; busybox insmod wants plain ones
    *.xz) xz -dc "$MODDIR/$p" >"$out/modules/${name%.xz}"; name=${name%.xz} ;;
    *.zst) zstd -qdc "$MODDIR/$p" >"$out/modules/${name%.zst}"; name=${name%.zst} ;;
    *) cp "$MODDIR/$p" "$out/modules/$name" ;;
    esac
    echo "$name" >>"$out/modules.load"
done

# Booting the ELF vmlinux through its PVH entry skips the real-mode loader
# and the XZ decompression, which cost seconds under TCG; a kernel packed
# otherwise boots as the bzImage it is (qemu's -kernel takes both).
python3 - "$tmp/root/boot/vmlinuz-$KVER" "$out/vmlinux" <<'PY' || cp "$tmp/root/boot/vmlinuz-$KVER" "$out/vmlinux"
import lzma, sys
data = open(sys.argv[1], 'rb').read()
for magic, fmt in ((b'\xfd7zXZ\x00', lzma.FORMAT_XZ),):
    off = data.find(magic)
    if off >= 0:
        elf = lzma.LZMADecompressor(format=fmt).decompress(data[off:])
        if elf[:4] == b'\x7fELF':
            open(sys.argv[2], 'wb').write(elf)
            sys.exit(0)
sys.exit("vm-setup: no XZ-compressed ELF inside " + sys.argv[1] + "; booting it as a bzImage")
PY
rm -rf "${CACHE:?}/$KVER"
mv "$out" "$CACHE/$KVER"
echo "$KVER"
