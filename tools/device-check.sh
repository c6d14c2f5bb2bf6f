#!/usr/bin/env bash
# Builds pipedream with CUDA out of tree on a GPU machine and runs its tests:
# `make check` (the backend-ops harness compares the cuda backend with the
# cpu one whenever a CUDA device opens) and tests/unit/test_cuda_ops (every
# CUDA entry against the CPU's, built by hand when tests/local.mk does not
# list it). Meant for the H200 behind the device tool: Ubuntu 24.04, nvcc 13
# in /usr/local/cuda, cuDNN 9, Open MPI; run from anywhere:
#   bash tools/device-check.sh
#
# Expects, in the source tree this script lives in:
#   - ./configure, or autoreconf + automake + libtoolize to make it
#     (./autogen.sh); where neither, run ./autogen.sh here and carry
#     configure, config.h.in, aclocal.m4, Makefile.in, config/build-aux and
#     config/m4;
#   - jansson.h: installed, or carried in .device/jansson/ either as
#     include/ + lib/ or as Debian's libjansson-dev .deb unpacked there
#     (dpkg-deb -x libjansson-dev_*.deb .device/jansson); the library itself
#     may be the system's libjansson4 (libjansson.so.4).
# Environment: OUT (where logs go; default BUILD_DIR/out), BUILD_DIR (default
# <source>/_build-device, kept between runs for incremental builds), JOBS
# (default: all cores), PD_CONFIGURE_FLAGS (extra configure arguments),
# CHECK_TIMEOUT (seconds for make check, default 300).
# Exit status: 0 when the build and every test passed, 1 otherwise; the last
# line says which step failed.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$src/_build-device}
out=${OUT:-$build/out}
jobs=${JOBS:-$(nproc)}
mkdir -p "$build" "$out"
exec > >(tee -a "$out/device-check.log") 2>&1

start=$(date +%s)
log() { printf '[%s +%4ds] %s\n' "$(date -u +%H:%M:%S)" "$(($(date +%s) - start))" "$*"; }
die() {
    log "FAILED: $*"
    exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }

export PATH="$PATH:/usr/local/cuda/bin"
# Open MPI refuses root unless told; these machines run commands as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

log "source $src, build $build, logs $out"
gpu_present=no
if nvidia-smi -L 2>/dev/null | grep -q GPU; then
    gpu_present=yes
fi
{ nvidia-smi -L 2>&1 || echo "nvidia-smi: no GPU listed"; } | sed 's/^/  /'
{ nvcc --version | tail -1 || echo "nvcc: not found"; } | sed 's/^/  /'
{ gcc --version | head -1 | sed 's/^/  /'; } || true

# configure: the one in the tree, or freshly generated.
if [ ! -x "$src/configure" ]; then
    if ! { have autoreconf && have automake && have libtoolize; }; then
        die "no ./configure and no autotools to make one: run ./autogen.sh on the build host and carry its output (see the top of this script)"
    fi
    log "generating configure (autogen.sh)"
    (cd "$src" && ./autogen.sh) || die "autogen.sh"
elif ! { have autoreconf && have automake; }; then
    # Carried output without the tools: make must not try to regenerate it.
    touch "$src/aclocal.m4"
    sleep 1
    touch "$src/configure" "$src/config.h.in"
    find "$src" -name Makefile.in -exec touch {} +
fi

# jansson: installed, or carried (header required; library carried or system's).
configure_args=(--with-cuda --with-cublas)
if ! echo '#include <jansson.h>' | gcc -E -x c - >/dev/null 2>&1; then
    carried=$src/.device/jansson
    header=$(find "$carried" -name jansson.h -print -quit 2>/dev/null || true)
    [ -n "$header" ] || die "jansson.h is neither installed nor carried in .device/jansson/"
    prefix=$build/jansson
    mkdir -p "$prefix/include" "$prefix/lib"
    ln -sf "$(dirname "$header")"/jansson*.h "$prefix/include/"
    library=""
    for candidate in $(find "$carried" -name 'libjansson.so*' 2>/dev/null | sort) \
        $(ldconfig -p 2>/dev/null | awk '/libjansson\.so/ {print $NF}'); do
        if [ -e "$candidate" ]; then # a dangling symlink of the -dev package does not count
            library=$candidate
            break
        fi
    done
    [ -n "$library" ] || die "jansson.h is carried but no libjansson.so* resolves (carried or system)"
    ln -sf "$library" "$prefix/lib/libjansson.so"
    log "jansson: header from $(dirname "$header"), library $library"
    configure_args+=(--with-jansson="$prefix")
fi

cd "$build"
if [ ! -f Makefile ]; then
    log "configure ${configure_args[*]} ${PD_CONFIGURE_FLAGS:-}"
    # shellcheck disable=SC2086 # PD_CONFIGURE_FLAGS is a list of words
    "$src/configure" "${configure_args[@]}" ${PD_CONFIGURE_FLAGS:-} >configure.out 2>&1 || {
        tail -40 configure.out
        cp config.log "$out/" 2>/dev/null || true
        die "configure (config.log in $out)"
    }
    sed -n '/configured:/,$p' configure.out
fi

log "make -j$jobs"
make -j"$jobs" >make.out 2>&1 || {
    grep -E -B2 -A6 'error|Error' make.out | tail -60
    cp make.out "$out/"
    die "make (make.out in $out)"
}
grep -E 'warning' make.out | sort -u | head -20 || true

status=0
failed_steps=""
log "make check (timeout ${CHECK_TIMEOUT:-300}s)"
if ! timeout "${CHECK_TIMEOUT:-300}" make -j"$jobs" check >check.out 2>&1; then
    status=1
    failed_steps="$failed_steps make-check"
fi
sed -n '/^# TOTAL/,/^# ERROR/p' check.out
grep -E '^(FAIL|ERROR|XPASS):' check.out | head -40 || true
grep -E '^SKIP: [^ ]+$' check.out || true # whole programs skipped
if [ "$gpu_present" = yes ] && grep -q 'SKIP.*no cuda device' check.out; then
    grep -m1 'SKIP.*no cuda device' check.out
    status=1
    failed_steps="$failed_steps cuda-did-not-open"
fi
cp test-suite.log "$out/" 2>/dev/null || true
find tests -name '*.log' -print0 2>/dev/null | tar czf "$out/test-logs.tar.gz" --null -T - 2>/dev/null || true

# Every CUDA entry against the CPU's, whether or not tests/local.mk lists it.
cuda_test=tests/unit/test_cuda_ops
if ! grep -q 'test_cuda_ops' Makefile; then
    log "building $cuda_test by hand (tests/local.mk does not list it)"
    mkdir -p tests/unit
    gcc -std=c11 -O2 -DHAVE_CONFIG_H -I. -I"$src/include" -I"$src" -I"$src/src" \
        "$src/tests/unit/test_cuda_ops.c" -Lsrc/.libs -Wl,-rpath,"$build/src/.libs" -lpipedream -lm \
        -o "$cuda_test" || {
        status=1
        failed_steps="$failed_steps build-test_cuda_ops"
    }
fi
if [ -x "$cuda_test" ]; then
    log "$cuda_test"
    if timeout 120 "./$cuda_test" >"$out/test_cuda_ops.tap" 2>&1; then
        :
    else
        status=1
        failed_steps="$failed_steps test_cuda_ops"
    fi
    grep -vE '^ok ' "$out/test_cuda_ops.tap" | head -40 || true
    if [ "$gpu_present" = yes ] && grep -q '^1\.\.0 # SKIP' "$out/test_cuda_ops.tap"; then
        status=1
        failed_steps="$failed_steps cuda-did-not-open"
    fi
    log "test_cuda_ops: $(grep -c '^ok ' "$out/test_cuda_ops.tap" || true) ok, $(grep -c '^not ok ' "$out/test_cuda_ops.tap" || true) not ok"
fi

if [ "$status" -eq 0 ]; then
    log "device check passed"
else
    log "device check FAILED:$failed_steps (logs in $out)"
fi
exit "$status"
