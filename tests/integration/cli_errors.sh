#!/bin/sh
# Every kind of bad input to `pipedream` gives exit status 2 and exactly one
# line on stderr naming the offending option, value or file; nothing crashes.
# Corrupt data sets are built in a temporary directory from scratch (and from
# the installed Fashion-MNIST where it exists).
set -u

PIPEDREAM="${top_builddir:?top_builddir is not set}/src/cli/pipedream"
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pd-cli-errors.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0
cases=0

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# expect STATUS NEEDLE ARGS...: runs pipedream ARGS, checks the exit status,
# that stderr is one line and that it contains NEEDLE (a fixed string).
expect() {
    want=$1 needle=$2
    shift 2
    cases=$((cases + 1))
    "$PIPEDREAM" "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    lines=$(wc -l <"$tmp/err")
    msg=$(cat "$tmp/err")
    echo "pipedream $* -> $got: $msg"
    if [ "$got" -ge 128 ]; then
        fail "pipedream $*: killed by signal $((got - 128))"
    elif [ "$got" -ne "$want" ]; then
        fail "pipedream $*: exit status $got, expected $want"
    fi
    if [ "$want" -ne 0 ]; then
        [ "$lines" -eq 1 ] || fail "pipedream $*: $lines lines on stderr, expected one"
        case $msg in
        *"$needle"*) ;;
        *) fail "pipedream $*: message does not mention '$needle'" ;;
        esac
    fi
}

# be32 N: N as four big-endian bytes.
be32() {
    printf "\\$(printf %03o $(($1 >> 24 & 255)))\\$(printf %03o $(($1 >> 16 & 255)))"
    printf "\\$(printf %03o $(($1 >> 8 & 255)))\\$(printf %03o $(($1 & 255)))"
}

# images FILE N H W [MAGIC_TYPE_BYTE] [EXTRA_BYTES]: an IDX image file of N
# zero images (or one announcing N but holding N*H*W + EXTRA bytes).
images() {
    {
        printf '\000\000\010'
        printf "\\$(printf %03o "${5:-3}")"
        be32 "$2"
        be32 "$3"
        be32 "$4"
        head -c $(($2 * $3 * $4 + ${6:-0})) /dev/zero
    } >"$1"
}

# labels FILE L1 L2 ...: an IDX label file holding the given labels.
labels() {
    f=$1
    shift
    {
        printf '\000\000\010\001'
        be32 $#
        for l in "$@"; do printf "\\$(printf %03o "$l")"; done
    } >"$f"
}

# A small valid data set: 4 training and 2 test samples of 28x28.
mkset() {
    mkdir -p "$1"
    images "$1/train-images-idx3-ubyte" 4 28 28
    labels "$1/train-labels-idx1-ubyte" 0 1 2 3
    images "$1/t10k-images-idx3-ubyte" 2 28 28
    labels "$1/t10k-labels-idx1-ubyte" 4 5
}

# --- usage ------------------------------------------------------------------
expect 0 "" --help
expect 0 "" --version
expect 0 "" train --help
expect 2 "verb" 
expect 2 "frobnicate" frobnicate
expect 2 "--frobnicate" --frobnicate
expect 2 "--frobnicate" train --frobnicate
expect 2 "extra" train extra
expect 2 "image data set 'fashion-mnist'" train --model s2vt --dataset fashion-mnist
expect 2 "reads image data" train --model lenet --dataset s2vt-synthetic
expect 2 "image data set 'synthetic'" train --model s2vt --np 2 --dataset synthetic
expect 2 "--quiet=yes" train --quiet=yes
expect 2 "--batch" train --batch
for bad in abc 12x "" " 7" 0 -3 99999999999999999999 1e3; do
    expect 2 "--batch" train --batch "$bad"
done
for bad in x 1.5.2 nan inf -0.1 0 1e999 5000; do
    expect 2 "--lr" train --lr "$bad"
done
expect 2 "--momentum" train --momentum 1
expect 2 "--momentum" train --momentum -0.5
expect 2 "--weight-decay" train --weight-decay abc
expect 2 "--steps" train --steps 0
expect 2 "--steps" train --steps 10 --epochs 1
expect 2 "--epochs" train --epochs 2.5
expect 2 "--seed" train --seed -1
expect 2 "--eval-every" train --eval-every 0
expect 2 "--limit-train" train --limit-train -5
expect 2 "--limit-test" train --limit-test ten
expect 2 "resnet9000" train --model resnet9000
expect 2 "tpu" train --device tpu
expect 2 "cuda:x" train --device cuda:x
expect 2 "$tmp/missing-dir" train --data "$tmp/missing-dir"
expect 2 "$tmp/no/such/dir/m.csv" train --metrics "$tmp/no/such/dir/m.csv"
mkdir "$tmp/a-directory"
expect 2 "$tmp/a-directory" train --steps 1 --metrics "$tmp/a-directory"
# The options of the trainer.
expect 2 "--batch-size" train --batch-size abc
expect 2 "--batch-size" train --batch-size 0
expect 2 "--dataset" train --dataset svhn
expect 2 "--optimizer" train --optimizer rmsprop
expect 2 "--lr-schedule" train --lr-schedule linear
expect 2 "--lr-gamma" train --lr-schedule step --lr-gamma 0
expect 2 "--lr-gamma" train --lr-schedule step --lr-gamma 1.5
expect 2 "--lr-schedule step" train --lr-gamma 0.5
expect 2 "--lr-schedule step" train --lr-schedule cosine --lr-step-epochs 3
expect 2 "--lr-schedule poly" train --lr-power 2
expect 2 "--lr-step-epochs" train --lr-schedule step --lr-step-epochs 0
expect 2 "--warmup-steps" train --warmup-steps -1
expect 2 "--width-mult" train --width-mult 0
expect 2 "--width-mult" train --width-mult x
expect 2 "--height" train --height 0
expect 2 "--channels" train --channels 4
expect 2 "--threads" train --threads 0
expect 2 "--metrics-format" train --metrics-format xml
expect 2 "--nesterov" train --nesterov --momentum 0
expect 2 "--nesterov" train --nesterov --optimizer adam
expect 2 "--checkpoint-dir" train --checkpoint-every 5
expect 2 "--checkpoint-every" train --checkpoint-every 0 --checkpoint-dir "$tmp/ck"
expect 2 "$tmp/no/such/resume" train --resume "$tmp/no/such/resume"
expect 2 "--log-every" train --log-every 0

# --- data sets ----------------------------------------------------------------
# A valid tiny set trains (2 steps of 2) and the CSV/JSON come out.
mkset "$tmp/ok"
expect 0 "" train --data "$tmp/ok" --batch 2 --steps 2 --quiet --metrics "$tmp/ok.csv"
grep -q '"test_samples":2' "$tmp/out" || fail "tiny set: JSON summary lacks test_samples 2: $(cat "$tmp/out")"
[ "$(wc -l <"$tmp/ok.csv")" -eq 3 ] || fail "tiny set: metrics CSV should have a header and 2 rows"
# ... as JSON lines (chosen by the extension), the last with the test accuracy.
expect 0 "" train --data "$tmp/ok" --batch 2 --steps 2 --quiet --metrics "$tmp/ok.jsonl"
[ "$(grep -c '^{"iteration":[12],"epoch":.*,"loss":.*}$' "$tmp/ok.jsonl")" -eq 2 ] ||
    fail "tiny set: metrics JSON lines should have 2 records: $(cat "$tmp/ok.jsonl")"
tail -n 1 "$tmp/ok.jsonl" | grep -q '"test_accuracy":' || fail "tiny set: the last JSON line lacks test_accuracy"
# A checkpoint directory that cannot be made fails before training.
expect 2 "$tmp/ok.csv/ck" train --data "$tmp/ok" --batch 2 --steps 2 --quiet --checkpoint-dir "$tmp/ok.csv/ck"
# Geometry the data cannot be padded to.
expect 2 "20" train --data "$tmp/ok" --batch 2 --steps 1 --height 20 --width 20

# Missing files name the path.
mkset "$tmp/nolabels"
rm "$tmp/nolabels/train-labels-idx1-ubyte"
expect 2 "$tmp/nolabels/train-labels-idx1-ubyte" train --data "$tmp/nolabels" --batch 2 --steps 1
mkset "$tmp/notest"
rm "$tmp/notest/t10k-images-idx3-ubyte"
expect 2 "$tmp/notest/t10k-images-idx3-ubyte" train --data "$tmp/notest" --batch 2 --steps 1

# Bad magic (0x00000804: four dimensions), truncated pixels, trailing bytes,
# a header cut short, an empty file, zero images.
mkset "$tmp/magic"
images "$tmp/magic/train-images-idx3-ubyte" 4 28 28 4
expect 2 "$tmp/magic/train-images-idx3-ubyte" train --data "$tmp/magic" --batch 2 --steps 1
mkset "$tmp/short"
images "$tmp/short/train-images-idx3-ubyte" 4 28 28 3 -100
expect 2 "$tmp/short/train-images-idx3-ubyte" train --data "$tmp/short" --batch 2 --steps 1
mkset "$tmp/long"
images "$tmp/long/t10k-images-idx3-ubyte" 2 28 28 3 1
expect 2 "$tmp/long/t10k-images-idx3-ubyte" train --data "$tmp/long" --batch 2 --steps 1
mkset "$tmp/header"
head -c 10 "$tmp/ok/train-images-idx3-ubyte" >"$tmp/header/train-images-idx3-ubyte"
expect 2 "$tmp/header/train-images-idx3-ubyte" train --data "$tmp/header" --batch 2 --steps 1
mkset "$tmp/empty"
: >"$tmp/empty/train-labels-idx1-ubyte"
expect 2 "$tmp/empty/train-labels-idx1-ubyte" train --data "$tmp/empty" --batch 2 --steps 1
mkset "$tmp/zero"
images "$tmp/zero/train-images-idx3-ubyte" 0 28 28
expect 2 "$tmp/zero/train-images-idx3-ubyte" train --data "$tmp/zero" --batch 2 --steps 1

# A label outside the 10 classes; image and label counts that differ.
mkset "$tmp/label"
labels "$tmp/label/train-labels-idx1-ubyte" 0 1 10 3
expect 2 "$tmp/label/train-labels-idx1-ubyte" train --data "$tmp/label" --batch 2 --steps 1
mkset "$tmp/count"
labels "$tmp/count/train-labels-idx1-ubyte" 0 1 2
expect 2 "$tmp/count/train-images-idx3-ubyte" train --data "$tmp/count" --batch 2 --steps 1
# ... also when --limit-train keeps fewer samples than either file holds.
expect 2 "$tmp/count/train-labels-idx1-ubyte" train --data "$tmp/count" --batch 1 --steps 1 --limit-train 2

# Not enough samples for one full minibatch (the loader names the batch size).
expect 2 "minibatch of 8" train --data "$tmp/ok" --batch 8 --steps 1
expect 2 "minibatch of 8" train --data "$tmp/ok" --batch-size 8 --steps 1

# gzip: a compressed stream cut short, and one whose data is truncated.
mkset "$tmp/gz"
gzip -c "$tmp/ok/train-images-idx3-ubyte" | head -c 60 >"$tmp/gz/train-images-idx3-ubyte.gz"
rm "$tmp/gz/train-images-idx3-ubyte"
expect 2 "$tmp/gz/train-images-idx3-ubyte.gz" train --data "$tmp/gz" --batch 2 --steps 1
mkset "$tmp/gzshort"
images "$tmp/gzshort/train-images" 4 28 28 3 -1
gzip -c "$tmp/gzshort/train-images" >"$tmp/gzshort/train-images-idx3-ubyte.gz"
rm "$tmp/gzshort/train-images-idx3-ubyte"
expect 2 "train-images-idx3-ubyte.gz: truncated" train --data "$tmp/gzshort" --batch 2 --steps 1

# The installed Fashion-MNIST, truncated (a cut compressed file).
if [ -r "$DATA/train-images-idx3-ubyte.gz" ]; then
    mkdir "$tmp/fm"
    ln -s "$DATA"/*labels* "$DATA"/t10k-images-idx3-ubyte.gz "$tmp/fm/"
    head -c 2000000 "$DATA/train-images-idx3-ubyte.gz" >"$tmp/fm/train-images-idx3-ubyte.gz"
    expect 2 "$tmp/fm/train-images-idx3-ubyte.gz" train --data "$tmp/fm" --steps 1
    # ... and with damaged compressed bytes in the middle of the label file.
    mkdir "$tmp/fm2"
    ln -s "$DATA"/*images* "$DATA"/t10k-labels-idx1-ubyte.gz "$tmp/fm2/"
    cp "$DATA/train-labels-idx1-ubyte.gz" "$tmp/fm2/"
    chmod u+w "$tmp/fm2/train-labels-idx1-ubyte.gz"
    head -c 64 /dev/zero | dd of="$tmp/fm2/train-labels-idx1-ubyte.gz" bs=1 seek=5000 conv=notrunc 2>/dev/null
    expect 2 "$tmp/fm2/train-labels-idx1-ubyte.gz" train --data "$tmp/fm2" --steps 1

    # A runtime failure (not bad input) exits 1: a learning rate that diverges.
    expect 1 "diverged" train --data "$DATA" --lr 1000 --steps 50 --limit-train 640 --limit-test 64 --quiet
fi

echo "$cases cases, $failures failures"
[ "$failures" -eq 0 ]
