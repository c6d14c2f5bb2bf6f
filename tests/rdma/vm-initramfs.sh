#!/bin/bash
# Builds the soft-RoCE test VM's initramfs (an uncompressed cpio: the kernel
# unpacks it faster than a compressed one under TCG):
#   vm-initramfs.sh BUILD_DIR KERNEL_DIR OUT.cpio
# BUILD_DIR is a configured and built pipedream tree (its test_transport
# and pipedream are copied with the shared libraries ldd names, and Open
# MPI with them when pipedream links it), KERNEL_DIR
# what vm-setup.sh prepared (<cache>/<kver>); the host supplies busybox
# (static), iproute2's ip and rdma, and the rxe provider of libibverbs; the
# cache supplies perftest's ib_write_bw.
# Exit status: 0 built; 77 a host part is missing (the reason on stderr).
set -euo pipefail

B=$(cd "$1" && pwd)
K=$(cd "$2" && pwd)
OUT=$3
CACHE=$(dirname "$K")
HERE=$(cd "$(dirname "$0")" && pwd)
LIBDIR=/usr/lib/x86_64-linux-gnu

skip() { echo "vm-initramfs: $*" >&2; exit 77; }

# libtool keeps the real programs in .libs when libpipedream is shared.
program() {
    local p
    for p in "$B/$1/.libs/$2" "$B/$1/$2"; do
        if [ -f "$p" ] && head -c4 "$p" | grep -q ELF; then echo "$p"; return; fi
    done
    echo "vm-initramfs: $B/$1/$2 is not built" >&2
    exit 1
}
TEST=$(program tests/unit test_transport)
GPUTEST=$(program tests/unit test_transport_gpu)
PIPEDREAM=$(program src/cli pipedream)
IB_WRITE_BW=$CACHE/perftest/usr/bin/ib_write_bw
[ -x "$IB_WRITE_BW" ] || skip "perftest is not unpacked in $CACHE (run vm-setup.sh)"
BUSYBOX=$(command -v busybox) || skip "busybox is not installed (apt-get install busybox-static)"
ldd "$BUSYBOX" >/dev/null 2>&1 && skip "$BUSYBOX is dynamically linked (apt-get install busybox-static)"
IP=$(readlink -f "$(command -v ip || echo /sbin/ip)")
RDMA=$(command -v rdma) || skip "iproute2's rdma tool is not installed (apt-get install iproute2)"
[ -x "$IP" ] || skip "iproute2's ip is not installed"
PROVIDER=$(ls "$LIBDIR"/libibverbs/librxe-rdmav*.so 2>/dev/null | head -1)
[ -n "$PROVIDER" ] && [ -f /etc/libibverbs.d/rxe.driver ] ||
    skip "the soft-RoCE provider of libibverbs is not installed (apt-get install ibverbs-providers)"

R=$(mktemp -d "${TMPDIR:-/tmp}/pd-rdma-initramfs.XXXXXX")
trap 'rm -rf "$R"' EXIT
mkdir -p "$R"/usr/{bin,sbin,lib64,lib/modules} "$R$LIBDIR/libibverbs" "$R"/{etc/libibverbs.d,proc,sys,dev,tmp,run,root}
for d in bin sbin lib lib64; do ln -s "usr/$d" "$R/$d"; done # merged /usr, as ldd names the paths

cp "$BUSYBOX" "$R/usr/bin/busybox"
for a in $("$BUSYBOX" --list); do
    [ -e "$R/usr/bin/$a" ] || ln -s busybox "$R/usr/bin/$a"
done
rm -f "$R/usr/bin/ip" # iproute2's (busybox's cannot make veth pairs); /init calls it by full path
cp "$IP" "$R/usr/sbin/ip"
cp "$RDMA" "$R/usr/bin/rdma"
cp "$TEST" "$R/usr/bin/test_transport"
cp "$GPUTEST" "$R/usr/bin/test_transport_gpu"
cp "$PIPEDREAM" "$R/usr/bin/pipedream"
cp "$IB_WRITE_BW" "$R/usr/bin/ib_write_bw"
cp -L "$PROVIDER" "$R$LIBDIR/libibverbs/"
cp /etc/libibverbs.d/rxe.driver "$R/etc/libibverbs.d/"

# Open MPI, for a pipeline job in the guest, when pipedream links libmpi
# and the host has Open MPI's launcher: its components are dlopen()ed, so
# its whole library tree goes (static archives left out), with what every
# component links, its help texts and its configuration.
MPI_FILES=()
if LD_LIBRARY_PATH="$B/src/.libs" ldd "$PIPEDREAM" | grep -q 'libmpi\.so' && [ -x /usr/bin/orterun ] &&
    [ -d "$LIBDIR/openmpi/lib" ]; then
    cp /usr/bin/orterun "$R/usr/bin/orterun"
    ln -s orterun "$R/usr/bin/mpirun"
    for d in openmpi pmix2; do
        [ -d "$LIBDIR/$d" ] && cp -a "$LIBDIR/$d" "$R$LIBDIR/"
    done
    find "$R$LIBDIR" -name '*.a' -delete
    mkdir -p "$R/usr/share"
    cp -a /usr/share/openmpi "$R/usr/share/"
    cp -a /etc/openmpi "$R/etc/"
    mapfile -t MPI_FILES < <(find "$LIBDIR/openmpi" "$LIBDIR/pmix2" -name '*.so' -type f 2>/dev/null)
    MPI_FILES+=(/usr/bin/orterun)
else
    echo "vm-initramfs: pipedream without MPI, or no Open MPI here: the guest runs no pipeline job" >&2
fi

# Shared libraries (libpipedream from the build tree); libgcc_s is
# dlopen()ed by glibc for thread cancellation, so ldd does not list it.
{
    for f in "$TEST" "$GPUTEST" "$PIPEDREAM" "$IB_WRITE_BW" "$IP" "$RDMA" "$PROVIDER" "${MPI_FILES[@]}"; do
        LD_LIBRARY_PATH="$B/src/.libs" ldd "$f"
    done
    echo " libgcc_s.so.1 => $LIBDIR/libgcc_s.so.1"
} | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3} $1 ~ /^\/lib64\// {print "loader", $1}' | sort -u |
    while read -r soname path; do
        case "$path" in
        /lib64/*) cp -L "$path" "$R/usr/lib64/" ;;
        *) cp -L "$path" "$R$LIBDIR/$soname" ;;
        esac
    done

cp -r "$K/modules" "$R/usr/lib/modules/rdma"
cp "$K/modules.load" "$R/etc/modules.load"
cp "$HERE/vm-init" "$R/init"
chmod 755 "$R/init"
(cd "$R" && find . -print0 | "$BUSYBOX" cpio -0 -o -H newc -R 0:0 2>/dev/null) >"$OUT"
