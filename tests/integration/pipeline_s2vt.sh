#!/bin/sh
# S2VT through the pipeline runtime, bit for bit (losses printed with 9
# significant digits, exact for f32), at width 1/20 on the synthetic
# captioning task (batch 8, 12 features x 5 frames, 5 decoder steps, 16
# words) on the CPU. Stage 0 alone reads the data: the decoder's words and
# the targets travel with the activations to the stages that read them.
#  (a) a 1-stage plan on 1 rank = the single-process trainer, 10 steps:
#      losses, per-token training accuracy, test token accuracy and the
#      test tokens counted;
#  (b) 2 stages cut after lstm1 (the words cross to the decoder's stage,
#      the targets to the loss), straight and gpipe with one microbatch per
#      flush = the trainer, and straight cut after every other node too
#      (sequence-shaped, reshaped and integer tensors at the cut);
#  (c) 1f1b with weight stashing = tests/integration/pipeline_ref on 2
#      stages, on 3 (the targets pass through the middle stage) and on a
#      plan whose stages split the encoder and decoder branches;
#  (d) one stage on 2 replicas: 1f1b = dp; --plan auto trains.
# Skips (77) without MPI in the build or without mpirun.
set -eu
: "${top_builddir:?run under make check}" "${top_srcdir:?run under make check}"
pd="$top_builddir/src/cli/pipedream"
ref="$top_builddir/tests/integration/pipeline_ref"

. "$top_srcdir/tests/integration/pipeline_env.sh"

steps=10 seed=3 lr=0.05 width=0.05
common="--model s2vt --width-mult $width --dataset s2vt-synthetic --batch-size 8 --seed $seed --lr $lr --quiet"
"$pd" profile --model s2vt --width-mult $width --batch-size 8 --channels 12 --height 5 --width 5 --classes 16 \
    --warmup 1 --iterations 1 -o "$work/s2vt.profile.json" >/dev/null 2>&1 || fail "pipedream profile"
nodes="frames_flat frame_proj frames_seq frames_pad lstm1 embedding words_pad lstm2_in lstm2 decode decode_flat out loss"
plan() { # name levels stages...: $work/name.plan.json
    p_name=$1 p_levels=$2
    shift 2
    p_sep=
    printf '{"cluster": {"levels": "%s"}, "stages": [' "$p_levels" >"$work/$p_name.plan.json"
    for p_stage in "$@"; do
        printf '%s%s' "$p_sep" "$p_stage" >>"$work/$p_name.plan.json"
        p_sep=", "
    done
    echo ']}' >>"$work/$p_name.plan.json"
}
range() { echo "{\"first_layer\": \"$1\", \"last_layer\": \"$2\", \"replicas\": ${3:-1}}"; }
plan one 1x1GB/s "$(range frames_flat loss)"
plan two 2x1GB/s "$(range frames_flat lstm1)" "$(range embedding loss)"
plan three 3x1GB/s "$(range frames_flat lstm1)" "$(range embedding lstm2)" "$(range decode loss)"
plan branch 2x1GB/s '{"layers": ["frames_flat", "frame_proj", "frames_seq", "frames_pad", "embedding", "words_pad"], "replicas": 1}' \
    '{"layers": ["lstm1", "lstm2_in", "lstm2", "decode", "decode_flat", "out", "loss"], "replicas": 1}'
plan dp 2x1GB/s "$(range frames_flat loss 2)"

# s2vt RANKS PLAN METRICS [options]: a pipeline run of $steps minibatches.
s2vt() {
    s_ranks=$1 s_plan=$2 s_metrics=$3
    shift 3
    status=0
    # shellcheck disable=SC2086
    timeout 60 mpirun $mpirun_flags -np "$s_ranks" "$pd" train $common --steps $steps --plan "$s_plan" \
        --profile "$work/s2vt.profile.json" --metrics "$s_metrics" "$@" >"$work/out" 2>"$work/err" || status=$?
    [ "$status" -ne 124 ] || fail "mpirun -np $s_ranks ($s_plan $*) hung (killed after 60 s)"
    [ "$status" -eq 0 ] || { cat "$work/out" "$work/err"; fail "mpirun -np $s_ranks ($s_plan $*) exited $status"; }
}
# Loss, training accuracy and test accuracy of every row.
columns() {
    tail -n +2 "$1" | cut -d, -f1,4,5,8
}
# test_samples of the JSON summary in $work/out or $1.
test_tokens() {
    sed -n 's/.*"test_samples":\([0-9]*\).*/\1/p' "${1:-$work/out}"
}

# shellcheck disable=SC2086
"$pd" train $common --steps $steps --metrics "$work/single.csv" >"$work/single.json" || fail "single-process training"
columns "$work/single.csv" >"$work/single.txt"
losses "$work/single.csv" >"$work/single.loss"
[ "$(wc -l <"$work/single.txt")" -eq $steps ] || fail "the trainer wrote $(wc -l <"$work/single.txt") rows"
tokens=$(test_tokens "$work/single.json")
if [ -z "$tokens" ] || [ "$tokens" -le 80 ]; then
    fail "the trainer counted '$tokens' test tokens, not more than its 80 test captions"
fi

# (a)
s2vt 1 "$work/one.plan.json" "$work/a.csv"
columns "$work/a.csv" >"$work/a.txt"
same "1 stage on 1 rank = single process (loss, token accuracies)" "$work/single.txt" "$work/a.txt"
[ "$(test_tokens)" = "$tokens" ] || fail "1 stage counted $(test_tokens) test tokens, the trainer $tokens"
echo "ok: both count $tokens test tokens"

# (b)
s2vt 2 "$work/two.plan.json" "$work/b1.csv" --schedule straight
columns "$work/b1.csv" >"$work/b1.txt"
same "2 stages straight = sequential" "$work/single.txt" "$work/b1.txt"
[ "$(test_tokens)" = "$tokens" ] || fail "2 stages counted $(test_tokens) test tokens, the trainer $tokens"
s2vt 2 "$work/two.plan.json" "$work/b2.csv" --schedule gpipe --microbatches 1
columns "$work/b2.csv" >"$work/b2.txt"
same "2 stages gpipe, 1 microbatch per flush = sequential" "$work/single.txt" "$work/b2.txt"
# shellcheck disable=SC2086
set -- $nodes
while [ $# -gt 1 ]; do
    if [ "$1" != lstm1 ]; then
        plan cut 2x1GB/s "$(range frames_flat "$1")" "$(range "$2" loss)"
        s2vt 2 "$work/cut.plan.json" "$work/cut.csv" --schedule straight
        losses "$work/cut.csv" >"$work/cut.txt"
        cmp -s "$work/single.loss" "$work/cut.txt" || fail "2 stages cut after $1, straight: not the sequential losses"
    fi
    shift
done
echo "ok: 2 stages straight cut after every node = sequential"

# (c)
for p in two three branch; do
    case $p in three) n=3 ;; *) n=2 ;; esac
    s2vt $n "$work/$p.plan.json" "$work/c-$p.csv"
    losses "$work/c-$p.csv" >"$work/c-$p.txt"
    "$ref" "$work/$p.plan.json" "$work/s2vt.profile.json" s2vt 8 0 $steps $seed $lr width-mult $width \
        >"$work/ref-$p.txt" || fail "pipeline_ref $p"
    same "$p: $n stages 1f1b with weight stashing = the stashed-version reference" "$work/ref-$p.txt" "$work/c-$p.txt"
    ! cmp -s "$work/single.loss" "$work/c-$p.txt" || fail "1f1b on $p gave the sequential losses"
done

# (d)
s2vt 2 "$work/dp.plan.json" "$work/d-dp.csv" --schedule dp
s2vt 2 "$work/dp.plan.json" "$work/d-1f1b.csv"
columns "$work/d-dp.csv" >"$work/d-dp.txt"
columns "$work/d-1f1b.csv" >"$work/d-1f1b.txt"
same "1 stage x 2 replicas: 1f1b = dp (loss, token accuracies)" "$work/d-dp.txt" "$work/d-1f1b.txt"
[ "$(test_tokens)" = "$tokens" ] || fail "2 replicas counted $(test_tokens) test tokens, the trainer $tokens"
status=0
# shellcheck disable=SC2086
timeout 60 mpirun $mpirun_flags -np 2 "$pd" train $common --steps $steps --plan auto --metrics "$work/auto.csv" \
    >"$work/out" 2>"$work/err" || status=$?
[ "$status" -eq 0 ] || { cat "$work/out" "$work/err"; fail "--plan auto exited $status"; }
[ "$(losses "$work/auto.csv" | grep -c '^[0-9]')" -eq $steps ] || fail "--plan auto: not $steps finite losses"
echo "ok: --plan auto on 2 ranks trains $steps minibatches"
