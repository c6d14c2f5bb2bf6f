#!/bin/sh
# `pipedream simulate` end to end on PipeDream's VGG16 profile: a
# hand-written 3-1 plan on 4 workers simulated under every schedule that
# fits it (the numbers printed, the throughput ordered as the schedules'
# semantics say: 1F1B >= GPipe), a Chrome trace and gnuplot input written,
# --compare's table with its four rows on minibatches that fit every plan,
# the paper's cluster files with both cost models as CSV, and bad usage
# rejected with one line and exit status 2.
set -u

PIPEDREAM="${top_builddir:?top_builddir is not set}/src/cli/pipedream"
PROFILE="${top_srcdir:?top_srcdir is not set}/profiles/pipedream/vgg16/graph.txt"
CLUSTERS="$top_srcdir/topology/clusters"
[ -r "$PROFILE" ] || { echo "FAIL: $PROFILE is not there"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pd-simulate-cli.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# steady FILE: the steady-state ms per minibatch of a printed result.
steady() {
    sed -n 's/.*steady state \([0-9.]*\) ms per minibatch.*/\1/p' "$1"
}

cat >"$tmp/vgg.plan.json" <<'JSON'
{"cluster": {"levels": "4x16GB/s"},
 "stages": [{"first_layer": "node2", "last_layer": "node30", "replicas": 3},
            {"first_layer": "node31", "last_layer": "node41", "replicas": 1}]}
JSON
run() {
    "$PIPEDREAM" simulate --graph-txt "$PROFILE" --batch-size 128 --plan "$tmp/vgg.plan.json" "$@"
}

# ---- one schedule, with trace and plot ----
if ! run --trace "$tmp/trace.json" --plot "$tmp/timeline.png" >"$tmp/1f1b.txt" 2>"$tmp/1f1b.err"; then
    cat "$tmp/1f1b.err"
    fail "simulate 1f1b failed"
fi
cat "$tmp/1f1b.txt"
grep -q 'samples/s (batch 128)' "$tmp/1f1b.txt" || fail "no samples/s in the output"
[ "$(awk '$1 ~ /^[0-3]$/ && $2 ~ /^[01]$/ && $6 ~ /%$/' "$tmp/1f1b.txt" | wc -l)" -eq 4 ] ||
    fail "not one line per rank (4)"
# Stage 0's three replicas each hold NOAM = ceil(4 / 3) = 2 minibatches.
awk '$1 == "0" && $2 == "0" && $7 == 2 { ok = 1 } END { exit !ok }' "$tmp/1f1b.txt" ||
    fail "rank 0 does not keep 2 minibatches in flight"
grep -q '"traceEvents"' "$tmp/trace.json" || fail "the trace has no traceEvents"
grep -q '"ph": "X"' "$tmp/trace.json" || fail "the trace has no complete events"
if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import json, sys; t = json.load(open(sys.argv[1])); assert len(t["traceEvents"]) > 100' \
        "$tmp/trace.json" || fail "the trace is not valid JSON with events"
fi
[ -s "$tmp/timeline.png.dat" ] && [ -s "$tmp/timeline.png.gp" ] || fail "no gnuplot data and script"
if command -v gnuplot >/dev/null 2>&1; then
    [ -s "$tmp/timeline.png" ] || fail "gnuplot is installed but no picture was drawn"
else
    grep -q 'gnuplot is not installed' "$tmp/1f1b.err" || fail "no note that gnuplot is missing"
fi

# ---- the other schedules ----
run --schedule 1f1b-vsync --eval 4 >"$tmp/vsync.txt" || fail "simulate 1f1b-vsync failed"
run --schedule gpipe --microbatches 6 >"$tmp/gpipe.txt" || fail "simulate gpipe failed"
t1=$(steady "$tmp/1f1b.txt") tg=$(steady "$tmp/gpipe.txt")
echo "1f1b $t1 ms, gpipe $tg ms per minibatch"
awk -v a="$t1" -v b="$tg" 'BEGIN { exit !(a > 0 && b >= a) }' || fail "gpipe ($tg ms) beats 1f1b ($t1 ms)"
run --schedule dp >"$tmp/dp.txt" 2>"$tmp/dp.err"
[ $? -eq 2 ] && grep -q 'dp needs a one-stage plan' "$tmp/dp.err" || fail "dp on a 2-stage plan was not refused"
run --print-schedule --minibatches 6 >"$tmp/print.txt" || fail "--print-schedule failed"
grep -q 'send-act mb 0 to rank 3' "$tmp/print.txt" || fail "the printed schedule lacks rank 0's first send"

# ---- compare ----
# The planner's 3-1 and dp's 4 replicas: the run takes a multiple of 12
# minibatches, and GPipe's flush divides the 48 asked for.
if "$PIPEDREAM" simulate --compare --graph-txt "$PROFILE" --batch-size 128 --levels 4x16GB/s \
    --minibatches 48 >"$tmp/compare.txt" 2>"$tmp/compare.err"; then
    cat "$tmp/compare.txt"
    for row in pipedream dp gpipe straight; do
        grep -q "^$row " "$tmp/compare.txt" || fail "--compare has no $row row"
    done
    awk '$1 == "dp" && $5 == "1.00x" { ok = 1 } END { exit !ok }' "$tmp/compare.txt" ||
        fail "dp's speedup over itself is not 1.00x"
    grep -q '48 minibatches, gpipe flushes of 12' "$tmp/compare.txt" || fail "--compare did not run 48 minibatches"
else
    cat "$tmp/compare.err"
    fail "simulate --compare failed"
fi
"$PIPEDREAM" simulate --compare --graph-txt "$PROFILE" --batch-size 128 --levels 4x16GB/s \
    --minibatches 50 >/dev/null 2>"$tmp/bad.err"
[ $? -eq 2 ] && grep -q 'need a multiple of 12' "$tmp/bad.err" && [ "$(wc -l <"$tmp/bad.err")" -eq 1 ] ||
    fail "--compare --minibatches 50 was not refused with the multiple it needs"
"$PIPEDREAM" simulate --compare --graph-txt "$PROFILE" --batch-size 128 --levels 4x16GB/s \
    --microbatches 4 >/dev/null 2>"$tmp/bad.err"
[ $? -eq 2 ] && grep -q 'gpipe needs a multiple of 3' "$tmp/bad.err" ||
    fail "--compare --microbatches 4 was not refused"

# The paper's Cluster-A from its file, both cost models, as CSV.
for model in default pipedream; do
    if "$PIPEDREAM" simulate --compare --csv --graph-txt "$PROFILE" --batch-size 128 \
        --cluster "$CLUSTERS/cluster-a.cluster.json" --cost-model $model >"$tmp/csv.txt" 2>"$tmp/csv.err"; then
        cat "$tmp/csv.txt"
        [ "$(wc -l <"$tmp/csv.txt")" -eq 5 ] || fail "--csv ($model) did not print a header and four rows"
        awk -F, -v m=$model 'NR > 1 && NF == 15 && $3 == 16 && $5 == m { n++ } END { exit n != 4 }' "$tmp/csv.txt" ||
            fail "--csv ($model): not four rows of 15 fields for 16 workers and cost model $model"
        awk -F, '$6 == "pipedream" && $8 > 0 && $9 > 0 && $10 > 0 { ok = 1 } END { exit !ok }' "$tmp/csv.txt" ||
            fail "--csv ($model): no predicted and simulated times for the pipedream row"
    else
        cat "$tmp/csv.err"
        fail "simulate --compare --cluster --cost-model $model failed"
    fi
done

# --cluster in place of the plan's levels (Cluster-A: 16 ranks, 12 idle);
# on 200 MB/s links the warm-up from costs (with deferred steps) hides the
# transfers that hold plain 1F1B back.
run --cluster "$CLUSTERS/cluster-a.cluster.json" >"$tmp/a.txt" || fail "simulate --cluster failed"
grep -q 'schedule 1f1b: 16 ranks' "$tmp/a.txt" || fail "--cluster cluster-a did not give 16 ranks"
run --levels 4x200MB/s >"$tmp/slow.txt" || fail "simulate --levels 4x200MB/s failed"
run --levels 4x200MB/s --defer-step --warmup-from-costs >"$tmp/tuned.txt" ||
    fail "simulate --defer-step --warmup-from-costs failed"
ts=$(steady "$tmp/slow.txt") tt=$(steady "$tmp/tuned.txt")
echo "4x200MB/s: 1f1b $ts ms, tuned $tt ms per minibatch"
awk -v a="$ts" -v b="$tt" 'BEGIN { exit !(b > 0 && b < a) }' ||
    fail "tuned 1f1b ($tt ms) is not faster than 1f1b ($ts ms)"

# ---- bad usage ----
for args in "--schedule nope" "--depth 0" "--minibatches 5" "--cost-model default" \
    "--levels 4x200MB/s --cluster $CLUSTERS/cluster-a.cluster.json" "--cluster /nonexistent.cluster.json" "--csv"; do
    # shellcheck disable=SC2086
    run $args >/dev/null 2>"$tmp/bad.err"
    code=$?
    [ "$code" -eq 2 ] || fail "'$args' exited $code, not 2"
    [ "$(wc -l <"$tmp/bad.err")" -eq 1 ] || fail "'$args' did not print one line"
done
"$PIPEDREAM" simulate --plan "$tmp/vgg.plan.json" >/dev/null 2>&1
[ $? -eq 2 ] || fail "a missing profile was not refused"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "simulate: all checks passed"
