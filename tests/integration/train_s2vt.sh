#!/bin/sh
# End to end: S2VT (--width-mult 0.05) trained for 300 steps of 16 on the
# synthetic captioning task must learn, and the s2vt data set kind reads the
# two files of include/pipedream/sequence.h from --data DIR; --resume is exact.
# Measured on 2 cores (seeds 1-3): ~0.5 s of training; the loss starts at
# 2.79 (log 16 = 2.77), the mean of the first 20 steps is 1.63-1.75, of the
# last 20 0.0011-0.0013; token accuracy on the held-out videos 1.000 (chance
# 1/16; the first word of a caption depends only on the video's frames).
# Asserted: loss ratio < 0.1 and test token accuracy > 0.9.
set -u

PIPEDREAM="${top_builddir:?top_builddir is not set}/src/cli/pipedream"
STEPS=300
MIN_ACCURACY=0.9
MAX_LOSS_RATIO=0.1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pd-train-s2vt.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

"$PIPEDREAM" train --model s2vt --dataset s2vt-synthetic --width-mult 0.05 --batch 16 --steps $STEPS \
    --optimizer adam --lr 0.01 --seed 1 --log-every 100 --metrics "$tmp/metrics.csv" >"$tmp/summary.json"
status=$?
cat "$tmp/summary.json"
if [ $status -ne 0 ]; then
    echo "FAIL: pipedream train exited with status $status"
    exit 1
fi

awk -F, -v steps=$STEPS -v max_ratio=$MAX_LOSS_RATIO -v min_acc=$MIN_ACCURACY '
NR == 1 { next }
{
    i = NR - 1
    if ($1 != i) { printf "FAIL: row %d has iteration %s\n", i, $1; bad = 1 }
    loss[i] = $4
    if (!($4 > 0) || $4 > 100) { printf "FAIL: step %d has loss %s\n", i, $4; bad = 1 }
    if (!($5 >= 0 && $5 <= 1)) { printf "FAIL: step %d has train accuracy %s\n", i, $5; bad = 1 }
    last_acc = $8
}
END {
    if (i != steps) { printf "FAIL: %d rows, expected %d\n", i, steps; exit 1 }
    for (k = 1; k <= 20; k++) { first += loss[k]; last += loss[steps - 20 + k] }
    first /= 20; last /= 20
    printf "mean loss of steps 1-20: %.4f, of steps %d-%d: %.4f (ratio %.4f, must be < %s)\n",
        first, steps - 19, steps, last, last / first, max_ratio
    printf "test token accuracy (final CSV row): %s (must be > %s; chance 1/16)\n", last_acc, min_acc
    if (!(last / first < max_ratio)) { print "FAIL: the loss did not fall enough"; bad = 1 }
    if (last_acc == "" || !(last_acc + 0 > min_acc)) { print "FAIL: test token accuracy too low"; bad = 1 }
    exit bad
}' "$tmp/metrics.csv" || exit 1
# 10 minibatches of held-out videos, each caption 2..5 tokens with its EOS.
samples=$(sed -n 's/.*"test_samples":\([0-9]*\).*/\1/p' "$tmp/summary.json")
if [ -z "$samples" ] || [ "$samples" -lt 320 ] || [ "$samples" -gt 800 ]; then
    echo "FAIL: expected 320..800 test tokens, got '$samples'"
    exit 1
fi

# Resuming from a checkpoint continues exactly as the uninterrupted run.
common="--model s2vt --width-mult 0.05 --batch 16 --steps 60 --optimizer adam --lr 0.01 --quiet"
# shellcheck disable=SC2086
"$PIPEDREAM" train $common --checkpoint-dir "$tmp/ck" --checkpoint-every 25 --metrics "$tmp/a.csv" >/dev/null &&
    "$PIPEDREAM" train $common --resume "$tmp/ck/step-00000025.safetensors" --metrics "$tmp/b.csv" >/dev/null || {
    echo "FAIL: training with checkpoints or resuming failed"
    exit 1
}
if ! tail -n 35 "$tmp/a.csv" | cut -d, -f1,2,4,5,7,8 >"$tmp/a.cut" ||
    ! tail -n 35 "$tmp/b.csv" | cut -d, -f1,2,4,5,7,8 | cmp -s - "$tmp/a.cut"; then
    echo "FAIL: the resumed run differs from the uninterrupted one"
    exit 1
fi

# The file kind: 4 videos of 2 frames x 3 features (zeros), vocabulary 9;
# the test split holds one caption.
mkdir "$tmp/data"
for split in train test; do
    { printf 'PDS2VTF1\004\000\000\000\000\000\000\000\002\000\000\000\003\000\000\000'; head -c 96 /dev/zero; } \
        >"$tmp/data/$split.features"
done
printf 'PDS2VTC1 9\n0\t5 6 7\n1\t8\n2\t3 4\n3\t5 5 5 5\n' >"$tmp/data/train.captions"
printf 'PDS2VTC1 9\n2\t3 4\n' >"$tmp/data/test.captions"
"$PIPEDREAM" train --model s2vt --data "$tmp/data" --width-mult 0.05 --batch 2 --steps 4 --optimizer adam \
    --lr 0.01 --quiet >"$tmp/files.json"
status=$?
cat "$tmp/files.json"
# T_w = the longest caption (4) + 1; the test caption "3 4" + EOS is 3 tokens.
if [ $status -ne 0 ] || ! grep -q '"test_samples":3,' "$tmp/files.json"; then
    echo "FAIL: training on s2vt files (status $status) did not evaluate the 3 test tokens"
    exit 1
fi
rm "$tmp/data/test.captions"
"$PIPEDREAM" train --model s2vt --data "$tmp/data" --width-mult 0.05 --batch 2 --steps 1 --quiet \
    >/dev/null 2>"$tmp/err"
status=$?
if [ $status -eq 0 ] || ! grep -q 'test.captions' "$tmp/err"; then
    echo "FAIL: a missing test.captions gave status $status and: $(cat "$tmp/err")"
    exit 1
fi
echo "PASS"
