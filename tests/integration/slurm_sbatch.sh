#!/bin/sh
# The paper's experiment scripts under a real Slurm: starts the single-node
# cluster of slurm/local/ (munged, slurmctld, slurmd; 4 fake GPUs as GRES),
# submits experiments/vgg16.sbatch with a tiny VGG16 (width 1/16, 32x32,
# synthetic data) and experiments/s2vt.sbatch with a tiny S2VT (width 1/20,
# 5 frames of 12 features, 5 decoder steps, its synthetic captioning task),
# each for 8 minibatches of 8 on 2 tasks on the CPU, and checks that each
# job completed, that it ran both the PipeDream plan and the data-parallel
# baseline on 2 ranks through `srun --mpi=pmix`, and that every result
# landed in results/<job id>: profile, plans, metrics with a row per
# minibatch, rank 0's summaries and summary.json comparing the two. The
# daemons are stopped by PID whatever happens, and must be gone afterwards.
# Skips (77) without MPI in the build, without Slurm or munge installed, or
# when not root (slurmd must start job steps as the submitting user).
set -eu
: "${top_builddir:?run under make check}" "${top_srcdir:?run under make check}"
. "$top_srcdir/tests/integration/mpi_env.sh"
for prog in slurmctld slurmd sbatch srun scontrol munged; do
    if ! command -v $prog >/dev/null 2>&1; then
        echo "SKIP: $prog is not installed (Debian: slurm-wlm munge; tools/install-deps)"
        exit 77
    fi
done
if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: the local Slurm's slurmd runs jobs as root only here (not root)"
    exit 77
fi

work=$(mktemp -d)
# munged wants every directory above its socket searchable by all.
chmod 755 "$work"
PD_SLURM_DIR=$work/slurm
# Ports of our own, so that another cluster on this host does not answer.
PD_SLURM_CTLD_PORT=$((20000 + ($$ % 10000) * 2))
PD_SLURM_D_PORT=$((PD_SLURM_CTLD_PORT + 1))
export PD_SLURM_DIR PD_SLURM_CTLD_PORT PD_SLURM_D_PORT
cleanup() {
    "$top_srcdir/slurm/local/stop.sh" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
    echo "FAIL: $*"
    for f in "$work"/job-*.out "$PD_SLURM_DIR"/log/slurmctld.log; do
        [ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }
    done
    exit 1
}

status=0
"$top_srcdir/slurm/local/start.sh" || status=$?
[ $status -ne 77 ] || { echo "SKIP: slurm/local/start.sh found Slurm incomplete"; exit 77; }
[ $status -eq 0 ] || fail "slurm/local/start.sh exited $status"
. "$PD_SLURM_DIR/slurm.env"
for d in munged slurmctld slurmd; do
    pid=$(cat "$PD_SLURM_DIR/run/$d.pid")
    [ "$(cat /proc/"$pid"/comm)" = $d ] || fail "$d.pid names $pid, not $d"
done
# The fake GPUs are GRES the job can ask for.
[ "$(scontrol show node localhost | grep -o 'Gres=gpu:4')" = Gres=gpu:4 ] || fail "the node has no gpu:4 GRES"

PIPEDREAM=$top_builddir/src/cli/pipedream
PD_RESULTS=$work/results
PD_DEVICE=cpu
PD_TRAIN_ARGS=
PD_BATCH=8
PD_STEPS=8
# A slow link between the 2 ranks: the planner then prefers 2 stages.
PD_INTRA_BW=10MB/s
OMP_NUM_THREADS=1
export PIPEDREAM PD_RESULTS PD_DEVICE PD_TRAIN_ARGS PD_BATCH PD_STEPS PD_INTRA_BW OMP_NUM_THREADS

# submit MODEL: experiments/MODEL.sbatch with the environment as set, and
# the checks above; the job's id in $job, its results in $out.
submit() {
    job=$(cd "$top_srcdir" && sbatch --parsable --nodes=1 --ntasks-per-node=2 --gpus-per-node=2 --time=5 \
        --output="$work/job-%j.out" "experiments/$1.sbatch") || fail "sbatch refused the $1 job"
    # sbatch --wait polls every few seconds; scontrol answers at once.
    state=
    for _ in $(seq 1 600); do
        state=$(scontrol show job "$job" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
        case $state in PENDING | CONFIGURING | RUNNING | COMPLETING | "") sleep 0.1 ;; *) break ;; esac
    done
    exit_code=$(scontrol show job "$job" | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p')
    [ "$state" = COMPLETED ] && [ "$exit_code" = 0:0 ] || fail "$1 job $job: $state, exit $exit_code"

    out=$PD_RESULTS/$job
    for f in profile.json plan.json plan.txt dp.plan.json pipedream.csv dp.csv pipedream.json dp.json summary.json; do
        [ -s "$out/$f" ] || fail "$1 job $job did not write $f"
    done
    grep -q '"first_layer"' "$out/plan.json" || fail "$1: plan.json has no stages"
    grep -q '"replicas": 2' "$out/dp.plan.json" || fail "$1: the baseline is not one stage on 2 replicas"
    for run in pipedream dp; do
        grep -q "$run: .* on 2 ranks (srun)" "$work/job-$job.out" || fail "$1: $run did not run through srun"
        grep -q "\"model\":\"$1\",\"ranks\":2," "$out/$run.json" || fail "$1: $run: not 2 ranks: $(cat "$out/$run.json")"
        grep -q '"minibatches":8,' "$out/$run.json" || fail "$1: $run: not 8 minibatches: $(cat "$out/$run.json")"
        [ "$(wc -l <"$out/$run.csv")" -eq 9 ] || fail "$1: $run.csv: $(wc -l <"$out/$run.csv") lines, not a header and 8 rows"
    done
    grep -q '"pipedream": {"samples_per_s": [0-9]' "$out/summary.json" || fail "$1: summary.json: no PipeDream rate"
    grep -q '"dp": {"samples_per_s": [0-9]' "$out/summary.json" || fail "$1: summary.json: no baseline rate"
    grep -q '"speedup_over_dp": [0-9]' "$out/summary.json" || fail "$1: summary.json: no speedup"
    cat "$out/summary.json"
}

PD_DATASET=synthetic
PD_MODEL_ARGS="--width-mult 0.0625 --channels 3 --height 32 --width 32"
PD_PROFILE_ARGS="--warmup 1 --iterations 2"
export PD_DATASET PD_MODEL_ARGS PD_PROFILE_ARGS
submit vgg16
# S2VT on the script's own data set (s2vt-synthetic), its vocabulary of 16
# words given to the profiler as the script does.
unset PD_DATASET
PD_MODEL_ARGS="--width-mult 0.05 --channels 12 --height 5 --width 5"
PD_PROFILE_ARGS="--warmup 1 --iterations 2 --classes 16"
submit s2vt
# Token accuracy on the held-out captions, counted as the trainer does.
for run in pipedream dp; do
    grep -q '"test_accuracy":[0-9.]*,"test_samples":[1-9][0-9]*,' "$out/$run.json" ||
        fail "s2vt: $run: no test token accuracy: $(cat "$out/$run.json")"
done

# Stopping goes by the pid files, and nothing may stay behind.
pids=$(cat "$PD_SLURM_DIR"/run/*.pid)
"$top_srcdir/slurm/local/stop.sh" || fail "slurm/local/stop.sh failed"
for pid in $pids; do
    state=$(sed 's/^.*) //' /proc/"$pid"/stat 2>/dev/null | cut -d' ' -f1 || true)
    [ -z "$state" ] || [ "$state" = Z ] || fail "daemon $pid still runs after stop.sh"
done
echo "PASS: the vgg16 and s2vt jobs completed both runs"
