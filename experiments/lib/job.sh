# The body of every experiments/<model>.sbatch: PipeDream against data
# parallelism on the job's allocation. Sourced (bash) after the script has
# set PD_MODEL and its defaults; every choice below can be overridden from
# the environment (sbatch passes the submitter's environment to the job):
#
#   PD_MODEL        model (vgg16, alexnet, resnet50, inception_v3, s2vt, lenet, mlp)
#   PD_MODEL_ARGS   geometry and size: --width-mult, --channels, --height, --width
#                   (the classes are the data set's)
#   PD_DATASET      fashion-mnist, mnist, cifar10, imagenet or synthetic (s2vt: s2vt-synthetic or s2vt)
#   PD_DATA         the data set's directory
#   PD_BATCH        minibatch size per stage replica (default 64)
#   PD_EPOCHS       epochs (default 1), or PD_STEPS minibatches instead
#   PD_TRAIN_ARGS   more `pipedream train` options (optimizer, lr, schedule of lr, --limit-train ...)
#   PD_SCHEDULE     PipeDream's schedule: 1f1b (default), gpipe or straight
#   PD_TRANSPORT    channel backends, e.g. shm,tcp (default: the runtime's)
#   PD_DEVICE       cpu or cuda (default cuda when the job has GPUs, else cpu)
#   PD_PROFILE_ARGS more `pipedream profile` options (default --warmup 2 --iterations 10)
#   PD_PROFILE      an existing profile to use instead of profiling
#   PD_LEVELS       the planner's levels (default: tasks per node x PD_INTRA_BW,
#                   then nodes x PD_INTER_BW), or PD_CLUSTER a .cluster.json
#   PD_INTRA_BW     bandwidth between the ranks of a node (default 12GB/s)
#   PD_INTER_BW     bandwidth between nodes (default 10Gb/s)
#   PD_PLAN_ARGS    more `pipedream plan` options (e.g. --memory 16GB)
#   PD_RUNS         which runs: "pipedream dp" (default), or one of them
#   PD_LAUNCHER     srun (default in a job: srun --mpi=pmix) or mpirun
#   PD_SRUN_ARGS    more srun options (default with cuda: --gpus-per-task=1)
#   PD_NTASKS       ranks when not in a Slurm job (default 2; run with mpirun)
#   PIPEDREAM       the program (default: pipedream on PATH, else the build's src/cli/pipedream)
#   PD_RESULTS      where per-job directories go (default results): the job's
#                   results are in $PD_RESULTS/$SLURM_JOB_ID
# Results: profile.json, plan.json and plan.txt (PipeDream's), dp.plan.json,
# pipedream.csv and dp.csv (per-minibatch metrics), pipedream.json and
# dp.json (rank 0's summaries), their logs, and summary.json comparing them.
set -euo pipefail
# The source tree (for the default program), from this file's place.
PD_ROOT=${PD_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}

pd_die() {
    echo "pipedream job: $*" >&2
    exit 1
}
pd_log() { echo "pipedream job: $*" >&2; }

: "${PD_MODEL:?PD_MODEL is not set}"
PD_MODEL_ARGS=${PD_MODEL_ARGS-}
PD_DATASET=${PD_DATASET:-synthetic}
PD_DATA=${PD_DATA-}
PD_BATCH=${PD_BATCH:-64}
PD_EPOCHS=${PD_EPOCHS:-1}
PD_STEPS=${PD_STEPS-}
PD_TRAIN_ARGS=${PD_TRAIN_ARGS-}
PD_SCHEDULE=${PD_SCHEDULE:-1f1b}
PD_TRANSPORT=${PD_TRANSPORT-}
PD_PROFILE_ARGS=${PD_PROFILE_ARGS:---warmup 2 --iterations 10}
PD_INTRA_BW=${PD_INTRA_BW:-12GB/s}
PD_INTER_BW=${PD_INTER_BW:-10Gb/s}
PD_PLAN_ARGS=${PD_PLAN_ARGS-}
PD_RUNS=${PD_RUNS:-pipedream dp}
PD_RESULTS=${PD_RESULTS:-results}

# The allocation: nodes, tasks, tasks per node (Slurm's, else one node).
if [ -n "${SLURM_JOB_ID-}" ]; then
    ntasks=${SLURM_NTASKS:?SLURM_NTASKS is not set: submit with --ntasks or --ntasks-per-node}
    nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
    job=$SLURM_JOB_ID
    launcher=${PD_LAUNCHER:-srun}
    gpus=${SLURM_GPUS_ON_NODE:-0}
else
    ntasks=${PD_NTASKS:-2}
    nodes=1
    job=local-$(date +%Y%m%d-%H%M%S)-$$
    launcher=${PD_LAUNCHER:-mpirun}
    gpus=0
fi
[ $((ntasks % nodes)) -eq 0 ] || pd_die "$ntasks tasks on $nodes nodes: PipeDream's levels need as many tasks on every node"
per_node=$((ntasks / nodes))
PD_DEVICE=${PD_DEVICE:-$([ "$gpus" -gt 0 ] && echo cuda || echo cpu)}

if [ -z "${PIPEDREAM-}" ]; then
    PIPEDREAM=$(command -v pipedream || true)
    [ -n "$PIPEDREAM" ] || PIPEDREAM=$PD_ROOT/src/cli/pipedream
fi
[ -x "$PIPEDREAM" ] || pd_die "no pipedream program at '$PIPEDREAM' (set PIPEDREAM)"

out=$PD_RESULTS/$job
mkdir -p "$out"
out=$(cd "$out" && pwd)
pd_log "$PD_MODEL on $nodes node(s) x $per_node task(s), $PD_DEVICE; results in $out"

# One rank per core unless told: the ranks share the node's cores.
if [ -z "${OMP_NUM_THREADS-}" ]; then
    cores=${SLURM_CPUS_ON_NODE:-$(nproc)}
    OMP_NUM_THREADS=$((cores / per_node > 0 ? cores / per_node : 1))
    export OMP_NUM_THREADS
fi

# Launch `pipedream train` on every task of the job.
launch() {
    case $launcher in
    srun)
        local extra=${PD_SRUN_ARGS-}
        if [ -z "${PD_SRUN_ARGS+x}" ] && [ "$PD_DEVICE" = cuda ] && [ "$gpus" -gt 0 ]; then
            extra=--gpus-per-task=1
        fi
        # shellcheck disable=SC2086
        srun --mpi=pmix --ntasks="$ntasks" --kill-on-bad-exit=1 $extra "$PIPEDREAM" "$@"
        ;;
    mpirun)
        local flags=
        if mpirun --version 2>&1 | grep -q "Open MPI"; then
            flags=--oversubscribe
            if [ "$(id -u)" -eq 0 ]; then
                export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
            fi
        fi
        mpirun $flags -np "$ntasks" "$PIPEDREAM" "$@"
        ;;
    *) pd_die "PD_LAUNCHER must be srun or mpirun, not '$launcher'" ;;
    esac
}

# 1. Profile (one process; the model's layers on this node's device).
data_args=(--dataset "$PD_DATASET")
[ -z "$PD_DATA" ] || data_args+=(--data "$PD_DATA")
read -r -a model_args <<<"$PD_MODEL_ARGS"
if [ -n "${PD_PROFILE-}" ]; then
    cp "$PD_PROFILE" "$out/profile.json"
else
    read -r -a profile_args <<<"$PD_PROFILE_ARGS"
    profile_data=()
    # The profiler reads real images (and times their loading); it feeds its
    # own inputs for synthetic data and for S2VT's captions, which it cannot read.
    case $PD_DATASET in
    synthetic | s2vt | s2vt-synthetic) ;;
    *) profile_data=(--data "$PD_DATASET${PD_DATA:+:$PD_DATA}") ;;
    esac
    device=$PD_DEVICE
    [ "$device" != cuda ] || device=cuda:0
    "$PIPEDREAM" profile --model "$PD_MODEL" "${model_args[@]}" --batch-size "$PD_BATCH" --device "$device" \
        "${profile_args[@]}" "${profile_data[@]}" -o "$out/profile.json" >"$out/profile.txt" 2>"$out/profile.log" ||
        { cat "$out/profile.log" >&2; pd_die "profiling failed"; }
fi

# 2. Plan PipeDream's stages for the allocation.
spec=${PD_LEVELS:-${per_node}x$PD_INTRA_BW}
[ -n "${PD_LEVELS-}" ] || [ "$nodes" -eq 1 ] || spec=$spec,${nodes}x$PD_INTER_BW
levels=(--levels "$spec")
[ -z "${PD_CLUSTER-}" ] || levels=(--cluster "$PD_CLUSTER")
read -r -a plan_args <<<"$PD_PLAN_ARGS"
"$PIPEDREAM" plan --profile "$out/profile.json" "${levels[@]}" "${plan_args[@]}" -o "$out/plan.json" \
    >"$out/plan.txt" 2>"$out/plan.log" || { cat "$out/plan.log" >&2; pd_die "planning failed"; }
pd_log "plan: $(grep -c '"first_layer"' "$out/plan.json") stage(s) (see $out/plan.txt)"

# The data-parallel baseline: one stage over every compute layer, every
# task a replica (the profile's nodes in order; inputs are skipped).
read -r first last < <(awk '
    /"name":/ { name = $2; gsub(/[",]/, "", name) }
    /"type":/ { type = $2; gsub(/[",]/, "", type); if (type != "input") { if (first == "") first = name; last = name } }
    END { print first, last }' "$out/profile.json")
[ -n "$first" ] || pd_die "no compute layers in $out/profile.json"
printf '{"cluster": {"levels": "%s"},\n "stages": [{"first_layer": "%s", "last_layer": "%s", "replicas": %d}]}\n' \
    "$spec" "$first" "$last" "$ntasks" >"$out/dp.plan.json"

# 3. Train: PipeDream's plan and schedule, then the baseline.
read -r -a train_args <<<"$PD_TRAIN_ARGS"
common=(--model "$PD_MODEL" "${model_args[@]}" "${data_args[@]}" --batch-size "$PD_BATCH" --device "$PD_DEVICE"
    --profile "$out/profile.json" --progress-every 30 "${train_args[@]}")
if [ -n "$PD_STEPS" ]; then common+=(--steps "$PD_STEPS"); else common+=(--epochs "$PD_EPOCHS"); fi
[ -z "$PD_TRANSPORT" ] || common+=(--transport "$PD_TRANSPORT")

run() { # name plan schedule
    pd_log "$1: $3 on $ntasks ranks ($launcher)"
    if ! launch train "${common[@]}" --plan "$2" --schedule "$3" --metrics "$out/$1.csv" \
        >"$out/$1.out" 2>"$out/$1.log"; then
        tail -n 20 "$out/$1.log" >&2
        pd_die "$1 run failed (see $out/$1.log)"
    fi
    grep '^{' "$out/$1.out" | tail -n 1 >"$out/$1.json"
    [ -s "$out/$1.json" ] || pd_die "$1 run printed no summary (see $out/$1.out)"
}
for r in $PD_RUNS; do
    case $r in
    pipedream) run pipedream "$out/plan.json" "$PD_SCHEDULE" ;;
    dp) run dp "$out/dp.plan.json" dp ;;
    *) pd_die "PD_RUNS: unknown run '$r' (pipedream, dp)" ;;
    esac
done

# 4. summary.json: both runs' rates and accuracies, and the speedup.
field() { # file key: a number from a one-line JSON summary, or null
    local v
    v=$(sed -n "s/.*\"$2\": *\([-0-9.eE+]*\).*/\1/p" "$1" 2>/dev/null)
    echo "${v:-null}"
}
entry() {
    [ -s "$out/$1.json" ] || { echo null; return; }
    printf '{"samples_per_s": %s, "test_accuracy": %s, "final_loss": %s, "train_seconds": %s}' \
        "$(field "$out/$1.json" images_per_s)" "$(field "$out/$1.json" test_accuracy)" \
        "$(field "$out/$1.json" final_loss)" "$(field "$out/$1.json" train_seconds)"
}
pd_rate=$(field "$out/pipedream.json" images_per_s)
dp_rate=$(field "$out/dp.json" images_per_s)
speedup=null
if [ "$pd_rate" != null ] && [ "$dp_rate" != null ]; then
    speedup=$(awk -v a="$pd_rate" -v b="$dp_rate" 'BEGIN { if (b > 0) printf "%.4f", a / b; else print "null" }')
fi
cat >"$out/summary.json" <<EOF
{"job": "$job", "model": "$PD_MODEL", "nodes": $nodes, "tasks_per_node": $per_node, "device": "$PD_DEVICE",
 "schedule": "$PD_SCHEDULE", "batch": $PD_BATCH,
 "pipedream": $(entry pipedream),
 "dp": $(entry dp),
 "speedup_over_dp": $speedup}
EOF
cat "$out/summary.json"
