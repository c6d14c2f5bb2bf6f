#!/bin/sh
# `pipedream plan` end to end: PipeDream's worked example (VGG16 on 4
# workers with the original cost model gives the "3-1" configuration, 205.52
# ms per minibatch against 672.535 ms on one worker); plans of a measured
# LeNet profile under the default model written with -o and read back
# through --override with the same stages; hand-written plans by ranges and
# by names accepted, and ones that drop or repeat a layer rejected; NASNet
# planned on a coarsened graph, which the table and the plan file say, and
# whose plan evaluates the same through --override; bad profiles, levels
# and plan files give one line on stderr and exit status 2.
set -u

PIPEDREAM="${top_builddir:?top_builddir is not set}/src/cli/pipedream"
SHARED="${top_srcdir:?top_srcdir is not set}/profiles/pipedream"
VGG="$SHARED/vgg16/graph.txt"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pd-plan-cli.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

if [ ! -f "$VGG" ]; then
    echo "FAIL: $VGG is absent: this test needs PipeDream's published profiles in profiles/pipedream"
    exit 1
fi

# row FILE STAGE: the table row of a stage (the leading '*' marks the bottleneck).
row() {
    sed -n "s/^[* ] *$2  //p" "$1"
}

# ---- PipeDream's worked example: VGG16, 4 workers, 1e9 B/s ----
if "$PIPEDREAM" plan --graph-txt "$VGG" --batch-size 128 --levels 4x1GB/s --cost-model pipedream \
    --activation-compression-ratio 1 -o "$tmp/vgg.plan.json" >"$tmp/vgg.txt" 2>"$tmp/vgg.err"; then
    cat "$tmp/vgg.txt"
    grep -q '^plan for vgg16 (batch 128), cost model pipedream, cluster 4x1 GB/s (4 workers): 2 stages, replicas 3-1$' \
        "$tmp/vgg.txt" || fail "vgg16: not the 3-1 configuration"
    row "$tmp/vgg.txt" 0 | grep -q '^node1\.\.node18  *18  *3  *0-2 ' || fail "vgg16: stage 0 is not node1..node18 x 3 on ranks 0-2"
    row "$tmp/vgg.txt" 1 | grep -q '^node19\.\.node41  *23  *1  *3 ' || fail "vgg16: stage 1 is not node19..node41 x 1 on rank 3"
    grep -q '^predicted time per minibatch: 205\.521 ms' "$tmp/vgg.txt" || fail "vgg16: the time is not 205.521 ms"
    grep -q '^speedup: 3\.272x over one worker (672\.535 ms)' "$tmp/vgg.txt" || fail "vgg16: not 3.27x over one worker"
    grep -q '^workers used: 4 of 4$' "$tmp/vgg.txt" || fail "vgg16: not 4 of 4 workers"
    grep -q '"format": "pipedream-plan"' "$tmp/vgg.plan.json" || fail "vgg16: -o wrote no plan file"
    grep -q '"cost_model": "pipedream"' "$tmp/vgg.plan.json" || fail "vgg16: the plan file lacks its cost model"
else
    fail "vgg16 pipedream plan failed: $(cat "$tmp/vgg.err")"
fi

# The same on the command line's JSON output.
"$PIPEDREAM" plan --graph-txt "$VGG" --levels 4x1GB/s --cost-model pipedream --activation-compression-ratio 1 \
    --json >"$tmp/vgg.json" || fail "vgg16 --json failed"
grep -q '"replicas": 3' "$tmp/vgg.json" && grep -q '"bottleneck_stage": ' "$tmp/vgg.json" ||
    fail "vgg16 --json: no plan document on stdout"

# The default model on a two-level hierarchy; the plan re-read through
# --override predicts the same; --explain adds why the next best lost.
"$PIPEDREAM" plan --graph-txt "$VGG" --batch-size 128 --levels 4x12GB/s,2x10Gb/s -o "$tmp/vgg-default.plan.json" \
    >"$tmp/vgg-default.txt" || fail "vgg16 default-model plan failed"
cat "$tmp/vgg-default.txt"
grep -q '^plan for vgg16 (batch 128), cost model default, cluster 4x12 GB/s,2x1.25 GB/s (8 workers)' \
    "$tmp/vgg-default.txt" || fail "vgg16 default: header"
grep -q '^predicted time per minibatch: [0-9.]* ms (stage [0-9]*, [a-z]*)$' "$tmp/vgg-default.txt" ||
    fail "vgg16 default: no predicted time"
# A shipped cluster file gives the same levels as written out.
"$PIPEDREAM" plan --graph-txt "$VGG" --batch-size 128 --cluster "$top_srcdir/topology/clusters/cluster-a.cluster.json" \
    >"$tmp/vgg-cluster-a.txt" || fail "vgg16 on cluster-a.cluster.json failed"
grep -q '(16 workers)' "$tmp/vgg-cluster-a.txt" || fail "vgg16 on cluster-a: not 16 workers"
"$PIPEDREAM" plan --graph-txt "$VGG" --batch-size 128 --override "$tmp/vgg-default.plan.json" \
    >"$tmp/vgg-override.txt" 2>"$tmp/vgg-override.err" ||
    fail "vgg16: --override of its own plan: $(cat "$tmp/vgg-override.err")"
[ -s "$tmp/vgg-override.err" ] && fail "vgg16: --override of its own plan printed on stderr: $(cat "$tmp/vgg-override.err")"
diff "$tmp/vgg-default.txt" "$tmp/vgg-override.txt" || fail "vgg16: the re-read default plan predicts differently"
"$PIPEDREAM" plan --graph-txt "$VGG" --batch-size 128 --levels 4x12GB/s,2x10Gb/s --explain >"$tmp/vgg-explain.txt" ||
    fail "vgg16 --explain failed"
echo "--explain adds:"
tail -n +"$(($(wc -l <"$tmp/vgg-default.txt") + 1))" "$tmp/vgg-explain.txt"
[ "$(wc -l <"$tmp/vgg-explain.txt")" -gt "$(wc -l <"$tmp/vgg-default.txt")" ] || fail "vgg16: --explain explains nothing"
head -n "$(wc -l <"$tmp/vgg-default.txt")" "$tmp/vgg-explain.txt" | cmp -s - "$tmp/vgg-default.txt" ||
    fail "vgg16: --explain changed the plan"

# ---- a measured profile ----
if "$PIPEDREAM" profile --model lenet --iterations 3 --warmup 1 -q -o "$tmp/lenet.profile.json"; then
    "$PIPEDREAM" plan --profile "$tmp/lenet.profile.json" --levels 2x12GB/s,2x10Gb/s -o "$tmp/lenet.plan.json" \
        >"$tmp/lenet.txt" 2>"$tmp/lenet.err" || fail "lenet plan failed: $(cat "$tmp/lenet.err")"
    cat "$tmp/lenet.txt"
    grep -q '^plan for lenet (batch 64), cost model default, cluster 2x12 GB/s,2x1.25 GB/s (4 workers)' \
        "$tmp/lenet.txt" || fail "lenet: header"
    grep -q '"model": "lenet"' "$tmp/lenet.plan.json" || fail "lenet: -o wrote no plan"
    "$PIPEDREAM" plan --profile "$tmp/lenet.profile.json" --override "$tmp/lenet.plan.json" -o "$tmp/lenet2.plan.json" \
        >"$tmp/lenet2.txt" 2>"$tmp/lenet2.err" || fail "lenet: --override of its own plan: $(cat "$tmp/lenet2.err")"
    diff "$tmp/lenet.txt" "$tmp/lenet2.txt" || fail "lenet: the plan read back differs"
    # The same stages and ranks in the file written after --override.
    for f in lenet lenet2; do
        tr -d ' \n' <"$tmp/$f.plan.json" | grep -o '"layers":\[[^]]*\]\|"ranks":\[[^]]*\]' >"$tmp/$f.stages"
    done
    [ -s "$tmp/lenet.stages" ] && cmp -s "$tmp/lenet.stages" "$tmp/lenet2.stages" ||
        fail "lenet: the plan file written after --override has other stages"
    # The pipedream model evaluates no given plan: one line, exit 2.
    "$PIPEDREAM" plan --profile "$tmp/lenet.profile.json" --override "$tmp/lenet.plan.json" --cost-model pipedream \
        >/dev/null 2>"$tmp/err"
    [ $? -eq 2 ] && grep -q 'only supported with the default cost model' "$tmp/err" ||
        fail "lenet: --override with the pipedream model: $(cat "$tmp/err")"
else
    fail "profiling lenet failed"
fi

# ---- a graph too branchy for exact planning: NASNet, coarsened ----
NASNET="$SHARED/nasnetamobile/graph.txt"
if "$PIPEDREAM" plan --graph-txt "$NASNET" --levels 4x12GB/s -o "$tmp/nasnet.plan.json" >"$tmp/nasnet.txt" \
    2>"$tmp/nasnet.err"; then
    cat "$tmp/nasnet.txt"
    grep -q '^graph coarsened: 920 planning nodes merged into [0-9]* ranges' "$tmp/nasnet.txt" ||
        fail "nasnetamobile: the table does not say the graph was coarsened"
    grep -q '"from_nodes": 920' "$tmp/nasnet.plan.json" || fail "nasnetamobile: the plan file does not say so"
    "$PIPEDREAM" plan --graph-txt "$NASNET" --override "$tmp/nasnet.plan.json" >"$tmp/nasnet-override.txt" ||
        fail "nasnetamobile: --override of its own plan failed"
    grep -v '^graph coarsened' "$tmp/nasnet.txt" | diff - "$tmp/nasnet-override.txt" ||
        fail "nasnetamobile: the coarsened plan evaluates differently from the profile"
else
    fail "nasnetamobile plan failed: $(cat "$tmp/nasnet.err")"
fi
"$PIPEDREAM" plan --graph-txt "$NASNET" --levels 4x12GB/s --cost-model pipedream >"$tmp/nasnet-pd.txt" 2>&1 &&
    grep -q '^graph coarsened' "$tmp/nasnet-pd.txt" || fail "nasnetamobile with the pipedream model: $(cat "$tmp/nasnet-pd.txt")"

# ---- hand-written plans ----
printf '{"stages": [{"first_layer": "node2", "last_layer": "node18", "replicas": 3},\n
             {"first_layer": "node19", "last_layer": "node41", "replicas": 1}]}\n' >"$tmp/hand.plan.json"
"$PIPEDREAM" plan --graph-txt "$VGG" --levels 4x1GB/s --override "$tmp/hand.plan.json" -o "$tmp/hand-out.plan.json" \
    >"$tmp/hand.txt" 2>"$tmp/hand.err" || fail "hand-written ranges rejected: $(cat "$tmp/hand.err")"
cat "$tmp/hand.txt"
grep -q 'replicas 3-1$' "$tmp/hand.txt" || fail "hand-written ranges: not 3-1"
row "$tmp/hand.txt" 0 | grep -q '^node1\.\.node18  *18  *3  *0-2 ' || fail "hand-written ranges: stage 0 (with its input)"
grep -q '"ranks": \[' "$tmp/hand-out.plan.json" || fail "hand-written ranges: -o wrote no ranks"
names=$(printf '"node%d", ' 35 36 37 38 39 40)
printf '{"cluster": {"levels": "2x10GB/s,2x1GB/s"}, "stages": [
  {"first_layer": "node2", "last_layer": "node34", "replicas": 2, "ranks": [2, 3]},
  {"layers": [%s "node41"], "replicas": 1}]}\n' "$names" >"$tmp/names.plan.json"
"$PIPEDREAM" plan --graph-txt "$VGG" --override "$tmp/names.plan.json" >"$tmp/names.txt" 2>"$tmp/names.err" ||
    fail "hand-written names rejected: $(cat "$tmp/names.err")"
cat "$tmp/names.txt"
row "$tmp/names.txt" 1 | grep -q '^node35\.\.node41  *7  *1  *0 ' || fail "hand-written names: stage 1 is not node35..node41 on rank 0"

# ---- bad input: one line, exit status 2 ----
expect_usage() {
    needle=$1
    shift
    "$PIPEDREAM" plan "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    echo "pipedream plan $* -> $got: $(cat "$tmp/err")"
    [ "$got" -eq 2 ] || fail "pipedream plan $*: exit status $got, expected 2"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "pipedream plan $*: not one line on stderr"
    grep -qF -- "$needle" "$tmp/err" || fail "pipedream plan $*: message lacks '$needle'"
}
printf '{"stages": [{"first_layer": "node2", "last_layer": "node17", "replicas": 3},
  {"first_layer": "node19", "last_layer": "node41", "replicas": 1}]}\n' >"$tmp/drop.plan.json"
printf '{"stages": [{"first_layer": "node2", "last_layer": "node18", "replicas": 3},
  {"first_layer": "node18", "last_layer": "node41", "replicas": 1}]}\n' >"$tmp/dup.plan.json"
printf '{"stages": [{"first_layer": "node2", "last_layer": "node18", "replicas": 3},
  {"first_layer": "node19", "last_layer": "node41", "replicas": 0}]}\n' >"$tmp/zero.plan.json"
printf '{"stages": [{"first_layer": "node2", "last_layer": "node18", "replicas": 3},
  {"first_layer": "node19", "last_layer": "node41", "replicas": 2}]}\n' >"$tmp/many.plan.json"
printf '{"stages": [{"layers": ["node2", "node99"], "replicas": 1}]}\n' >"$tmp/unknown.plan.json"
printf '{"stages": [{"first_layer": "node2", "last_layer": "node41", "replicas": 1}],}\n' >"$tmp/syntax.plan.json"
printf '{"cluster": {"levels": "8x1GB/s"}, "stages": [{"first_layer": "node2", "last_layer": "node41", "replicas": 1}]}\n' \
    >"$tmp/cluster.plan.json"
printf 'a -- X -- forward_compute_time=1, backward_compute_time=oops, activation_size=1, parameter_size=1\n' \
    >"$tmp/bad.txt"
printf '{"format": "pipedream-profile", "version": 1}\n' >"$tmp/bad.profile.json"

expect_usage "drop.plan.json: layer 'node18' is in no stage" --graph-txt "$VGG" --levels 4x1GB/s --override "$tmp/drop.plan.json"
expect_usage "dup.plan.json: layer 'node18' is in stages 0 and 1" --graph-txt "$VGG" --levels 4x1GB/s --override "$tmp/dup.plan.json"
expect_usage "zero.plan.json: stages[1].replicas: expected an integer >= 1, got 0" --graph-txt "$VGG" --levels 4x1GB/s \
    --override "$tmp/zero.plan.json"
expect_usage "the stages use 5 workers; the cluster has 4" --graph-txt "$VGG" --levels 4x1GB/s --override "$tmp/many.plan.json"
expect_usage 'unknown.plan.json: stages[0].layers[1]: no layer "node99" in the profile of vgg16' --graph-txt "$VGG" \
    --levels 4x1GB/s --override "$tmp/unknown.plan.json"
expect_usage "syntax.plan.json:1:" --graph-txt "$VGG" --levels 4x1GB/s --override "$tmp/syntax.plan.json"
expect_usage "the plan's cluster differs from 4x1GB/s" --graph-txt "$VGG" --levels 4x1GB/s \
    --override "$tmp/cluster.plan.json"
expect_usage "the plan gives no cluster; give --levels" --graph-txt "$VGG" --override "$tmp/drop.plan.json"
expect_usage "absent.plan.json" --graph-txt "$VGG" --levels 4x1GB/s --override "$tmp/absent.plan.json"
expect_usage "bad.txt:1: backward_compute_time: 'oops' is not a number" --graph-txt "$tmp/bad.txt" --levels 4x1GB/s
expect_usage "bad.profile.json: model" --profile "$tmp/bad.profile.json" --levels 4x1GB/s
expect_usage "absent.profile.json" --profile "$tmp/absent.profile.json" --levels 4x1GB/s
expect_usage "levels: item 2 (\"4x10Gbps\"): '10Gbps': unknown unit 'Gbps'" --graph-txt "$VGG" --levels 4x12GB/s,4x10Gbps
expect_usage "levels: item 1 (\"0x1GB/s\"): the count must be in" --graph-txt "$VGG" --levels 0x1GB/s
expect_usage "levels: item 2 is empty" --graph-txt "$VGG" --levels 4x1GB/s,
expect_usage "--levels or --cluster is needed" --graph-txt "$VGG"
expect_usage "nope.cluster.json" --graph-txt "$VGG" --cluster "$tmp/nope.cluster.json"
expect_usage "not both" --graph-txt "$VGG" --levels 4x1GB/s --cluster "$top_srcdir/topology/clusters/cluster-a.cluster.json"
expect_usage "give one of --profile or --graph-txt" --levels 4x1GB/s
expect_usage "--cost-model: 'fast' is not default or pipedream" --graph-txt "$VGG" --levels 4x1GB/s --cost-model fast
expect_usage "--straight-pipeline does not apply to --cost-model default" --graph-txt "$VGG" --levels 4x1GB/s \
    --straight-pipeline
expect_usage "--memory: unknown unit 'XB'" --graph-txt "$VGG" --levels 4x1GB/s --memory 16XB
expect_usage "--coarsen: 'some' is not auto or none" --graph-txt "$VGG" --levels 4x1GB/s --coarsen some
expect_usage "more than the 16384 the planner can hold" --graph-txt "$NASNET" --levels 4x1GB/s --coarsen none
expect_usage "--coarsen does not apply to --override" --graph-txt "$VGG" --levels 4x1GB/s \
    --override "$tmp/hand.plan.json" --coarsen auto
expect_usage "--explain does not apply to --override" --graph-txt "$VGG" --levels 4x1GB/s --override "$tmp/hand.plan.json" \
    --explain
expect_usage "--batch-size applies to --graph-txt" --profile "$tmp/bad.profile.json" --levels 4x1GB/s --batch-size 4
expect_usage "option '--bogus'" --graph-txt "$VGG" --levels 4x1GB/s --bogus
expect_usage "unexpected argument 'extra'" --graph-txt "$VGG" --levels 4x1GB/s extra
# A memory limit no plan fits in is the user's input too.
expect_usage "no plan fits" --graph-txt "$VGG" --levels 4x1GB/s --memory 1000

if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all plan command checks passed"
