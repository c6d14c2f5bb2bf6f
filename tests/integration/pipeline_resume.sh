#!/bin/sh
# Pipeline checkpoints and --resume (small MLP, synthetic data, CPU):
#  (a) a set written by 2 stages resumes on 3 stages: with the straight
#      schedule (sequential semantics) the resumed losses are bit for bit
#      those of the uninterrupted run;
#  (b) 1f1b on the same plan resumes bit for bit too (checkpoints fall
#      where the pipeline drains, in both runs);
#  (c) the set: one file per stage with the layers' PyTorch names and the
#      optimizer's state, and rank 0's index naming them;
#  (d) SIGKILL of one rank of 4 during training: every other rank exits 1
#      within 30 s with a message naming the dead rank (Open MPI runs with
#      --enable-recovery so that the runtime's own detection acts, not
#      mpirun's), the index still names a complete set, and --resume on
#      another plan continues from it.
# Skips (77) without MPI in the build or without mpirun.
set -eu
: "${top_builddir:?run under make check}" "${top_srcdir:?run under make check}"
pd="$top_builddir/src/cli/pipedream"

. "$top_srcdir/tests/integration/pipeline_env.sh"

common="--model mlp --dataset synthetic --channels 1 --height 8 --width 8 --batch-size 8 --seed 5 --lr 0.01
        --optimizer adam --limit-test 16 --quiet"
mlp_profile_and_plans
cat >"$work/four.plan.json" <<'JSON'
{"cluster": {"levels": "4x1GB/s"}, "stages": [{"first_layer": "flatten", "last_layer": "fc1", "replicas": 1},
 {"first_layer": "relu1", "last_layer": "fc2", "replicas": 1}, {"first_layer": "relu2", "last_layer": "relu2", "replicas": 1},
 {"first_layer": "fc3", "last_layer": "loss", "replicas": 1}]}
JSON
pipeline() { # ranks plan [options]
    run_pipeline 120 "$@"
}

# (a)
pipeline 2 two.plan.json --schedule straight --steps 40 --checkpoint-dir "$work/a-full" --checkpoint-every 20 \
    --metrics "$work/a-full.csv"
pipeline 2 two.plan.json --schedule straight --steps 20 --checkpoint-dir "$work/a" --metrics "$work/a1.csv"
pipeline 3 three.plan.json --schedule straight --steps 40 --resume "$work/a" --checkpoint-dir "$work/a" \
    --metrics "$work/a2.csv"
rows "$work/a-full.csv" 21 >"$work/a-full.txt"
rows "$work/a2.csv" 1 >"$work/a2.txt"
[ "$(wc -l <"$work/a2.txt")" -eq 20 ] && [ "$(head -c 3 "$work/a2.txt")" = "21," ] ||
    fail "(a) the resumed run wrote $(wc -l <"$work/a2.txt") rows from $(head -c 3 "$work/a2.txt")"
cmp -s "$work/a-full.txt" "$work/a2.txt" || { paste -d' ' "$work/a-full.txt" "$work/a2.txt" | head -3;
    fail "(a) the losses after resuming on 3 stages differ from the uninterrupted run's"; }
echo "ok: (a) a 2-stage set resumed on 3 stages (straight): minibatches 21-40 identical to the uninterrupted run"

# (b)
pipeline 2 two.plan.json --steps 40 --checkpoint-dir "$work/b-full" --checkpoint-every 20 --metrics "$work/b-full.csv"
pipeline 2 two.plan.json --steps 20 --checkpoint-dir "$work/b" --metrics "$work/b1.csv"
pipeline 2 two.plan.json --steps 40 --resume "$work/b" --metrics "$work/b2.csv"
rows "$work/b-full.csv" 21 >"$work/b-full.txt"
rows "$work/b2.csv" 1 >"$work/b2.txt"
cmp -s "$work/b-full.txt" "$work/b2.txt" || fail "(b) 1f1b: the resumed losses differ from the uninterrupted run's"
echo "ok: (b) 1f1b resumed on its plan: minibatches 21-40 identical"

# (c) the safetensors header (JSON after 8 bytes) names the tensors
header() {
    dd if="$1" bs=1 skip=8 count=4000 2>/dev/null | tr -c '[:print:]' ' '
}
set_dir="$work/a/step-00000040"
[ "$(ls "$set_dir")" = "$(printf 'stage-0-of-3.safetensors\nstage-1-of-3.safetensors\nstage-2-of-3.safetensors')" ] ||
    fail "(c) the set holds $(ls "$set_dir" | tr '\n' ' ')"
header "$set_dir/stage-0-of-3.safetensors" | grep -q '"fc1.weight"' || fail "(c) stage 0 lacks fc1.weight"
header "$set_dir/stage-0-of-3.safetensors" | grep -q '"optimizer.adam_m.fc1.weight"' || fail "(c) no Adam state"
! header "$set_dir/stage-0-of-3.safetensors" | grep -q '"fc2.weight"' || fail "(c) stage 0 holds stage 1's fc2"
header "$set_dir/stage-2-of-3.safetensors" | grep -q '"fc3.bias"' || fail "(c) stage 2 lacks fc3.bias"
grep -q '"set": "step-00000040"' "$work/a/checkpoint.json" || fail "(c) the index does not name step 40's set"
[ "$(grep -c '"name": "stage-' "$work/a/checkpoint.json")" -eq 3 ] || fail "(c) the index does not list 3 files"
echo "ok: (c) one file per stage with its layers' names and optimizer state, committed by the index"

# (d)
kill_flags=
$openmpi && kill_flags="--enable-recovery --mca orte_abort_on_non_zero_status 0"
# shellcheck disable=SC2086,SC2016
timeout 90 mpirun $mpirun_flags $kill_flags -np 4 sh -c '"$0" "$@"; echo "rank $OMPI_COMM_WORLD_RANK$PMI_RANK exited $?" >&2' \
    "$pd" train ${common% --quiet} --steps 1000000 --plan "$work/four.plan.json" --profile "$work/mlp.profile.json" \
    --checkpoint-dir "$work/d" --checkpoint-every 100 --progress-every 1000 >"$work/d.out" 2>"$work/d.err" &
job=$!
for _ in $(seq 1 600); do
    grep -q "checkpoint of minibatch" "$work/d.err" && break
    sleep 0.2
done
pid=$(sed -n 's/^pipedream: rank 1 of 4 (pid \([0-9]*\)).*/\1/p' "$work/d.err")
[ -n "$pid" ] && grep -q "checkpoint of minibatch" "$work/d.err" || { kill "$job"; cat "$work/d.err"; fail "(d) no checkpoint was committed"; }
killed=$(date +%s)
kill -9 "$pid"
status=0
wait "$job" || status=$?
took=$(($(date +%s) - killed))
[ "$status" -ne 124 ] || { cat "$work/d.err"; fail "(d) the job hung after rank 1 was killed"; }
[ "$took" -le 30 ] || fail "(d) the job took $took s to stop after rank 1 was killed"
if $openmpi; then
    for r in 0 2 3; do
        grep -q "^rank $r exited 1$" "$work/d.err" || { cat "$work/d.err"; fail "(d) rank $r did not exit 1"; }
        grep -q "pipedream: rank $r (stage $r): rank 1 (stage 1, pid $pid) is gone" "$work/d.err" ||
            { cat "$work/d.err"; fail "(d) rank $r printed no message naming rank 1"; }
    done
    echo "ok: (d) SIGKILL of rank 1: ranks 0, 2 and 3 each exited 1 naming rank 1 within $took s"
else
    [ "$status" -ne 0 ] && grep -q "rank 1" "$work/d.err" || fail "(d) the job exited $status without naming rank 1"
    echo "ok: (d) SIGKILL of rank 1 stopped the job within $took s (exit $status), naming rank 1"
fi
step=$(sed -n 's/.*"step": \([0-9]*\).*/\1/p' "$work/d/checkpoint.json")
[ -n "$step" ] && [ "$step" -ge 100 ] || fail "(d) no committed set after the kill"
pipeline 2 two.plan.json --steps $((step + 30)) --resume "$work/d" --metrics "$work/d2.csv"
[ "$(rows "$work/d2.csv" 1 | head -1 | cut -d, -f1)" = $((step + 1)) ] ||
    fail "(d) the resumed run started at $(rows "$work/d2.csv" 1 | head -1 | cut -d, -f1), not $((step + 1))"
[ "$(rows "$work/d2.csv" 1 | wc -l)" -eq 30 ] || fail "(d) the resumed run trained $(rows "$work/d2.csv" 1 | wc -l) minibatches"
echo "ok: (d) --resume on 2 stages continued from the committed set at minibatch $step"
