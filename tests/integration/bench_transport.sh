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

# Bad usage: one line, exit status 2.
for args in "bench" "bench transport" "bench transport --backend carrier-pigeon" \
    "bench transport --backend shm --size 0" "bench transport --backend shm --depth 0" "bench nothing"; do
    # shellcheck disable=SC2086
    "$PIPEDREAM" $args >"$tmp/out" 2>"$tmp/err"
    status=$?
    [ "$status" -eq 2 ] || fail "'$args': exit status $status, expected 2"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "'$args': expected one line on stderr, got: $(cat "$tmp/err")"
done
"$PIPEDREAM" bench transport --help | grep -q "Usage: pipedream bench transport" || fail "--help prints no usage"

[ "$failures" -eq 0 ] || exit 1
echo "PASS"
