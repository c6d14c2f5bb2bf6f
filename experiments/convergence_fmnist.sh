#!/bin/sh
# Convergence of the pipeline runtime against data parallelism (PipeDream's
# statistical-efficiency check): VGG16 at width 1/8 on Fashion-MNIST padded
# to 32x32, Adam at peak lr 0.002 with a linear warm-up over the first
# WARMUP optimizer steps and a cosine decay after it, trained for the same
# number of epochs on 4 ranks three ways:
#
#   pipeline-4  4 stages, 1f1b with weight stashing, minibatch 64
#   hybrid-2x2  2 stages x 2 replicas, 1f1b, 32 per replica
#   dp-4        1 stage x 4 replicas (data parallelism), 16 per replica
#
# Every optimizer step therefore sees 64 samples, and since a loader shard's
# j-th minibatches together are the unsharded loader's j-th, the three runs
# read the same samples in the same order: they differ only in how stale
# the weights are that a gradient is computed on (and in float summation
# order). Each epoch ends with the test accuracy on the whole test split.
# The warm-up is the same for the three: `pipedream train` counts
# --warmup-steps in minibatches of a stage-0 replica, of which an optimizer
# step takes one per replica, so each run gets WARMUP x its replicas.
#
# Usage: experiments/convergence_fmnist.sh [EPOCHS]   (default 10, the
# comparison in docs/runtime.md: about 25 minutes for the three runs on 2
# idle cores; after 3 the 4-stage pipeline still trails dp by 1-1.5 points)
# Environment: PIPEDREAM (the program; default: pipedream on PATH, else
# src/cli/pipedream under the current directory), MPIRUN (default mpirun),
# DATA (default /usr/share/datasets/fashion-mnist), OUT (default
# experiments/results), SEED (default 1), EXTRA (more `pipedream train`
# options, e.g. "--limit-train 2560 --limit-test 640" for a quick try),
# RUNS (the runs to do, default "pipeline-4 hybrid-2x2 dp-4"; the CSV
# gathers every run done so far in $OUT), OPTIMIZER (default adam), LR (the
# peak, default 0.002), WARMUP (optimizer steps of 64 samples, default
# 937, an epoch; 0: none).
# Writes $OUT/convergence_fmnist.csv (one row per run and epoch) and the
# runs' metrics and logs under $OUT/convergence_fmnist/.
set -eu
epochs=${1:-10}
pd=${PIPEDREAM:-$(command -v pipedream || echo src/cli/pipedream)}
mpirun=${MPIRUN:-mpirun}
data=${DATA:-/usr/share/datasets/fashion-mnist}
out=${OUT:-experiments/results}
seed=${SEED:-1}
extra=${EXTRA:-}
optimizer=${OPTIMIZER:-adam}
lr=${LR:-0.002}
warmup=${WARMUP:-937}
dir="$out/convergence_fmnist"
mkdir -p "$dir"

flags=
if "$mpirun" --version 2>&1 | grep -q "Open MPI"; then
    flags=--oversubscribe # 4 ranks on fewer cores
    if [ "$(id -u)" -eq 0 ]; then
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
    fi
fi
# One thread per rank: four ranks share the cores.
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OMP_NUM_THREADS

model="--model vgg16 --width-mult 0.125 --height 32 --width 32"
train="--dataset fashion-mnist --data $data --optimizer $optimizer --lr $lr --lr-schedule cosine --epochs $epochs --seed $seed"

[ -e "$dir/vgg16.profile.json" ] || "$pd" profile $model --channels 3 --classes 10 --batch-size 64 --warmup 1 --iterations 3 \
    -o "$dir/vgg16.profile.json" >"$dir/profile.txt"
cat >"$dir/pipeline-4.plan.json" <<'JSON'
{"cluster": {"levels": "4x1GB/s"}, "stages": [
 {"first_layer": "features.0", "last_layer": "features.6", "replicas": 1},
 {"first_layer": "features.7", "last_layer": "features.13", "replicas": 1},
 {"first_layer": "features.14", "last_layer": "features.20", "replicas": 1},
 {"first_layer": "features.21", "last_layer": "loss", "replicas": 1}]}
JSON
cat >"$dir/hybrid-2x2.plan.json" <<'JSON'
{"cluster": {"levels": "4x1GB/s"}, "stages": [
 {"first_layer": "features.0", "last_layer": "features.13", "replicas": 2},
 {"first_layer": "features.14", "last_layer": "loss", "replicas": 2}]}
JSON
cat >"$dir/dp-4.plan.json" <<'JSON'
{"cluster": {"levels": "4x1GB/s"}, "stages": [{"first_layer": "features.0", "last_layer": "loss", "replicas": 4}]}
JSON

csv="$out/convergence_fmnist.csv"
run() { # name schedule stages replicas batch
    name=$1 schedule=$2 stages=$3 replicas=$4 batch=$5
    case " ${RUNS:-pipeline-4 hybrid-2x2 dp-4} " in *" $name "*) ;; *) return 0 ;; esac
    echo "== $name: $schedule, $stages stage(s) x $replicas replica(s), batch $batch per replica" >&2
    "$mpirun" $flags -np 4 "$pd" train $model $train --warmup-steps $((warmup * replicas)) $extra \
        --batch-size "$batch" --schedule "$schedule" --plan "$dir/$name.plan.json" \
        --profile "$dir/vgg16.profile.json" --metrics "$dir/$name.csv" --progress-every 60 >"$dir/$name.json" 2>"$dir/$name.log"
    grep "test accuracy" "$dir/$name.log" >&2 || true
    summary=$(cat "$dir/$name.json")
    rate=$(echo "$summary" | sed 's/.*"images_per_s":\([0-9.]*\).*/\1/')
    seconds=$(echo "$summary" | sed 's/.*"train_seconds":\([0-9.]*\).*/\1/')
    # The rows with a test accuracy: the ends of the epochs.
    awk -F, -v n="$name" -v s="$schedule" -v st="$stages" -v r="$replicas" -v b="$batch" -v rate="$rate" \
        -v sec="$seconds" 'NR > 1 && $8 != "" { printf "%s,%s,%s,%s,%s,%d,%s,%s,%s\n", n, s, st, r, b, $2 + 0.5, $8, rate, sec }' \
        "$dir/$name.csv" >"$dir/$name.rows"
}
run pipeline-4 1f1b 4 1 64
run hybrid-2x2 1f1b 2 2 32
run dp-4 dp 1 4 16
echo "run,schedule,stages,replicas_per_stage,batch_per_replica,epoch,test_accuracy,samples_per_s,train_seconds" >"$csv"
for name in pipeline-4 hybrid-2x2 dp-4; do
    [ ! -e "$dir/$name.rows" ] || cat "$dir/$name.rows" >>"$csv"
done
cat "$csv"
