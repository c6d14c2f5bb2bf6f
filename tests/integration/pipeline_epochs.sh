#!/bin/sh
# The pipeline runtime over epochs, with evaluation through the pipeline,
# on LeNet and a Fashion-MNIST subset:
#  (a) a 1-stage plan on 1 rank for 2 epochs = the single-process trainer:
#      the same losses, learning rates and test accuracy, bit for bit;
#  (b) 2 stages with 1f1b: the test accuracy is evaluated after each epoch
#      and every --eval-every minibatches (metrics rows), ends within 6
#      points of (a), and every rank prints progress lines naming the peer
#      it waited for; the JSON summary has the test accuracy;
#  (c) 2 stages x 2 replicas (sharded training and test loaders) and dp on
#      2 ranks evaluate every test sample once and train;
#  (d) an epoch that the replicas do not divide is rounded down;
#  (e) `pipedream train --np 2` (no plan: --plan auto) profiles the model on
#      rank 0, plans it for the 2 ranks, prints the plan and trains.
# Skips (77) without MPI, mpirun or the Fashion-MNIST files.
set -eu
: "${top_builddir:?run under make check}" "${top_srcdir:?run under make check}"
pd="$top_builddir/src/cli/pipedream"
data=/usr/share/datasets/fashion-mnist

. "$top_srcdir/tests/integration/pipeline_env.sh"
if [ ! -e "$data/train-images-idx3-ubyte.gz" ] && [ ! -e "$data/train-images-idx3-ubyte" ]; then
    echo "SKIP: no Fashion-MNIST in $data (tools/install-deps installs it)"
    exit 77
fi
# The column named $2 of the CSV file $1 (rows with a value only).
column() {
    awk -F, -v name="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i; next } $c != "" { print $c }' "$1"
}
# A JSON number field of the summary line in $1.
field() {
    sed -n "s/.*\"$2\":\([-0-9.e]*\).*/\1/p" "$1"
}

common="--model lenet --batch-size 32 --limit-train 3200 --limit-test 1000 --epochs 2 --lr 0.02 --lr-schedule cosine"
"$pd" profile --model lenet --batch-size 32 --warmup 1 --iterations 1 -o "$work/lenet.profile.json" >/dev/null 2>&1 ||
    fail "pipedream profile"
cat >"$work/one.plan.json" <<'JSON'
{"cluster": {"levels": "1x1GB/s"}, "stages": [{"first_layer": "conv1", "last_layer": "loss", "replicas": 1}]}
JSON
cat >"$work/two.plan.json" <<'JSON'
{"cluster": {"levels": "2x1GB/s"}, "stages": [{"first_layer": "conv1", "last_layer": "pool2", "replicas": 1},
 {"first_layer": "flatten", "last_layer": "loss", "replicas": 1}]}
JSON
cat >"$work/twobytwo.plan.json" <<'JSON'
{"cluster": {"levels": "4x1GB/s"}, "stages": [{"first_layer": "conv1", "last_layer": "pool2", "replicas": 2},
 {"first_layer": "flatten", "last_layer": "loss", "replicas": 2}]}
JSON
cat >"$work/dp.plan.json" <<'JSON'
{"cluster": {"levels": "2x1GB/s"}, "stages": [{"first_layer": "conv1", "last_layer": "loss", "replicas": 2}]}
JSON
pipeline() { # name ranks plan [options]
    p_name=$1 p_ranks=$2 p_plan=$3
    shift 3
    status=0
    timeout 120 mpirun $mpirun_flags -np "$p_ranks" "$pd" train $common --data "$data" --plan "$work/$p_plan" \
        --profile "$work/lenet.profile.json" --metrics "$work/$p_name.csv" "$@" >"$work/$p_name.json" \
        2>"$work/$p_name.err" || status=$?
    [ "$status" -ne 124 ] || fail "$p_name: mpirun -np $p_ranks hung (killed after 120 s)"
    [ "$status" -eq 0 ] || { cat "$work/$p_name.err"; fail "$p_name: mpirun -np $p_ranks exited $status"; }
}

# (a)
"$pd" train $common --data "$data" --quiet --metrics "$work/single.csv" >"$work/single.json" ||
    fail "single-process training"
pipeline a 1 one.plan.json --quiet
for col in loss lr; do
    column "$work/single.csv" $col >"$work/single.$col"
    column "$work/a.csv" $col >"$work/a.$col"
    cmp -s "$work/single.$col" "$work/a.$col" || fail "(a) the ${col} column differs from the single process"
done
single_acc=$(field "$work/single.json" test_accuracy)
[ "$(field "$work/a.json" test_accuracy)" = "$single_acc" ] ||
    fail "(a) test accuracy $(field "$work/a.json" test_accuracy), the single process has $single_acc"
echo "ok: (a) 1 stage, 2 epochs = single process: $(wc -l <"$work/a.loss") losses and test accuracy $single_acc"

# (b)
pipeline b 2 two.plan.json --eval-every 40 --progress-every 0.2
column "$work/b.csv" test_accuracy >"$work/b.test"
column "$work/b.csv" iteration >"$work/b.iter"
[ "$(wc -l <"$work/b.iter")" -eq 200 ] || fail "(b) $(wc -l <"$work/b.iter") metrics rows, expected 200"
# evaluations after minibatches 40 80 100 (epoch 1) 120 160 200 (epoch 2, the end)
awk -F, 'NR > 1 && $8 != "" { printf "%s ", $1 }' "$work/b.csv" >"$work/b.evals"
[ "$(cat "$work/b.evals")" = "40 80 100 120 160 200 " ] || fail "(b) evaluated after minibatches $(cat "$work/b.evals")"
acc=$(field "$work/b.json" test_accuracy)
awk -v a="$acc" -v s="$single_acc" 'BEGIN { exit !(a > 0.6 && a - s < 0.06 && s - a < 0.06) }' ||
    fail "(b) test accuracy $acc, the single process reached $single_acc"
grep -q "epoch 2/2: test accuracy" "$work/b.err" || fail "(b) rank 0 printed no line for epoch 2"
for r in 0 1; do
    grep -q "pipedream: rank $r (stage $r, replica 0): .* samples/s.*waited for rank $((1 - r))" "$work/b.err" ||
        { cat "$work/b.err"; fail "(b) rank $r printed no progress line naming its peer"; }
done
grep -q "rank 1 (stage 1, .*loss [0-9.]*, accuracy" "$work/b.err" || fail "(b) the last stage's lines have no loss"
echo "ok: (b) 2 stages 1f1b: evaluated after $(cat "$work/b.evals")(test accuracy $acc), progress lines on both ranks"

# (c)
for run in "c1 4 twobytwo.plan.json" "c2 2 dp.plan.json --schedule dp"; do
    # shellcheck disable=SC2086
    pipeline $run --quiet
    name=${run%% *}
    [ "$(field "$work/$name.json" test_samples)" = 1000 ] || fail "($name) evaluated $(field "$work/$name.json" test_samples) samples"
    [ "$(column "$work/$name.csv" test_accuracy | wc -l)" -eq 2 ] || fail "($name) not 2 evaluations"
    awk -v a="$(field "$work/$name.json" test_accuracy)" 'BEGIN { exit !(a > 0.3) }' ||
        fail "($name) test accuracy $(field "$work/$name.json" test_accuracy)"
    echo "ok: ($name) ${run#* } trains (test accuracy $(field "$work/$name.json" test_accuracy) on 1000 samples)"
done

# (d) 3200 / 32 = 100 minibatches an epoch, 99 with 3 replicas of stage 0.
cat >"$work/three.plan.json" <<'JSON'
{"cluster": {"levels": "3x1GB/s"}, "stages": [{"first_layer": "conv1", "last_layer": "loss", "replicas": 3}]}
JSON
pipeline d 3 three.plan.json --schedule dp --quiet --epochs 1 --lr-schedule constant
[ "$(field "$work/d.json" minibatches)" = 99 ] || fail "(d) $(field "$work/d.json" minibatches) minibatches in an epoch"
echo "ok: (d) an epoch of 100 minibatches on 3 replicas trains 99"

# (e)
status=0
timeout 120 "$pd" train --np 2 --model lenet --data "$data" --batch-size 32 --limit-train 640 --limit-test 320 \
    --steps 10 >"$work/e.json" 2>"$work/e.err" || status=$?
[ "$status" -eq 0 ] || { cat "$work/e.err"; fail "(e) pipedream train --np 2 exited $status"; }
grep -q "plan for lenet (batch 32).* (2 workers)" "$work/e.err" || { cat "$work/e.err"; fail "(e) no plan printed"; }
[ "$(field "$work/e.json" ranks)" = 2 ] && [ "$(field "$work/e.json" minibatches)" = 10 ] ||
    fail "(e) summary $(cat "$work/e.json")"
echo "ok: (e) --np 2 without a plan: profiled, planned for 2 ranks, trained 10 minibatches"
