#!/bin/sh
# End to end: LeNet-5 trained for 300 steps of 64 on Fashion-MNIST must learn.
# Measured on 2 cores (seeds 1-5, 300 steps, first 2000 test images): ~2 s of
# training at ~9800 img/s; the mean loss of the last 20 steps is 0.21-0.24 of
# that of the first 20 (2.16-2.28 -> 0.47-0.55); test accuracy 80.5-82.9%.
# Asserted: loss ratio < 0.6 and test accuracy > 0.75 (chance is 0.10).
set -u

PIPEDREAM="${top_builddir:?top_builddir is not set}/src/cli/pipedream"
DATA=/usr/share/datasets/fashion-mnist
STEPS=300
MIN_ACCURACY=0.75
MAX_LOSS_RATIO=0.6

for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    if [ ! -r "$DATA/$f.gz" ] && [ ! -r "$DATA/$f" ]; then
        echo "SKIP: Fashion-MNIST is not installed ($DATA/$f[.gz] missing; apt install dataset-fashion-mnist)"
        exit 77
    fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pd-train-fmnist.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

"$PIPEDREAM" train --model lenet --data "$DATA" --batch 64 --steps $STEPS --lr 0.05 --momentum 0.9 --seed 1 \
    --limit-test 2000 --log-every 50 --metrics "$tmp/metrics.csv" >"$tmp/summary.json"
status=$?
cat "$tmp/summary.json"
if [ $status -ne 0 ]; then
    echo "FAIL: pipedream train exited with status $status"
    exit 1
fi

# The CSV: a header and one row per step, the last carrying the test accuracy.
rows=$(($(wc -l <"$tmp/metrics.csv") - 1))
if [ "$rows" -ne $STEPS ]; then
    echo "FAIL: metrics CSV has $rows rows, expected $STEPS"
    exit 1
fi
head -n 1 "$tmp/metrics.csv" | grep -qx 'iteration,epoch,seconds,loss,train_accuracy,samples_per_s,lr,test_accuracy' || {
    echo "FAIL: unexpected CSV header: $(head -n 1 "$tmp/metrics.csv")"
    exit 1
}

awk -F, -v steps=$STEPS -v max_ratio=$MAX_LOSS_RATIO -v min_acc=$MIN_ACCURACY '
NR == 1 { next }
{
    i = NR - 1
    if ($1 != i) { printf "FAIL: row %d has iteration %s\n", i, $1; bad = 1 }
    loss[i] = $4
    if (!($4 > 0) || $4 > 100) { printf "FAIL: step %d has loss %s\n", i, $4; bad = 1 }
    if ($3 < prev_seconds) { printf "FAIL: seconds go backwards at step %d\n", i; bad = 1 }
    prev_seconds = $3
    if ($7 != 0.05) { printf "FAIL: step %d has lr %s, expected the constant 0.05\n", i, $7; bad = 1 }
    last_acc = $8
}
END {
    for (k = 1; k <= 20; k++) { first += loss[k]; last += loss[steps - 20 + k] }
    first /= 20; last /= 20
    printf "mean loss of steps 1-20: %.4f, of steps %d-%d: %.4f (ratio %.3f, must be < %s)\n",
        first, steps - 19, steps, last, last / first, max_ratio
    printf "test accuracy (final CSV row): %s (must be > %s); training took %.1f s\n", last_acc, min_acc, prev_seconds
    if (!(last / first < max_ratio)) { print "FAIL: the loss did not fall enough"; bad = 1 }
    if (last_acc == "" || !(last_acc + 0 > min_acc)) { print "FAIL: test accuracy too low"; bad = 1 }
    exit bad
}' "$tmp/metrics.csv" || exit 1

# The JSON summary agrees with the CSV.
json_acc=$(sed -n 's/.*"test_accuracy":\([0-9.]*\).*/\1/p' "$tmp/summary.json")
json_steps=$(sed -n 's/.*"steps":\([0-9]*\).*/\1/p' "$tmp/summary.json")
csv_acc=$(tail -n 1 "$tmp/metrics.csv" | cut -d, -f8)
if [ "$json_steps" != $STEPS ] || [ -z "$json_acc" ] || [ "$json_acc" != "$csv_acc" ]; then
    echo "FAIL: JSON summary (steps $json_steps, accuracy $json_acc) disagrees with the CSV (accuracy $csv_acc)"
    exit 1
fi
grep -q '"test_samples":2000' "$tmp/summary.json" || { echo "FAIL: expected 2000 test samples"; exit 1; }
echo "PASS"
