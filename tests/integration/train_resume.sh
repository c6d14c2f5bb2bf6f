#!/bin/sh
# --resume continues bit-identically: a run of N steps straight and a run of
# N/2 steps followed by a resumed run to N give the same loss at every step
# (printed to the last bit, %.9g of a float) and byte-identical final
# checkpoints (weights, momentum buffers, trainer state).
#   1. momentum SGD (Nesterov, weight decay) with a step schedule, the first
#      half as a separate run of N/2 steps, crossing an epoch boundary;
#   2. Adam with a cosine schedule and warm-up (total-dependent), resumed
#      from the straight run's own mid-way checkpoint, through its directory
#      index.
# Then the resume errors: a different lr or data limit, a corrupt or
# truncated checkpoint, a missing path: exit 2 and one line naming the cause.
# Uses Fashion-MNIST (--limit-train) when installed, else synthetic images.
set -u

PIPEDREAM="${top_builddir:?top_builddir is not set}/src/cli/pipedream"
FMNIST=/usr/share/datasets/fashion-mnist
STEPS=60
HALF=30
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pd-train-resume.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

if [ -r "$FMNIST/train-images-idx3-ubyte.gz" ] || [ -r "$FMNIST/train-images-idx3-ubyte" ]; then
    set -- --data "$FMNIST" --limit-train 1280 --limit-test 256 --batch-size 32
    echo "data: Fashion-MNIST, 1280 training samples (40 minibatches of 32 per epoch)"
else
    set -- --dataset synthetic --channels 1 --height 28 --width 28 --batch-size 32
    echo "data: synthetic 1x28x28 (Fashion-MNIST is not installed)"
fi
COMMON="$*"

# train NAME ARGS...: runs pipedream train with the common options; the
# metrics go to $tmp/NAME.csv.
train() {
    name=$1
    shift
    # shellcheck disable=SC2086
    "$PIPEDREAM" train $COMMON --quiet --metrics "$tmp/$name.csv" "$@" >"$tmp/$name.json" 2>"$tmp/$name.err"
    status=$?
    if [ $status -ne 0 ]; then
        fail "run $name exited with status $status: $(cat "$tmp/$name.err")"
        return 1
    fi
    return 0
}

# rows CSV FIRST LAST: "iteration loss lr" of the rows FIRST..LAST.
rows() {
    awk -F, -v a="$2" -v b="$3" 'NR > 1 && $1 >= a && $1 <= b { print $1, $4, $7 }' "$1"
}

# same_rows A B FIRST LAST WHAT
same_rows() {
    rows "$1" "$3" "$4" >"$tmp/rows.a"
    rows "$2" "$3" "$4" >"$tmp/rows.b"
    n=$(wc -l <"$tmp/rows.a")
    if [ "$n" -ne $(($4 - $3 + 1)) ]; then
        fail "$5: $1 has $n rows for steps $3-$4"
    elif ! cmp -s "$tmp/rows.a" "$tmp/rows.b"; then
        fail "$5: losses or learning rates differ:"
        diff "$tmp/rows.a" "$tmp/rows.b" | head -n 6
    else
        echo "$5: steps $3-$4 identical (loss at step $4: $(tail -n 1 "$tmp/rows.a" | cut -d' ' -f2))"
    fi
}

# --- 1. momentum SGD, separate half run ------------------------------------------
SGD="--lr 0.05 --momentum 0.9 --nesterov --weight-decay 0.0005 --lr-schedule step --lr-step-epochs 1 --lr-gamma 0.5"
# shellcheck disable=SC2086
train sgd_straight $SGD --steps $STEPS --checkpoint-dir "$tmp/sgd_straight" &&
    train sgd_half $SGD --steps $HALF --checkpoint-dir "$tmp/sgd_resumed" &&
    train sgd_resumed $SGD --steps $STEPS --checkpoint-dir "$tmp/sgd_resumed" --resume "$tmp/sgd_resumed" && {
    same_rows "$tmp/sgd_straight.csv" "$tmp/sgd_half.csv" 1 $HALF "sgd, first half"
    same_rows "$tmp/sgd_straight.csv" "$tmp/sgd_resumed.csv" $((HALF + 1)) $STEPS "sgd, resumed half"
    [ "$(sed -n 2p "$tmp/sgd_resumed.csv" | cut -d, -f1)" = $((HALF + 1)) ] ||
        fail "sgd: the resumed run's first metrics row is not step $((HALF + 1))"
    final=$(printf 'step-%08d.safetensors' $STEPS)
    if cmp "$tmp/sgd_straight/$final" "$tmp/sgd_resumed/$final"; then
        echo "sgd: final checkpoints identical ($(wc -c <"$tmp/sgd_straight/$final") bytes)"
    else
        fail "sgd: the final checkpoints differ"
    fi
    # The test accuracy of the final evaluation agrees too.
    a=$(tail -n 1 "$tmp/sgd_straight.csv" | cut -d, -f8)
    b=$(tail -n 1 "$tmp/sgd_resumed.csv" | cut -d, -f8)
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "sgd: final test accuracy $a (straight) vs $b (resumed)"
    # A sanity check that the comparison could fail: the losses change.
    first=$(rows "$tmp/sgd_straight.csv" 1 1 | cut -d' ' -f2)
    last=$(rows "$tmp/sgd_straight.csv" $STEPS $STEPS | cut -d' ' -f2)
    [ "$first" != "$last" ] || fail "sgd: the loss did not change ($first)"
}

# --- 2. Adam, cosine with warm-up, resumed from a mid-way checkpoint -------------
ADAM="--optimizer adam --lr 0.002 --weight-decay 0.0001 --lr-schedule cosine --warmup-steps 10"
# shellcheck disable=SC2086
if train adam_straight $ADAM --steps $STEPS --checkpoint-dir "$tmp/adam_straight" --checkpoint-every $HALF; then
    mkdir "$tmp/adam_resumed"
    mid=$(printf 'step-%08d.safetensors' $HALF)
    cp "$tmp/adam_straight/$mid" "$tmp/adam_resumed/"
    # shellcheck disable=SC2086
    if train adam_resumed $ADAM --steps $STEPS --checkpoint-dir "$tmp/adam_resumed" \
        --resume "$tmp/adam_resumed/$mid"; then
        same_rows "$tmp/adam_straight.csv" "$tmp/adam_resumed.csv" $((HALF + 1)) $STEPS "adam, resumed half"
        final=$(printf 'step-%08d.safetensors' $STEPS)
        cmp "$tmp/adam_straight/$final" "$tmp/adam_resumed/$final" || fail "adam: the final checkpoints differ"
        # The index names the last one.
        grep -q "\"latest\": \"$final\"" "$tmp/adam_resumed/checkpoint.json" ||
            fail "adam: checkpoint.json does not name $final: $(cat "$tmp/adam_resumed/checkpoint.json")"
    fi
fi

# --- 3. what resume refuses ----------------------------------------------------------
# expect_error NEEDLE ARGS...: exit status 2, one line on stderr containing NEEDLE.
expect_error() {
    needle=$1
    shift
    # shellcheck disable=SC2086
    "$PIPEDREAM" train $COMMON --quiet "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    echo "resume error case -> $got: $(cat "$tmp/err")"
    [ $got -eq 2 ] || fail "expected exit status 2, got $got: pipedream train $*"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "expected one line on stderr: pipedream train $*"
    grep -qF -- "$needle" "$tmp/err" || fail "the message does not name '$needle': pipedream train $*"
}
ckpt="$tmp/sgd_resumed/$(printf 'step-%08d.safetensors' $HALF)"
if [ -r "$ckpt" ]; then
    # shellcheck disable=SC2086
    expect_error "lr is 0.05" $SGD --lr 0.1 --steps $STEPS --resume "$ckpt"
    # shellcheck disable=SC2086
    expect_error "optimizer is 'sgd'" --optimizer adam --lr 0.05 --lr-schedule step --lr-step-epochs 1 \
        --lr-gamma 0.5 --steps $STEPS --resume "$ckpt"
    if "$PIPEDREAM" train --help | grep -qw mlp; then
        # shellcheck disable=SC2086
        expect_error "model is 'lenet'" $SGD --model mlp --steps $STEPS --resume "$ckpt"
    fi
    # shellcheck disable=SC2086
    expect_error "width multiplier" $SGD --width-mult 2 --steps $STEPS --resume "$ckpt"
    # shellcheck disable=SC2086
    expect_error "past this run" $SGD --steps 10 --resume "$ckpt"
    # shellcheck disable=SC2086
    expect_error "minibatches per epoch" $SGD --limit-train 640 --steps $STEPS --resume "$ckpt"
    size=$(wc -c <"$ckpt")
    head -c $((size / 2)) "$ckpt" >"$tmp/truncated.safetensors"
    # shellcheck disable=SC2086
    expect_error "truncated.safetensors" $SGD --steps $STEPS --resume "$tmp/truncated.safetensors"
    cp "$ckpt" "$tmp/flipped.safetensors"
    chmod u+w "$tmp/flipped.safetensors"
    printf '\377' | dd of="$tmp/flipped.safetensors" bs=1 seek=$((size - 100)) conv=notrunc 2>/dev/null
    # shellcheck disable=SC2086
    expect_error "checksum" $SGD --steps $STEPS --resume "$tmp/flipped.safetensors"
    # shellcheck disable=SC2086
    expect_error "$tmp/nothing-here" $SGD --steps $STEPS --resume "$tmp/nothing-here"
    mkdir "$tmp/empty-dir"
    # shellcheck disable=SC2086
    expect_error "checkpoint.json" $SGD --steps $STEPS --resume "$tmp/empty-dir"
fi

[ $failures -eq 0 ] && echo "PASS"
[ $failures -eq 0 ]
