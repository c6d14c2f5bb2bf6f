#!/bin/sh
# --precision bf16 in the pipeline runtime (bf16 cut tensors on the wire,
# f32 master weights) against sequential bf16 training, bit for bit (losses
# printed with 9 significant digits, exact for f32), on the small MLP of
# pipeline_exact.sh with synthetic data on the CPU:
#  (a) a 1-stage plan on 1 rank = single-process `train --precision bf16`,
#      20 steps;
#  (b) 2 stages, 1f1b with weight stashing = tests/integration/pipeline_ref
#      with `precision bf16` (and not the f32 reference: bf16 took effect);
#      the profile being f32's, rank 0 warns that the plan priced the cuts
#      at f32 sizes;
#  (c) 2 stages, straight, launched with --np 2 = single-process bf16;
#  (d) the wire: the per-rank progress lines count the messages and bytes
#      each rank sent its peer; against the same run in f32, the gradients
#      stage 1 sends are exactly half the bytes, the activations stage 0
#      sends half plus the labels (i32, as in f32), in as many messages;
#  (e) --np 2 without a plan: rank 0 profiles in bf16 and plans; it trains;
#  (f) checkpoints hold the f32 master weights only, and a 1f1b bf16 run
#      resumed half-way repeats the uninterrupted run's losses bit for bit.
# Skips (77) without MPI in the build or without mpirun.
set -eu
: "${top_builddir:?run under make check}" "${top_srcdir:?run under make check}"
pd="$top_builddir/src/cli/pipedream"
ref="$top_builddir/tests/integration/pipeline_ref"

. "$top_srcdir/tests/integration/pipeline_env.sh"

steps=20 seed=3 lr=0.05 batch=8
common="--model mlp --dataset synthetic --channels 1 --height 8 --width 8 --batch-size $batch --seed $seed --lr $lr"
mlp_profile_and_plans
cat >"$work/one.plan.json" <<'JSON'
{"cluster": {"levels": "1x1GB/s"}, "stages": [{"first_layer": "flatten", "last_layer": "loss", "replicas": 1}]}
JSON
pipeline() { # ranks plan metrics [options]
    p_ranks=$1 p_plan=$2 p_metrics=$3
    shift 3
    run_pipeline 60 "$p_ranks" "$p_plan" --steps $steps --metrics "$p_metrics" "$@"
}

# shellcheck disable=SC2086
"$pd" train $common --quiet --steps $steps --precision bf16 --metrics "$work/single.csv" >/dev/null ||
    fail "single-process bf16 training"
losses "$work/single.csv" >"$work/single.txt"
[ "$(wc -l <"$work/single.txt")" -eq $steps ] || fail "the trainer wrote $(wc -l <"$work/single.txt") losses"

# (a)
pipeline 1 one.plan.json "$work/a.csv" --quiet --precision bf16
losses "$work/a.csv" >"$work/a.txt"
same "(a) bf16, 1 stage on 1 rank = single process" "$work/single.txt" "$work/a.txt"

# (b), with the progress lines of (d): one at the end of the run.
pipeline 2 two.plan.json "$work/b.csv" --precision bf16 --progress-every 1000
cp "$work/err" "$work/b.err"
losses "$work/b.csv" >"$work/b.txt"
"$ref" "$work/two.plan.json" "$work/mlp.profile.json" mlp $batch 8 $steps $seed $lr precision bf16 \
    >"$work/ref.txt" || fail "pipeline_ref precision bf16"
same "(b) bf16, 2 stages 1f1b with weight stashing = the stashed-version reference" "$work/ref.txt" "$work/b.txt"
"$ref" "$work/two.plan.json" "$work/mlp.profile.json" mlp $batch 8 $steps $seed $lr >"$work/ref-f32.txt" ||
    fail "pipeline_ref f32"
! cmp -s "$work/ref-f32.txt" "$work/b.txt" || fail "(b) the bf16 pipeline gave the f32 reference's losses"
! cmp -s "$work/single.txt" "$work/b.txt" || fail "(b) 1f1b on 2 stages gave the sequential losses"
# The profile is f32's: rank 0 says the plan priced the cuts at f32 sizes.
grep -q "holds f32 activations but this run stores bf16" "$work/b.err" || fail "(b) no warning about the f32 profile"

# (c)
status=0
# shellcheck disable=SC2086
timeout 60 "$pd" train $common --quiet --steps $steps --precision bf16 --np 2 --schedule straight \
    --plan "$work/two.plan.json" --profile "$work/mlp.profile.json" --metrics "$work/c.csv" >"$work/out" \
    2>"$work/err" || status=$?
[ "$status" -eq 0 ] || { cat "$work/err"; fail "(c) --np 2 --precision bf16 exited $status"; }
losses "$work/c.csv" >"$work/c.txt"
same "(c) bf16, 2 stages straight (--np 2) = single process" "$work/single.txt" "$work/c.txt"

# (d) "messages bytes" that rank $2 sent to rank $3 in all its lines of $1.
sent() {
    sed -n "s/^pipedream: rank $2 (stage .*; sent rank $3 \([0-9]*\) messages, \([0-9]*\) bytes.*/\1 \2/p" "$1" |
        awk '{ m += $1; b += $2 } END { print m + 0, b + 0 }'
}
pipeline 2 two.plan.json "$work/d.csv" --progress-every 1000
cp "$work/err" "$work/d.err"
set -- $(sent "$work/d.err" 0 1) $(sent "$work/b.err" 0 1) $(sent "$work/d.err" 1 0) $(sent "$work/b.err" 1 0)
act_msgs=$1 act_f32=$2 act_bf16_msgs=$3 act_bf16=$4 grad_msgs=$5 grad_f32=$6 grad_bf16_msgs=$7 grad_bf16=$8
echo "activations (stage 0 -> 1): f32 $act_f32 bytes in $act_msgs messages, bf16 $act_bf16 bytes in $act_bf16_msgs"
echo "gradients (stage 1 -> 0): f32 $grad_f32 bytes in $grad_msgs messages, bf16 $grad_bf16 bytes in $grad_bf16_msgs"
[ "$act_msgs" -gt $steps ] && [ "$grad_msgs" -eq $steps ] || fail "(d) message counts $act_msgs and $grad_msgs"
[ "$act_bf16_msgs" -eq "$act_msgs" ] && [ "$grad_bf16_msgs" -eq "$grad_msgs" ] ||
    fail "(d) bf16 sent another number of messages than f32"
[ $((2 * grad_bf16)) -eq "$grad_f32" ] || fail "(d) bf16 gradients: $grad_bf16 bytes, not half of f32's $grad_f32"
# Each activation message also carries the minibatch's labels: $batch i32.
[ $((2 * act_bf16 - act_f32)) -eq $((act_msgs * batch * 4)) ] ||
    fail "(d) bf16 activations: $act_bf16 bytes, not half of f32's $act_f32 plus the labels"
echo "ok: (d) on the wire bf16 gradients are half of f32's, activations half plus the i32 labels"

# (e)
status=0
# shellcheck disable=SC2086
timeout 60 "$pd" train $common --steps 4 --precision bf16 --np 2 --metrics "$work/e.csv" >"$work/e.json" \
    2>"$work/e.err" || status=$?
[ "$status" -eq 0 ] || { cat "$work/e.err"; fail "(e) --np 2 --precision bf16 without a plan exited $status"; }
grep -q "plan for mlp" "$work/e.err" || { cat "$work/e.err"; fail "(e) no plan printed"; }
[ "$(losses "$work/e.csv" | grep -c '^[0-9]')" -eq 4 ] || fail "(e) not 4 finite losses"
echo "ok: (e) --np 2 --precision bf16 without a plan: profiled, planned, trained 4 minibatches"

# (f)
half=$((steps / 2))
pipeline 2 two.plan.json "$work/f-full.csv" --quiet --precision bf16 --checkpoint-dir "$work/f-full" \
    --checkpoint-every $half
run_pipeline 60 2 two.plan.json --quiet --precision bf16 --steps $half --checkpoint-dir "$work/f" \
    --metrics "$work/f1.csv"
pipeline 2 two.plan.json "$work/f2.csv" --quiet --precision bf16 --resume "$work/f"
rows "$work/f-full.csv" $((half + 1)) >"$work/f-full.txt"
rows "$work/f2.csv" 1 >"$work/f2.txt"
[ "$(wc -l <"$work/f2.txt")" -eq $half ] || fail "(f) the resumed run wrote $(wc -l <"$work/f2.txt") rows"
same "(f) bf16 1f1b resumed half-way = uninterrupted" "$work/f-full.txt" "$work/f2.txt"
files=$(find "$work/f-full" -name '*.safetensors' | wc -l)
dtypes=$(find "$work/f-full" -name '*.safetensors' -exec sh -c 'head -c 4096 "$1" | tr -d "\000"' sh {} \; |
    grep -ao '"dtype": *"[A-Z0-9]*"' | sed 's/.*"\([A-Z0-9]*\)"$/\1/' | sort -u | tr '\n' ' ')
[ "$files" -ge 2 ] && [ "$dtypes" = "F32 " ] || fail "(f) $files checkpoint files hold dtypes '$dtypes', not F32 only"
echo "ok: (f) $files checkpoint files of the bf16 pipeline hold F32 tensors only"
