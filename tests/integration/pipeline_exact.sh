#!/bin/sh
# The pipeline runtime against sequential training, bit for bit (losses
# printed with 9 significant digits, exact for f32), on a small MLP with
# synthetic data on the CPU:
#  (a) a 1-stage plan on 1 rank = the single-process trainer, 20 steps;
#  (b) 2 stages, straight and gpipe with one microbatch per flush = the
#      single-process trainer;
#  (c) 2, 3 and 4 stages, 1f1b with weight stashing = tests/integration/
#      pipeline_ref (each gradient computed on the stashed version and
#      applied to the newest weights; with 4 stages the three with
#      parameters run 3, 2 and 1 updates stale);
#  (d) a replicated stage (2 + 1 ranks, all-reduce) runs to the end, and
#      one stage on 2 replicas with 1f1b = dp bit for bit;
#  (e) a rank killed with SIGKILL makes the job exit non-zero within 30 s
#      with a message naming that rank (mpirun's own handling; the
#      runtime's detection is tests/integration/pipeline_resume.sh's).
# Skips (77) without MPI in the build or without mpirun.
set -eu
: "${top_builddir:?run under make check}" "${top_srcdir:?run under make check}"
pd="$top_builddir/src/cli/pipedream"
ref="$top_builddir/tests/integration/pipeline_ref"

. "$top_srcdir/tests/integration/pipeline_env.sh"

steps=20 seed=3 lr=0.05
common="--model mlp --dataset synthetic --channels 1 --height 8 --width 8 --batch-size 8 --seed $seed --lr $lr --quiet"
mlp_profile_and_plans
cat >"$work/one.plan.json" <<'JSON'
{"cluster": {"levels": "1x1GB/s"}, "stages": [{"first_layer": "flatten", "last_layer": "loss", "replicas": 1}]}
JSON
cat >"$work/four.plan.json" <<'JSON'
{"cluster": {"levels": "4x1GB/s"}, "stages": [{"first_layer": "flatten", "last_layer": "fc1", "replicas": 1},
 {"first_layer": "relu1", "last_layer": "fc2", "replicas": 1}, {"first_layer": "relu2", "last_layer": "fc3", "replicas": 1},
 {"first_layer": "loss", "last_layer": "loss", "replicas": 1}]}
JSON
pipeline() { # ranks plan metrics [options]
    p_ranks=$1 p_plan=$2 p_metrics=$3
    shift 3
    run_pipeline 60 "$p_ranks" "$p_plan" --steps $steps --metrics "$p_metrics" "$@"
}

"$pd" train $common --steps $steps --metrics "$work/single.csv" >/dev/null || fail "single-process training"
losses "$work/single.csv" >"$work/single.txt"
[ "$(wc -l <"$work/single.txt")" -eq $steps ] || fail "the trainer wrote $(wc -l <"$work/single.txt") losses"

# (a)
pipeline 1 one.plan.json "$work/a.csv"
losses "$work/a.csv" >"$work/a.txt"
same "1 stage on 1 rank = single process" "$work/single.txt" "$work/a.txt"

# (b)
pipeline 2 two.plan.json "$work/b1.csv" --schedule straight
losses "$work/b1.csv" >"$work/b1.txt"
same "2 stages straight = sequential" "$work/single.txt" "$work/b1.txt"
pipeline 2 two.plan.json "$work/b2.csv" --schedule gpipe --microbatches 1
losses "$work/b2.csv" >"$work/b2.txt"
same "2 stages gpipe, 1 microbatch per flush = sequential" "$work/single.txt" "$work/b2.txt"

# (c)
for plan in two three four; do
    case $plan in two) n=2 ;; three) n=3 ;; *) n=4 ;; esac
    pipeline $n $plan.plan.json "$work/c-$plan.csv"
    losses "$work/c-$plan.csv" >"$work/c-$plan.txt"
    "$ref" "$work/$plan.plan.json" "$work/mlp.profile.json" mlp 8 8 $steps $seed $lr >"$work/ref-$plan.txt" ||
        fail "pipeline_ref $plan"
    same "$n stages 1f1b with weight stashing = the stashed-version reference" "$work/ref-$plan.txt" "$work/c-$plan.txt"
    # Stashing matters: the stale stage-0 weights change the losses.
    ! cmp -s "$work/single.txt" "$work/c-$plan.txt" || fail "1f1b on $n stages gave the sequential losses"
done

# (d)
pipeline 3 rep.plan.json "$work/d.csv"
[ "$(losses "$work/d.csv" | grep -c '^[0-9]')" -eq $steps ] || fail "replicated stage: not $steps finite losses"
echo "ok: a replicated stage (2 replicas, all-reduce) trains $steps minibatches"
# One stage on 2 replicas: 1f1b steps right after each all-reduce, so it is
# data parallelism exactly; with --overlap-allreduce forwards run a round
# behind.
pipeline 2 dp.plan.json "$work/d-dp.csv" --schedule dp
pipeline 2 dp.plan.json "$work/d-1f1b.csv"
pipeline 2 dp.plan.json "$work/d-overlap.csv" --overlap-allreduce
losses "$work/d-dp.csv" >"$work/d-dp.txt"
losses "$work/d-1f1b.csv" >"$work/d-1f1b.txt"
losses "$work/d-overlap.csv" >"$work/d-overlap.txt"
same "1 stage x 2 replicas: 1f1b = dp" "$work/d-dp.txt" "$work/d-1f1b.txt"
! cmp -s "$work/d-dp.txt" "$work/d-overlap.txt" || fail "--overlap-allreduce gave data parallelism's losses"

# (e)
start=$(date +%s)
status=0
timeout 60 mpirun $mpirun_flags -np 2 "$pd" train ${common% --quiet} --steps 2000000 --plan "$work/two.plan.json" \
    --profile "$work/mlp.profile.json" --timeout 20 >"$work/out" 2>"$work/err" &
job=$!
pid=
for _ in $(seq 1 100); do
    pid=$(sed -n 's/^pipedream: rank 1 of 2 (pid \([0-9]*\)).*/\1/p' "$work/err")
    [ -n "$pid" ] && break
    sleep 0.2
done
[ -n "$pid" ] || { kill "$job" 2>/dev/null; fail "rank 1 never reported its pid"; }
sleep 1
kill -9 "$pid"
wait "$job" || status=$?
took=$(($(date +%s) - start))
[ "$status" -ne 0 ] || fail "the job exited 0 after rank 1 was killed"
[ "$status" -ne 124 ] || fail "the job hung after rank 1 was killed"
[ "$took" -le 35 ] || fail "the job took $took s to stop after rank 1 was killed"
grep -q "rank 1" "$work/err" || { cat "$work/err"; fail "no message names the dead rank 1"; }
echo "ok: killing rank 1 stopped the job (exit $status) within $took s, naming rank 1"
