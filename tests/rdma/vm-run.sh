#!/bin/bash
# Boots the soft-RoCE test VM under qemu's TCG (this kind of host has no
# usable KVM) and copies its console to stdout:
#   vm-run.sh KERNEL_DIR INITRAMFS.cpio [EXTRA KERNEL ARGUMENTS]
# Knobs: PD_VM_TIMEOUT (s, default 600), PD_VM_SMP (2), PD_VM_MEM (MiB, 2048).
# Exit status: 0 when the guest reported PDVM_RESULT: PASS, 1 otherwise
# (qemu's own status, 124 on a timeout, is printed). PD_VM_LOG keeps the log.
set -u
K=$1
INITRD=$2
shift 2
log=${PD_VM_LOG:-$(mktemp "${TMPDIR:-/tmp}/pd-rdma-vm.XXXXXX")}
timeout "${PD_VM_TIMEOUT:-600}" qemu-system-x86_64 -accel tcg,thread=multi -cpu max \
    -smp "${PD_VM_SMP:-2}" -m "${PD_VM_MEM:-2048}" \
    -nodefaults -no-user-config -display none -serial stdio -no-reboot \
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
    -kernel "$K/vmlinux" -initrd "$INITRD" \
    -append "console=ttyS0 panic=-1 quiet $*" </dev/null 2>&1 | tr -d '\r' | tee "$log"
qrc=${PIPESTATUS[0]}
echo "[host] qemu exit status $qrc (1 pass, 3 fail, 124 timeout)"
# qemu also exits 1 when it cannot start: the guest's own line decides.
grep -q '^\[pdvm [0-9.]*\] PDVM_RESULT: PASS' "$log"
status=$?
[ -n "${PD_VM_LOG:-}" ] || rm -f "$log"
exit $status
