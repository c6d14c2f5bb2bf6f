#!/bin/sh
# `pipedream bench transport` end to end for every socket backend: two
# forked ranks, one line per size with bandwidth, latency, the reference
# measured in the same run and the ratio; bad usage rejected with one line
# and exit status 2. The ratios are printed, not judged: two shared cores
# make throughput targets flaky here (docs/transport.md has measured ones).
set -u

PIPEDREAM="${top_builddir:?top_builddir is not set}/src/cli/pipedream"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pd-bench-transport.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

unset PD_TRANSPORT_SPIN_US
for backend in shm tcp; do
    if ! timeout 60 "$PIPEDREAM" bench transport --backend "$backend" --size 4K --size 4M --depth 4 \
        --total-mb 32 >"$tmp/$backend.out" 2>"$tmp/$backend.err"; then
        fail "$backend: exit status $?: $(cat "$tmp/$backend.err")"
        continue
    fi
    cat "$tmp/$backend.out"
    grep -q "^# pipedream bench transport: backend $backend, depth 4" "$tmp/$backend.out" ||
        fail "$backend: header line missing"
    for size in 4096 4194304; do
        # bytes iters MB/s lat_us ref_MB/s ratio, every number positive
        awk -v s="$size" '$1 == s && NF == 6 && $3 > 0 && $4 > 0 && $5 > 0 && $6 > 0 { ok = 1 } END { exit !ok }' \
            "$tmp/$backend.out" || fail "$backend: no sound line for $size bytes"
    done
done

# The header says how waits behave: shm's poll while a stream flows, up to
# --spin-us (default 2000, from $PD_TRANSPORT_SPIN_US if set); -1 turns it off.
grep -q "^# pipedream bench transport: backend shm, depth 4, waits spin up to 2000 us while streaming;" \
    "$tmp/shm.out" || fail "shm: the header does not say that waits spin up to 2000 us"
grep -q "^# pipedream bench transport: backend tcp, depth 4, waits sleep at once;" "$tmp/tcp.out" ||
    fail "tcp: the header does not say that waits sleep at once"
for spin in "-1:waits sleep at once" "300:waits spin up to 300 us while streaming"; do
    timeout 60 "$PIPEDREAM" bench transport --backend shm --size 4K --iters 200 --spin-us "${spin%%:*}" \
        >"$tmp/spin.out" 2>"$tmp/spin.err" || fail "--spin-us ${spin%%:*}: $(cat "$tmp/spin.err")"
    grep -q "^# pipedream bench transport: backend shm, depth 8, ${spin#*:};" "$tmp/spin.out" ||
        fail "--spin-us ${spin%%:*}: the header does not say '${spin#*:}': $(head -1 "$tmp/spin.out")"
done
PD_TRANSPORT_SPIN_US=soon "$PIPEDREAM" bench transport --backend shm --size 4K --iters 200 >"$tmp/out" 2>"$tmp/err"
status=$?
[ "$status" -ne 0 ] && grep -q "PD_TRANSPORT_SPIN_US=soon" "$tmp/err" ||
    fail "PD_TRANSPORT_SPIN_US=soon: exit status $status, $(cat "$tmp/err")"

# Bad usage: one line, exit status 2.
for args in "bench" "bench transport" "bench transport --backend carrier-pigeon" \
    "bench transport --backend shm --size 0" "bench transport --backend shm --depth 0" \
    "bench transport --backend shm --spin-us 0" "bench transport --backend shm --spin-us 1000001" "bench nothing"; do
    # shellcheck disable=SC2086
    "$PIPEDREAM" $args >"$tmp/out" 2>"$tmp/err"
    status=$?
    [ "$status" -eq 2 ] || fail "'$args': exit status $status, expected 2"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "'$args': expected one line on stderr, got: $(cat "$tmp/err")"
done
"$PIPEDREAM" bench transport --help | grep -q "Usage: pipedream bench transport" || fail "--help prints no usage"

[ "$failures" -eq 0 ] || exit 1
echo "PASS"
