#!/bin/sh
# Channels in device memory (--channel-memory device) against host memory
# (--channel-memory host), on the cpu device: a 2-stage 1f1b run of the
# small MLP gives the same losses bit for bit over shm and over tcp, and
# every device channel says that its send buffers and slots are in memory
# of the cpu device, path staged (the pinned-host staging of
# transport/slots.c, the path a GPU takes where it has no direct one).
# A bad --channel-memory value is refused with one line and exit 2.
# Skips (77) without MPI in the build or without mpirun.
set -eu
: "${top_builddir:?run under make check}" "${top_srcdir:?run under make check}"
pd="$top_builddir/src/cli/pipedream"

. "$top_srcdir/tests/integration/pipeline_env.sh"

steps=12
common="--model mlp --dataset synthetic --channels 1 --height 8 --width 8 --batch-size 8 --seed 5 --lr 0.05"
mlp_profile_and_plans

for transport in shm tcp; do
    for memory in host device; do
        run_pipeline 60 2 two.plan.json --steps $steps --metrics "$work/$transport-$memory.csv" \
            --transport $transport --channel-memory $memory --progress-every 1000
        losses "$work/$transport-$memory.csv" >"$work/$transport-$memory.txt"
        [ "$(grep -c '^[0-9]' "$work/$transport-$memory.txt")" -eq $steps ] ||
            fail "$transport, $memory: not $steps finite losses"
        cp "$work/err" "$work/$transport-$memory.err"
    done
    same "$transport: channels in device memory = in host memory" "$work/$transport-host.txt" \
        "$work/$transport-device.txt"
    err="$work/$transport-device.err"
    # Each rank's start-up line, and the transport's line per channel (one
    # each way: rank 0 sends activations and receives gradients).
    [ "$(grep -c 'channels in memory of cpu' "$err")" -eq 2 ] || { cat "$err"; fail "$transport: start-up lines"; }
    [ "$(grep -c "sending over $transport, send buffers in memory of cpu: path staged" "$err")" -eq 2 ] ||
        { cat "$err"; fail "$transport: the senders do not say they stage device memory"; }
    [ "$(grep -c "receiving over $transport, slots in memory of cpu: path staged" "$err")" -eq 2 ] ||
        { cat "$err"; fail "$transport: the receivers do not say they stage device memory"; }
    grep -q 'channels in host memory' "$work/$transport-host.err" || fail "$transport: host start-up lines"
    ! grep -q 'path staged' "$work/$transport-host.err" || fail "$transport: host channels said a device path"
    echo "ok: $transport: device channels staged through pinned host memory, named in the log"
done

# Bad value: one line, exit 2, before any rank starts.
status=0
"$pd" train $common --steps 2 --plan "$work/two.plan.json" --profile "$work/mlp.profile.json" \
    --channel-memory gpu >"$work/out" 2>"$work/err" || status=$?
[ "$status" -eq 2 ] || { cat "$work/err"; fail "--channel-memory gpu exited $status, expected 2"; }
[ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "channel memory 'gpu'" "$work/err" ||
    { cat "$work/err"; fail "--channel-memory gpu: not one line naming the value"; }
echo "ok: --channel-memory gpu refused: $(cat "$work/err")"
