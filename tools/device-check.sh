#!/usr/bin/env bash
# The one script a session lent the H200 runs (docs/cuda.md gives the exact
# `run` call): builds pipedream with CUDA out of tree, then
# tools/device-run.sh runs the CUDA unit test, the device-memory channel
# test (CUDA slots over shm and tcp, dma_buf export) and the backend-ops
# harness (every op on the GPU against the CPU), a Fashion-MNIST training on
# the GPU and on the CPU, a 2-stage LeNet pipeline (mpirun -np 2) on the GPU
# and on the CPU, the training-step benchmarks of VGG16, ResNet-50, AlexNet
# and Inception-v3 in f32 and bf16 beside PyTorch's, and writes the logs,
# results.json, bench.csv and summary.md under $OUT within a time budget.
#
# Usage: tools/device-check.sh [--dry-run] [--no-build] [--full-check]
#        tools/device-check.sh --prepare
#   (none)        the H200 run: CUDA build, GPU checks, paper-size benchmarks.
#   --dry-run     every step on the CPU backend at tiny sizes (test_cuda_ops
#                 checks the cpu against itself, test_transport_gpu's cuda
#                 cases skip, "GPU" runs use --device cpu),
#                 so the logic, parsing, tables and timeouts run anywhere.
#   --no-build    use the build in BUILD_DIR as it is (configure and make
#                 skipped; the four programs must be there).
#   --full-check  also `make check` (not in the budget: minutes on its own).
#   --prepare     on the build host, before the `run` call: fill .device/
#                 (ignored, carried) with what the device lacks: jansson's
#                 headers, Fashion-MNIST, configure with the other autotools
#                 outputs (the device has autoconf and automake but maybe not
#                 libtoolize) and the git revision, then say what to carry.
# Environment: OUT (logs and results; default BUILD_DIR/device-out),
# BUILD_DIR (default <source>/_build-device), WORK (every step's output,
# emptied first; default BUILD_DIR/device-work), JOBS (default: all cores),
# PD_CONFIGURE_FLAGS (extra configure arguments), BUDGET_S (seconds for the
# whole script, build included: default 480, 240 with --dry-run), DATA
# (Fashion-MNIST: default .device/fashion-mnist, else
# /usr/share/datasets/fashion-mnist), CHECK_TIMEOUT (make check, default 300).
# Exit status: 0 when the build, every test and every run passed; 1 when
# something failed or was not run (the last lines say what); 2 for bad usage.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
command_line="tools/device-check.sh${*:+ $*}"
mode=device build=yes full_check=no prepare=no
for arg in "$@"; do
    case $arg in
    --dry-run) mode=dry ;;
    --no-build) build=no ;;
    --full-check) full_check=yes ;;
    --prepare) prepare=yes ;;
    --help | -h)
        sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "device-check.sh: unknown option '$arg' (see --help)" >&2
        exit 2
        ;;
    esac
done

have() { command -v "$1" >/dev/null 2>&1; }

# ---- --prepare: on the build host ------------------------------------------
if [ "$prepare" = yes ]; then
    carried=$src/.device
    mkdir -p "$carried/jansson/include" "$carried/fashion-mnist"
    header=$(echo '#include <jansson.h>' | gcc -E -x c - 2>/dev/null |
        awk -F'"' '/^# [0-9]+ ".*\/jansson\.h"/ {print $2; exit}' || true)
    [ -n "$header" ] || {
        echo "device-check.sh --prepare: jansson.h is not installed here (apt install libjansson-dev)" >&2
        exit 1
    }
    cp "$(dirname "$header")"/jansson.h "$(dirname "$header")"/jansson_config.h "$carried/jansson/include/"
    data_src=${DATA:-/usr/share/datasets/fashion-mnist}
    for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
        [ -r "$data_src/$f.gz" ] || {
            echo "device-check.sh --prepare: $data_src/$f.gz is missing (set DATA to Fashion-MNIST's directory)" >&2
            exit 1
        }
        cp "$data_src/$f.gz" "$carried/fashion-mnist/"
    done
    # A stale configure is no harm: make's rebuild rules redo it there (the
    # device has autoconf and automake); regenerating it here could pull
    # the tree from under a build running beside.
    if [ ! -x "$src/configure" ]; then
        (cd "$src" && ./autogen.sh)
    fi
    # The device's copy has no .git: the report names the revision from here.
    revision=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
    if [ "$revision" != unknown ] && [ -n "$(git -C "$src" status --porcelain --untracked-files=no)" ]; then
        revision="$revision+changes"
    fi
    echo "$revision" >"$carried/revision"
    (cd "$src" && tar czf "$carried/autotools.tar.gz" configure config.h.in aclocal.m4 Makefile.in \
        config/build-aux config/m4/libtool.m4 config/m4/ltoptions.m4 config/m4/ltsugar.m4 \
        config/m4/ltversion.m4 'config/m4/lt~obsolete.m4')
    if (cd "$src" && git check-ignore -q .device/jansson 2>/dev/null); then
        echo "prepared $carried: $(du -sh "$carried" | cut -f1); carry it: carry [\".device\"]"
    else
        echo "prepared $carried ($(du -sh "$carried" | cut -f1)); it is not ignored by git: it travels as an untracked folder"
    fi
    exit 0
fi

# ---- the run ---------------------------------------------------------------
build_dir=${BUILD_DIR:-$src/_build-device}
out=${OUT:-$build_dir/device-out}
jobs=${JOBS:-$(nproc)}
if [ "$mode" = dry ]; then budget=${BUDGET_S:-240}; else budget=${BUDGET_S:-480}; fi
case $budget in '' | *[!0-9]*)
    echo "device-check.sh: BUDGET_S='$budget' is not a number of seconds" >&2
    exit 2
    ;;
esac
mkdir -p "$build_dir" "$out"
out=$(cd "$out" && pwd)
work=${WORK:-$build_dir/device-work}
if [ -d "$work" ] && [ -n "$(ls -A "$work")" ] && [ ! -e "$work/.device-work" ]; then
    echo "device-check.sh: WORK=$work holds files of something else; give an empty or new directory" >&2
    exit 2
fi
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
touch "$work/.device-work" # marks it as ours, to be emptied by the next run
exec > >(tee "$out/device-check.log") 2>&1
tee_pid=$!

start=$(date +%s)
log() { printf '[%s +%4ds] %s\n' "$(date -u +%H:%M:%S)" "$(($(date +%s) - start))" "$*"; }
finish() { # status, message: packs the logs, lets tee write the last line, exits
    log "$2"
    (cd "$work" && tar czf "$out/logs.tar.gz" .) 2>/dev/null || log "could not pack the logs"
    exec >&- 2>&-
    wait "$tee_pid" 2>/dev/null || true
    exit "$1"
}
die() { finish 1 "device check FAILED: $* (logs in $out)"; }

export PATH="$PATH:/usr/local/cuda/bin"
# Open MPI refuses root unless told; these machines run commands as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

log "mode $mode, source $src, build $build_dir, results $out, budget ${budget}s"
gpu_present=no
if nvidia-smi -L 2>/dev/null | grep -q GPU; then
    gpu_present=yes
fi
{
    if have nvidia-smi; then nvidia-smi -L 2>&1 || echo "nvidia-smi: no GPU listed"; else echo "nvidia-smi: not installed"; fi
    if have nvcc; then nvcc --version | tail -1; else echo "nvcc: not found"; fi
    gcc --version | head -1 || true
    uname -srm
} | sed 's/^/  /' | tee "$work/environment.txt"
if [ "$mode" = device ] && [ "$gpu_present" = no ]; then
    log "WARNING: no GPU is listed: the CUDA cases will skip and count as failures (use --dry-run off the GPU)"
fi

# ---- build -----------------------------------------------------------------
programs=(src/cli/pipedream tests/unit/test_cuda_ops tests/unit/test_transport_gpu tests/backend_ops/test_backend_ops)
if [ "$build" = yes ]; then
    # configure: the one in the tree, the carried autotools outputs, or autogen.sh.
    if [ ! -x "$src/configure" ] && [ -r "$src/.device/autotools.tar.gz" ]; then
        log "unpacking the carried autotools outputs (.device/autotools.tar.gz)"
        tar xzf "$src/.device/autotools.tar.gz" -C "$src" || die "unpacking .device/autotools.tar.gz"
    fi
    if [ ! -x "$src/configure" ]; then
        if ! { have autoreconf && have automake && have libtoolize; }; then
            die "no ./configure and no autotools to make one: run tools/device-check.sh --prepare on the build host and carry .device"
        fi
        log "generating configure (autogen.sh)"
        (cd "$src" && ./autogen.sh) >"$work/autogen.out" 2>&1 || die "autogen.sh (autogen.out in logs.tar.gz)"
    fi
    if ! { have autoreconf && have automake; }; then
        # Carried output without the tools: make must not try to regenerate it.
        touch "$src/aclocal.m4"
        sleep 1
        touch "$src/configure" "$src/config.h.in"
        find "$src" -name Makefile.in -exec touch {} +
    fi

    # jansson: installed, or carried (header required; library carried or system's).
    configure_args=()
    if [ "$mode" = device ]; then configure_args+=(--with-cuda --with-cublas); fi
    if ! echo '#include <jansson.h>' | gcc -E -x c - >/dev/null 2>&1; then
        carried=$src/.device/jansson
        header=$(find "$carried" -name jansson.h -print -quit 2>/dev/null || true)
        [ -n "$header" ] || die "jansson.h is neither installed nor carried in .device/jansson/ (tools/device-check.sh --prepare)"
        prefix=$build_dir/jansson
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

    cd "$build_dir"
    if [ ! -f Makefile ]; then
        log "configure ${configure_args[*]} ${PD_CONFIGURE_FLAGS:-}"
        # shellcheck disable=SC2086 # PD_CONFIGURE_FLAGS is a list of words
        timeout 180 "$src/configure" "${configure_args[@]}" ${PD_CONFIGURE_FLAGS:-} >"$work/configure.out" 2>&1 || {
            tail -40 "$work/configure.out"
            cp config.log "$work/" 2>/dev/null || true
            die "configure (configure.out and config.log in logs.tar.gz)"
        }
        sed -n '/configured:/,$p' "$work/configure.out"
    fi
    log "make -j$jobs ${programs[*]}"
    timeout 420 make -j"$jobs" "${programs[@]}" >"$work/make.out" 2>&1 || {
        grep -E -B2 -A6 'error|Error' "$work/make.out" | tail -60
        die "make (make.out in logs.tar.gz)"
    }
    grep -E 'warning' "$work/make.out" | sort -u | head -20 || true
    log "built"
fi
cd "$build_dir"
for p in "${programs[@]}"; do
    [ -x "$p" ] || die "$build_dir/$p is missing (build it, or drop --no-build)"
done

status=0
export PD_MODE=$mode PD_SRC=$src PD_BUILD=$build_dir PD_OUT=$out PD_WORK=$work PD_BUDGET_S=$budget \
    PD_START=$start PD_GPU_PRESENT=$gpu_present PD_DATA=${DATA:-} PD_COMMAND=$command_line
bash "$src/tools/device-run.sh" || status=1

if [ "$full_check" = yes ]; then
    log "make check (timeout ${CHECK_TIMEOUT:-300}s; outside the budget)"
    if ! timeout "${CHECK_TIMEOUT:-300}" make -j"$jobs" check >"$work/check.out" 2>&1; then
        status=1
        log "make check FAILED"
    fi
    sed -n '/^# TOTAL/,/^# ERROR/p' "$work/check.out"
    grep -E '^(FAIL|ERROR|XPASS):' "$work/check.out" | head -40 || true
    cp test-suite.log "$work/" 2>/dev/null || true
fi

if [ "$status" -eq 0 ]; then
    finish 0 "device check passed ($mode; results in $out)"
fi
finish 1 "device check FAILED or incomplete ($mode): see summary.md in $out"
