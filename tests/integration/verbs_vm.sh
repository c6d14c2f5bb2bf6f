#!/bin/bash
# The verbs backend for real: a qemu VM (TCG; no KVM or RDMA needed on the
# host) boots Debian's kernel with soft-RoCE (rdma_rxe) and runs, in one
# guest, the transport unit test over verbs (PD_TRANSPORT=verbs; with a
# real rdmacm reject falling back to tcp), test_transport_gpu (the peermem
# path), a 2-rank pipeline job over verbs under mpirun, in host memory and
# in device memory on the peermem path (its losses equal to the same job's
# over tcp; with an MPI build, which also runs the benchmark over verbs
# between the two ranks of mpirun), and `pipedream bench transport --backend
# verbs` against perftest's ib_write_bw (tests/rdma/ has the scripts and
# says how). The kernel and perftest come from Debian's archive with
# apt-get download into a cache outside the build ($PD_RDMA_VM_CACHE,
# default ~/.cache/pipedream-rdma-vm); cached, a run takes about 115 s.
# Skips (77), saying why, without a verbs build, qemu, busybox-static or
# the packages. Per size (64 KiB, 256 KiB, 1 MiB, 4 MiB) five rounds of
# 32 MiB alternate the channel (depth 32) and ib_write_bw in the same boot;
# printed is the median of the rounds' ratios with their range, against the
# 0.90 target, not judged (emulated RDMA on shared cores is too noisy for a
# threshold: on a loaded host one build's medians went from 0.45 to 0.86 at
# 64 KiB), unless $PD_VM_MIN_RATIO sets a floor for the medians. Extra guest
# knobs: PD_VM_ARGS="pdvm.sizes=65536 pdvm.rounds=9 pdvm.depth=8,32 ..."
# (tests/rdma/vm-init).
set -u
: "${top_builddir:?run under make check}" "${top_srcdir:?run under make check}"
rdma="$top_srcdir/tests/rdma"
cache=${PD_RDMA_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pipedream-rdma-vm}
min_ratio=${PD_VM_MIN_RATIO:-0}

skip() {
    echo "SKIP: $*"
    exit 77
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

grep -q '^#define HAVE_VERBS 1' "$top_builddir/config.h" && grep -q '^#define HAVE_RDMACM 1' "$top_builddir/config.h" ||
    skip "this build has no verbs backend (configure found no libibverbs + librdmacm)"
[ "$(uname -m)" = x86_64 ] || skip "the VM recipe is for x86_64 hosts"
command -v qemu-system-x86_64 >/dev/null 2>&1 ||
    skip "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)"

t0=$(now)
kver=$(PD_RDMA_VM_CACHE="$cache" "$rdma/vm-setup.sh")
rc=$?
[ $rc -eq 77 ] && skip "the VM's kernel or perftest cannot be had here (see above)"
[ $rc -eq 0 ] || { echo "FAIL: vm-setup.sh exit status $rc"; exit 1; }
echo "# setup (cached after the first run): $(since "$t0") s, kernel $kver"

work=$(mktemp -d "${TMPDIR:-/tmp}/pd-verbs-vm.XXXXXX") || exit 99
trap 'rm -rf "$work"' EXIT
t1=$(now)
"$rdma/vm-initramfs.sh" "$top_builddir" "$cache/$kver" "$work/initramfs.cpio"
rc=$?
[ $rc -eq 77 ] && skip "the VM's initramfs cannot be built here (see above)"
[ $rc -eq 0 ] || { echo "FAIL: vm-initramfs.sh exit status $rc"; exit 1; }
echo "# initramfs: $(since "$t1") s, $(($(stat -c %s "$work/initramfs.cpio") >> 20)) MiB"

t2=$(now)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
# shellcheck disable=SC2086
PD_VM_LOG="$work/vm.log" "$rdma/vm-run.sh" "$cache/$kver" "$work/initramfs.cpio" ${PD_VM_ARGS:-}
vm=$?
echo "# VM: $(since "$t2") s; total $(since "$t0") s"

status=0
[ $vm -eq 0 ] || { echo "FAIL: the guest did not report PDVM_RESULT: PASS"; status=1; }
grep -q '^\[  PASSED  \] .* test(s)' "$work/vm.log" || grep -q 'pdvm.unit=0' <<<"${PD_VM_ARGS:-}" ||
    { echo "FAIL: the transport unit test did not pass over verbs"; status=1; }
grep -q '^\[ RUN      \] verbs: ' "$work/vm.log" || grep -q 'pdvm.unit=0' <<<"${PD_VM_ARGS:-}" ||
    { echo "FAIL: no verbs case ran (no RDMA device in the guest?)"; status=1; }
# A real rdmacm reject (a port nobody listens on) must fall back to tcp.
if grep -q '^\[       OK \] verbs: test_verbs_reject_falls_back' "$work/vm.log"; then
    echo "# fall-back: $(grep -m1 'warn: channel .*: verbs failed, trying tcp' "$work/vm.log" | sed 's/^.*warn: //')"
elif ! grep -q 'pdvm.unit=0' <<<"${PD_VM_ARGS:-}"; then
    echo "FAIL: the verbs reject did not fall back to tcp (test_verbs_reject_falls_back)"
    status=1
fi
# Device memory over verbs: the peermem path for real on the cpu device.
if grep -q 'STEP unit_test_transport_gpu: PASS' "$work/vm.log" &&
    grep -q '^ok .* - cpu slots over verbs: the receiver took the peermem path over verbs' "$work/vm.log"; then
    echo "# device memory: $(grep -m1 'info: channel .*: receiving over verbs, slots in memory of cpu: path peermem' "$work/vm.log" | sed 's/^.*info: //')"
elif ! grep -q 'pdvm.unit=0' <<<"${PD_VM_ARGS:-}"; then
    echo "FAIL: test_transport_gpu did not pass over verbs with the peermem path"
    grep -E '^not ok|last error|sender \(' "$work/vm.log" | head -20
    status=1
fi
# A pipeline job over verbs, in an MPI build (the initramfs then has Open MPI).
if grep -q '^PDVM pipeline: ' "$work/vm.log"; then
    echo "# $(grep -m1 '^PDVM pipeline: ' "$work/vm.log" | sed 's/^PDVM //')"
elif grep -q 'no mpirun in the initramfs' "$work/vm.log"; then
    echo "# pipeline job: not run (no Open MPI here to put in the VM)"
elif grep -q '^#define HAVE_MPI 1' "$top_builddir/config.h" && ! grep -q 'pdvm.pipeline=0' <<<"${PD_VM_ARGS:-}"; then
    echo "FAIL: the pipeline job over verbs did not run or did not match tcp's"
    grep -E 'STEP pipeline_|pipeline over verbs' "$work/vm.log"
    status=1
fi
# The benchmark over verbs between the two ranks of mpirun.
if grep -q '^PDVM mpirun bench: ' "$work/vm.log"; then
    echo "# mpirun -np 2 pipedream bench transport --backend verbs: $(grep -m1 '^PDVM mpirun bench: ' "$work/vm.log" | sed 's/^PDVM mpirun bench: //') (bytes iters MB/s lat_us MPI_MB/s ratio)"
elif grep -q '^PDVM pipeline: ' "$work/vm.log"; then
    echo "FAIL: mpirun -np 2 pipedream bench transport --backend verbs did not run or printed no sound line"
    grep -E 'STEP bench_mpirun|bench transport --backend verbs' "$work/vm.log"
    status=1
fi
echo "# host load before and after the VM: $load0 / $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# medians over the rounds (MB = 10^6 bytes); ratio: median of the rounds' channel / ib_write_bw, [min, max]"
echo "#    bytes depth channel_MB/s ib_write_bw_MB/s  ratio [range]  (target >= 0.90)"
ratios=$(grep '^PDVM ratio ' "$work/vm.log")
[ -n "$ratios" ] || { echo "FAIL: no bandwidth was measured"; status=1; }
while read -r _ _ size depth ours ref ratio lo hi; do
    [ -n "${size:-}" ] || continue
    note=""
    awk -v r="$ratio" 'BEGIN { exit !(r >= 0.9) }' || note="  (below the 0.90 target)"
    printf '  %8s %5s %12s %16s %6s [%s, %s]%s\n' "$size" "$depth" "$ours" "$ref" "$ratio" "$lo" "$hi" "$note"
    if ! awk -v r="$ratio" -v m="$min_ratio" 'BEGIN { exit !(r >= m) }'; then
        echo "FAIL: median ratio $ratio at $size bytes, depth $depth, is below $min_ratio (PD_VM_MIN_RATIO)"
        status=1
    fi
done <<<"$ratios"
[ $status -eq 0 ] && echo "PASS"
exit $status
