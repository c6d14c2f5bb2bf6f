#!/usr/bin/env bash
# The checks and benchmarks of tools/device-check.sh, on a finished build;
# run by it (not meant to be called alone), from the environment it exports:
#   PD_MODE        device (the H200) or dry (the CPU at tiny sizes)
#   PD_SRC, PD_BUILD  source and build trees
#   PD_OUT         where the results go (at most 8 files come back from there)
#   PD_WORK        scratch: every step's .out, .err and .rc (packed into
#                  $PD_OUT/logs.tar.gz by device-check.sh)
#   PD_BUDGET_S, PD_START  the whole script's budget and its start (epoch s)
#   PD_GPU_PRESENT yes when nvidia-smi lists a GPU
#   PD_DATA        Fashion-MNIST's directory ("" = the default places)
#   PD_COMMAND     the command line, for the report
# Each step runs under `timeout`, bounded by what is left of the budget; a
# step with too little left is not started and recorded as skipped. The
# report (tools/device_report.py) reads $PD_WORK and writes results.json,
# bench.csv and summary.md. Exit status: the report's (0 all passed).
set -uo pipefail

: "${PD_MODE:?run tools/device-check.sh, not this script}"
mode=$PD_MODE src=$PD_SRC work=$PD_WORK out=$PD_OUT
pipedream=$PD_BUILD/src/cli/pipedream
REPORT_RESERVE=15 # seconds kept for the report and packing the logs

log() { printf '[%s +%4ds] %s\n' "$(date -u +%H:%M:%S)" "$(($(date +%s) - PD_START))" "$*"; }
left() { echo $((PD_BUDGET_S - REPORT_RESERVE - ($(date +%s) - PD_START))); }

# step NAME MAX_S MIN_S CMD...: runs CMD with stdout in $work/NAME.out,
# stderr in $work/NAME.err and its exit status in $work/NAME.rc, under a
# timeout of MAX_S or what the budget has left; when less than MIN_S is
# left, NAME.rc says "budget" and CMD does not run. Returns CMD's status.
step() {
    local name=$1 max=$2 min=$3 limit rc
    shift 3
    limit=$(left)
    if [ "$limit" -lt "$min" ]; then
        echo budget >"$work/$name.rc"
        log "$name: skipped, ${limit}s of the budget left (needs ${min}s)"
        return 1
    fi
    [ "$limit" -gt "$max" ] && limit=$max
    echo "$limit" >"$work/$name.limit"
    timeout -k 5 "$limit" "$@" >"$work/$name.out" 2>"$work/$name.err"
    rc=$?
    echo "$rc" >"$work/$name.rc"
    case $rc in
    0) log "$name: ok" ;;
    124 | 137) log "$name: TIMEOUT after ${limit}s" ;;
    *) log "$name: exit $rc: $(grep -v '^[[:space:]]*$' "$work/$name.err" | tail -n 1)" ;;
    esac
    return "$rc"
}

# Sizes: the paper's on the H200; tiny ones on the CPU (widths scaled down,
# each model at about the smallest input it takes).
if [ "$mode" = device ]; then
    device=cuda warmup=3 iterations=10 width_mult=1 bench_max=90 bench_min=20
    configs=(vgg16:64:224:224 resnet50:128:224:224 alexnet:256:224:224 inception_v3:64:299:299)
    test_max=150 fmnist_args=(--epochs 1) torch_device=cuda torch_max=240
else
    device=cpu warmup=1 iterations=3 width_mult=0.125 bench_max=30 bench_min=2
    configs=(vgg16:4:32:32 resnet50:4:32:32 alexnet:4:64:64 inception_v3:2:75:75)
    test_max=60 fmnist_args=(--steps 50 --limit-test 500) torch_device=cpu torch_max=60
fi
precisions=(f32 bf16)
printf '%s\n' "${configs[@]}" >"$work/configs.txt"
revision=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ "$revision" != unknown ] && [ -n "$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    revision="$revision+changes"
elif [ "$revision" = unknown ] && [ -r "$src/.device/revision" ]; then
    revision="$(cat "$src/.device/revision") (at --prepare)"
fi
printf 'mode=%s\ncommand=%s\ndate=%s\nrevision=%s\ndevice=%s\nwarmup=%s\niterations=%s\nwidth_mult=%s\n' \
    "$mode" "${PD_COMMAND:-tools/device-check.sh}" "$(date -u +%Y-%m-%dT%H:%MZ)" "$revision" "$device" "$warmup" \
    "$iterations" "$width_mult" >"$work/settings.txt"

if [ "$PD_GPU_PRESENT" = yes ]; then
    nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.mem,temperature.gpu,power.draw \
        --format=csv >"$work/nvidia-smi.csv" 2>&1 || true
fi

# ---- 1. the CUDA entries against the CPU's, entry by entry -----------------
log "test_cuda_ops"
if [ "$mode" = dry ]; then export PD_TEST_DEVICE=cpu; fi # the program checks itself: cpu against cpu
step test_cuda_ops "$test_max" 5 "$PD_BUILD/tests/unit/test_cuda_ops"
unset PD_TEST_DEVICE
cp "$work/test_cuda_ops.out" "$out/test_cuda_ops.tap" 2>/dev/null

# ---- 1b. channels with slots in device memory ------------------------------
# cpu and cuda slots over shm and tcp through pinned-host staging, the CUDA
# device's export_dmabuf; in a dry run (no GPU) its cuda cases skip. No
# RDMA NIC on the device: its verbs pairs are left out (a comment line).
log "test_transport_gpu"
step test_transport_gpu 60 5 "$PD_BUILD/tests/unit/test_transport_gpu"
cp "$work/test_transport_gpu.out" "$out/test_transport_gpu.tap" 2>/dev/null

# ---- 2. every graph-level op on every backend against the CPU's -----------
# No -b: the harness compares another backend with the CPU only when the
# CPU ran first in the same process (it keeps the CPU's results).
log "test_backend_ops (cpu first, then every other backend against it)"
step backend_ops "$test_max" 5 "$PD_BUILD/tests/backend_ops/test_backend_ops"
cp "$work/backend_ops.out" "$out/backend_ops.tap" 2>/dev/null

# ---- 3. Fashion-MNIST: LeNet on the GPU and on the CPU, same seed ----------
data=$PD_DATA
if [ -z "$data" ]; then
    for d in "$src/.device/fashion-mnist" /usr/share/datasets/fashion-mnist; do
        if [ -r "$d/train-images-idx3-ubyte.gz" ] || [ -r "$d/train-images-idx3-ubyte" ]; then
            data=$d
            break
        fi
    done
fi
if [ -n "$data" ] && [ -d "$data" ]; then
    echo "$data" >"$work/fmnist.data"
    for where in gpu cpu; do
        dev=cpu
        if [ "$where" = gpu ]; then dev=$device; fi
        log "fmnist-$where: lenet on $dev (${fmnist_args[*]}, seed 1)"
        step "fmnist-$where" 120 10 "$pipedream" train --model lenet --device "$dev" --data "$data" --seed 1 \
            --batch 64 --lr 0.05 --momentum 0.9 --log-every 200 "${fmnist_args[@]}"
    done
else
    log "fmnist: no Fashion-MNIST here (DATA, .device/fashion-mnist or /usr/share/datasets/fashion-mnist)"
    echo "no Fashion-MNIST: set DATA or carry .device/fashion-mnist (tools/device-check.sh --prepare)" >"$work/fmnist.missing"
fi

# ---- 3b. a 2-stage 1f1b pipeline of LeNet, both ranks on the GPU, then on the CPU
# Two ranks under mpirun share the one GPU; the cut tensors travel through
# host memory (the runtime copies them to and from the device). lr 0.01:
# at 0.05 a rounding-level change (OpenMP threads 1 -> 2) moved the test
# accuracy after 100 steps by 2 points; at 0.01 by 0.13 (docs/cuda.md).
pipeline_why=""
if [ -z "$data" ] || [ ! -d "$data" ]; then
    pipeline_why="no Fashion-MNIST: set DATA or carry .device/fashion-mnist (tools/device-check.sh --prepare)"
elif ! grep -q '^#define HAVE_MPI 1' "$PD_BUILD/config.h" 2>/dev/null; then
    pipeline_why="this build has no MPI (configure found no mpicc or mpi.h): the pipeline runtime needs it"
elif ! command -v mpirun >/dev/null 2>&1; then
    pipeline_why="mpirun is not installed"
fi
if [ -n "$pipeline_why" ]; then
    log "pipeline: not run: $pipeline_why"
    echo "$pipeline_why" >"$work/pipeline.missing"
else
    mpirun_flags=()
    if mpirun --version 2>&1 | grep -q "Open MPI"; then
        mpirun_flags=(--oversubscribe)
        case "$(mpirun --version 2>&1)" in # shared memory and TCP between the ranks of one machine
        *"Open MPI) "[1-4].*) export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp} ;;
        *) export OMPI_MCA_btl=${OMPI_MCA_btl:-self,sm,tcp} ;;
        esac
    fi
    # Device memory over mpi: test_transport_gpu's mpi pairs on 2 ranks (the
    # cuda pair takes cuda-aware-mpi where the library says it is CUDA-aware
    # at run time, else stages saying why; its log tells which).
    log "transport_gpu_mpi: test_transport_gpu's mpi pairs on 2 ranks"
    step transport_gpu_mpi 60 5 mpirun "${mpirun_flags[@]}" -np 2 "$PD_BUILD/tests/unit/test_transport_gpu"
    cat >"$work/lenet2.plan.json" <<'JSON'
{"cluster": {"levels": "2x1GB/s"}, "stages": [{"first_layer": "conv1", "last_layer": "pool2", "replicas": 1},
 {"first_layer": "flatten", "last_layer": "loss", "replicas": 1}]}
JSON
    # The profile names the plan's nodes; measured on the CPU (seconds).
    log "pipeline-profile: lenet on cpu (the plan's node names)"
    if step pipeline-profile 30 5 "$pipedream" profile --model lenet --device cpu --batch-size 64 --warmup 1 \
        --iterations 1 -o "$work/lenet.profile.json"; then
        for where in gpu cpu; do
            dev=cpu
            if [ "$where" = gpu ]; then dev=$device; fi
            log "pipeline-$where: lenet, 2 stages 1f1b on 2 ranks, $dev (100 steps, seed 1)"
            # Ranks share the cores: half of them each.
            OMP_NUM_THREADS=$(($(nproc) > 1 ? $(nproc) / 2 : 1)) step "pipeline-$where" 90 15 \
                mpirun "${mpirun_flags[@]}" -np 2 "$pipedream" train --model lenet --device "$dev" --data "$data" \
                --seed 1 --batch 64 --lr 0.01 --momentum 0.9 --steps 100 --plan "$work/lenet2.plan.json" \
                --profile "$work/lenet.profile.json" --metrics "$work/pipeline-$where.csv" --log-every 200 \
                --progress-every 1000
        done
    fi
fi

# ---- 4. PyTorch's training steps, one process for every config -------------
log "torch_step_bench ($torch_device)"
torch_args=(--device "$torch_device" --precision "$(
    IFS=,
    echo "${precisions[*]}"
)" --warmup "$warmup" --iterations "$iterations")
for c in "${configs[@]}"; do torch_args+=(--config "$c"); done
# Configs that would start late are skipped inside, leaving time for ours.
torch_budget=$(($(left) / 2))
[ "$torch_budget" -gt "$torch_max" ] && torch_budget=$torch_max
PYTHONUNBUFFERED=1 step torch "$torch_max" 10 python3 "$src/tools/torch_step_bench.py" "${torch_args[@]}" \
    --budget-s "$((torch_budget > 10 ? torch_budget - 10 : 1))"

# ---- 5. ours: `pipedream bench step`, one process per run ------------------
# f32 of every model first: if the budget runs out, bf16 is what goes.
smi_sampler=""
for precision in "${precisions[@]}"; do
    for c in "${configs[@]}"; do
        IFS=: read -r model batch height width <<<"$c"
        name=bench-$model-$precision
        if [ "$PD_GPU_PRESENT" = yes ] && [ "$mode" = device ]; then
            nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$work/$name.smi" 2>/dev/null &
            smi_sampler=$!
        fi
        log "$name: batch $batch, ${height}x$width, width-mult $width_mult, on $device"
        step "$name" "$bench_max" "$bench_min" "$pipedream" bench step --model "$model" --batch "$batch" \
            --height "$height" --width "$width" --width-mult "$width_mult" --device "$device" \
            --precision "$precision" --warmup "$warmup" --iterations "$iterations"
        if [ -n "$smi_sampler" ]; then
            kill "$smi_sampler" 2>/dev/null
            wait "$smi_sampler" 2>/dev/null
            smi_sampler=""
        fi
    done
done

# ---- 6. the report ---------------------------------------------------------
log "report"
python3 "$src/tools/device_report.py" --work "$work" --out "$out"
