#!/bin/sh
# PipeDream-2BW (`--weight-versions 2`) against tests/integration/
# pipeline_ref's 2BW mode, a one-process reference applying
# W(k+1) = W(k) - lr grad f(W(k-1)): batch k's minibatches forward and
# backward on the weights after k - 1 updates at every stage, their
# gradients summed in order and averaged over the batch. Small MLP,
# synthetic data, CPU, losses compared bit for bit (9 significant digits,
# exact for f32):
#  (a) 2 and 3 stages with the default batch (the depth: 2, 3) and 2
#      stages with --accumulate 4 equal the reference; each rank holds 2
#      weight versions where stashing holds in-flight + 2; 2BW differs
#      from stashing and from sequential training;
#  (b) replicas: one stage on 2 replicas, and 2 replicas feeding one
#      stage, equal the reference with M = 2 (each replica sums its share
#      of the batch; two replicas' all-reduce adds two numbers, which is
#      exact in either order);
#  (c) a checkpoint at an update boundary resumes bit for bit (Adam: the
#      step count is the updates, minibatches / M);
#  (d) bad options are refused with one line: --weight-versions 3,
#      --accumulate without it, with --vertical-sync or gpipe, and an M
#      below the pipeline's depth.
# Skips (77) without MPI in the build or without mpirun.
set -eu
: "${top_builddir:?run under make check}" "${top_srcdir:?run under make check}"
pd="$top_builddir/src/cli/pipedream"
ref="$top_builddir/tests/integration/pipeline_ref"

. "$top_srcdir/tests/integration/pipeline_env.sh"

steps=24 seed=3 lr=0.05
common="--model mlp --dataset synthetic --channels 1 --height 8 --width 8 --batch-size 8 --seed $seed --lr $lr"
mlp_profile_and_plans
pipeline() { # ranks plan metrics [options]
    p_ranks=$1 p_plan=$2 p_metrics=$3
    shift 3
    run_pipeline 120 "$p_ranks" "$p_plan" --metrics "$p_metrics" "$@"
}
reference() { # plan M output
    "$ref" "$work/$1" "$work/mlp.profile.json" mlp 8 8 $steps $seed $lr 2bw "$2" >"$3" || fail "pipeline_ref $1 2bw $2"
}

# (a)
"$pd" train $common --quiet --steps $steps --metrics "$work/single.csv" >/dev/null || fail "single-process training"
losses "$work/single.csv" >"$work/single.txt"
for plan in two three; do
    n=2
    [ $plan = three ] && n=3
    pipeline $n $plan.plan.json "$work/a-$plan.csv" --steps $steps --weight-versions 2
    losses "$work/a-$plan.csv" >"$work/a-$plan.txt"
    [ "$(grep -c "$n in flight, 2 weight versions (2BW, an update every $n minibatches)" "$work/err")" -eq 1 ] ||
        { cat "$work/err"; fail "stage 0 of $n does not report 2 weight versions and an update every $n"; }
    [ "$(grep -c ", 2 weight versions (2BW" "$work/err")" -eq $n ] || fail "not every rank of $n holds 2 versions"
    reference $plan.plan.json $n "$work/ref-$plan.txt"
    same "$n stages, 2BW = the 2BW reference (M = $n)" "$work/ref-$plan.txt" "$work/a-$plan.txt"
    pipeline $n $plan.plan.json "$work/s-$plan.csv" --steps $steps
    grep -q "stage 0 of $n, .* $n in flight, $((n + 2)) weight versions" "$work/err" ||
        { cat "$work/err"; fail "stashing on $n stages does not keep $((n + 2)) versions at stage 0"; }
    losses "$work/s-$plan.csv" >"$work/s-$plan.txt"
    ! cmp -s "$work/s-$plan.txt" "$work/a-$plan.txt" || fail "2BW on $n stages gave weight stashing's losses"
    ! cmp -s "$work/single.txt" "$work/a-$plan.txt" || fail "2BW on $n stages gave the sequential losses"
done
pipeline 2 two.plan.json "$work/a4.csv" --steps $steps --weight-versions 2 --accumulate 4
losses "$work/a4.csv" >"$work/a4.txt"
reference two.plan.json 4 "$work/ref-4.txt"
same "2 stages, 2BW --accumulate 4 = the 2BW reference (M = 4)" "$work/ref-4.txt" "$work/a4.txt"
! cmp -s "$work/a-two.txt" "$work/a4.txt" || fail "--accumulate 4 gave the losses of M = 2"

# (b)
pipeline 2 dp.plan.json "$work/b-dp.csv" --steps $steps --weight-versions 2
losses "$work/b-dp.csv" >"$work/b-dp.txt"
reference dp.plan.json 2 "$work/ref-dp.txt"
same "1 stage x 2 replicas, 2BW = the 2BW reference (M = 2)" "$work/ref-dp.txt" "$work/b-dp.txt"
pipeline 3 rep.plan.json "$work/b-rep.csv" --steps $steps --weight-versions 2
losses "$work/b-rep.csv" >"$work/b-rep.txt"
reference rep.plan.json 2 "$work/ref-rep.txt"
same "2 replicas + 1 stage, 2BW = the 2BW reference (M = 2)" "$work/ref-rep.txt" "$work/b-rep.txt"

# (c)
adam="--optimizer adam --lr 0.01"
pipeline 3 three.plan.json "$work/c-full.csv" --steps $steps --weight-versions 2 $adam \
    --checkpoint-dir "$work/c-full" --checkpoint-every 12
pipeline 3 three.plan.json "$work/c1.csv" --steps 12 --weight-versions 2 $adam --checkpoint-dir "$work/c"
pipeline 3 three.plan.json "$work/c2.csv" --steps $steps --weight-versions 2 $adam --resume "$work/c"
rows "$work/c-full.csv" 13 >"$work/c-full.txt"
rows "$work/c2.csv" 1 >"$work/c2.txt"
[ "$(wc -l <"$work/c2.txt")" -eq 12 ] || fail "(c) the resumed run wrote $(wc -l <"$work/c2.txt") rows"
same "(c) 2BW resumed at minibatch 12 (Adam) = the uninterrupted run" "$work/c-full.txt" "$work/c2.txt"

# (d)
refused() { # what options...: exit 2 and one line on stderr naming `what`
    r_what=$1
    shift
    status=0
    # shellcheck disable=SC2086
    timeout 60 "$pd" train $common --steps $steps --plan "$work/two.plan.json" --profile "$work/mlp.profile.json" \
        "$@" >"$work/out" 2>"$work/err" || status=$?
    [ "$status" -eq 2 ] || { cat "$work/err"; fail "$* exited $status, not 2"; }
    [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q -- "$r_what" "$work/err" ||
        { cat "$work/err"; fail "$*: not one line naming '$r_what'"; }
    echo "ok: $* refused: $(cat "$work/err")"
}
refused "--weight-versions 3" --weight-versions 3
refused "--accumulate is for --weight-versions 2" --accumulate 4
refused "vertical sync" --weight-versions 2 --vertical-sync
refused "1f1b schedule, not gpipe" --weight-versions 2 --schedule gpipe
status=0
timeout 60 mpirun $mpirun_flags -np 3 "$pd" train $common --steps $steps --plan "$work/three.plan.json" \
    --profile "$work/mlp.profile.json" --weight-versions 2 --accumulate 2 >"$work/out" 2>"$work/err" || status=$?
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "--accumulate 2 on 3 stages exited $status"
grep -q "2 minibatches per weight version: need at least the pipeline's depth, 3 stages" "$work/err" ||
    { cat "$work/err"; fail "--accumulate 2 on 3 stages: no message naming the depth"; }
echo "ok: --accumulate 2 on 3 stages refused (the pipeline's depth)"
