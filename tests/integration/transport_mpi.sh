#!/bin/sh
# The transport between MPI ranks and the measurements built on it:
# `pipedream topo --measure` alone (two forked processes of this node);
# then under `mpirun -np 2`: the shared case table of tests/unit/
# test_transport over the mpi backend (rank 0 runs the cases, rank 1 their
# peers), a peer that dies mid-stream (mpirun must end the job with a
# non-zero status in time, not hang), `pipedream bench transport --backend
# mpi` (a sound line per size beside plain MPI_Send/MPI_Recv; under mpirun
# shm and tcp run between the two ranks too) and
# `pipedream topo --mpi --measure` (the level measured between the two
# ranks); and tests/unit/test_transport_gpu's mpi pairs with device
# memory (the cpu device staged, forced onto the cuda-aware-mpi path at
# both ends (a real run of it: MPI sends from and receives into its
# memory, no staging copy), forced at one end only (both stage, saying
# why), and a CUDA device: cuda-aware-mpi where the MPI library is
# CUDA-aware, else staged with the reason; skipped without a GPU). The MPI
# part skips (77) without MPI or mpirun.
set -eu
: "${top_builddir:?run under make check}"
pd="$top_builddir/src/cli/pipedream"
tt="$top_builddir/tests/unit/test_transport"
tg="$top_builddir/tests/unit/test_transport_gpu"
unset PD_TRANSPORT_SPIN_US # the headers below name the default
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
    echo "FAIL: $*"
    exit 1
}

# Alone: the innermost level between two processes; the others named.
"$pd" topo --measure >"$work/out" 2>"$work/err" || { cat "$work/out" "$work/err"; fail "pipedream topo --measure"; }
grep -A1 "^  0 " "$work/out" | grep -q "measured .* (shm, host memory; .* of discovered), two processes of this node" ||
    { cat "$work/out"; fail "topo --measure: no measurement of level 0 between two processes"; }
status=0
"$pd" topo --measure --json >/dev/null 2>"$work/err" || status=$?
[ "$status" -eq 2 ] || fail "topo --measure --json: exit $status, expected 2"
echo "pipedream topo --measure: $(grep "^ \+measured " "$work/out" | sed 's/^ *//')"

. "$top_srcdir/tests/integration/mpi_env.sh"
run2() {
    limit=$1
    shift
    timeout "$limit" mpirun $mpirun_flags -np 2 "$@"
}

# The case table over mpi.
status=0
run2 300 "$tt" >"$work/out" 2>&1 || status=$?
cat "$work/out"
[ "$status" -ne 124 ] || fail "the mpi case table hung (killed after 300 s)"
[ "$status" -eq 0 ] || fail "the mpi case table exited $status"
# TAP under make check (CMOCKA_MESSAGE_OUTPUT), cmocka's own format otherwise.
grep -q "^ok [0-9]* - mpi: \|OK \] mpi: " "$work/out" || fail "the mpi case table passed no case"
! grep -q "^not ok\|FAILED" "$work/out" || fail "a case of the mpi table failed"

# Device memory over mpi: the pairs of test_transport_gpu (plain TAP).
status=0
run2 300 "$tg" >"$work/out" 2>&1 || status=$?
cat "$work/out"
[ "$status" -ne 124 ] || fail "the mpi device-memory pairs hung (killed after 300 s)"
[ "$status" -eq 0 ] || fail "the mpi device-memory pairs exited $status"
! grep -q "^not ok" "$work/out" || fail "an mpi device-memory pair failed"
forced="cpu slots over mpi, forced at the receiver yes, at the sender yes"
grep -q "^ok [0-9]* - $forced: the receiver took the cuda-aware-mpi path over mpi" "$work/out" ||
    fail "the forced cpu pair did not take cuda-aware-mpi"
grep -q "^ok [0-9]* - $forced: the receiver made 0 staging copies" "$work/out" ||
    fail "the forced cpu pair staged"
[ "$(grep -c "^ok [0-9]* - $forced: message [0-9]* (.*) intact" "$work/out")" = 7 ] ||
    fail "the forced cpu pair did not deliver its 7 messages intact"
grep -q "^ok [0-9]* - $forced: the sender sent from device memory on the same path (status 0)" "$work/out" ||
    fail "the forced cpu pair's sender did not take the same path"
one="cpu slots over mpi, forced at the receiver yes, at the sender no"
grep -q "^ok [0-9]* - $one: the receiver's reasons fit its path ('cuda-aware-mpi: the sender: the cpu device stages')" \
    "$work/out" || fail "a pair forced at one end did not stage at both, saying why"
cuda=$(grep "cuda slots over mpi" "$work/out" | grep -c "^ok [0-9]* - ") || true
if grep -q "^ok [0-9]* # SKIP cuda slots over mpi" "$work/out"; then
    echo "cuda slots over mpi: skipped ($(grep "# SKIP cuda slots over mpi" "$work/out" | sed 's/.*: no such/no/'))"
else
    # listen, 7 messages, path, copies, reasons, the sender: 12 checks passed.
    [ "$cuda" = 12 ] || fail "cuda slots over mpi: $cuda of 12 checks passed"
    echo "cuda slots over mpi: $(grep "^# cuda slots over mpi" "$work/out" | sed 's/^# //')"
fi

# A peer killed: mpirun ends the job, the survivor does not wait for ever.
status=0
start=$(date +%s)
run2 60 "$tt" --peer-killed >"$work/out" 2>&1 || status=$?
took=$(($(date +%s) - start))
[ "$status" -ne 124 ] || { cat "$work/out"; fail "rank 0 hung after its peer died (killed after 60 s)"; }
[ "$status" -ne 0 ] || { cat "$work/out"; fail "a dead peer went unnoticed (exit 0)"; }
grep -q "received 5 messages" "$work/out" || { cat "$work/out"; fail "the killed-peer case did not get under way"; }
! grep -q "still runs" "$work/out" || { cat "$work/out"; fail "rank 0 outlived its dead peer by 20 s"; }
[ "$took" -lt 30 ] || fail "the job took $took s to end after a peer died"
echo "a peer killed: mpirun ended the job with status $status after $took s"

# bench transport --backend mpi: bytes iters MB/s lat_us ref_MB/s ratio.
run2 120 "$pd" bench transport --backend mpi --size 4K --size 4M --depth 4 --total-mb 32 >"$work/out" 2>"$work/err" ||
    { cat "$work/out" "$work/err"; fail "bench transport --backend mpi"; }
cat "$work/out"
grep -q "^# pipedream bench transport: backend mpi, depth 4, waits sleep at once, 2 MPI ranks (.*, .*); reference: plain MPI_Send/MPI_Recv" \
    "$work/out" || fail "bench --backend mpi: header line missing"
for size in 4096 4194304; do
    awk -v s="$size" '$1 == s && NF == 6 && $3 > 0 && $4 > 0 && $5 > 0 && $6 > 0 { ok = 1 } END { exit !ok }' \
        "$work/out" || fail "bench --backend mpi: no sound line for $size bytes"
done
[ "$(grep -c '^  ' "$work/out")" = 2 ] || fail "bench --backend mpi: more than one rank printed"
status=0
"$pd" bench transport --backend mpi >/dev/null 2>"$work/err" || status=$?
[ "$status" -eq 2 ] && grep -q "runs as two (mpirun -np 2), this job has 1" "$work/err" ||
    fail "bench --backend mpi outside mpirun: exit $status, $(cat "$work/err")"
# Started by mpirun, the other backends run between the two ranks as well
# (the channel over shm or tcp, the reference plain MPI).
for backend in shm tcp; do
    run2 120 "$pd" bench transport --backend $backend --size 64K --depth 4 --total-mb 16 --latency-iters 50 \
        >"$work/out" 2>"$work/err" || { cat "$work/out" "$work/err"; fail "mpirun: bench transport --backend $backend"; }
    cat "$work/out"
    # shm's waits poll while a stream flows (2 ms by default); tcp's sleep
    waits="waits sleep at once"
    [ $backend = tcp ] || waits="waits spin up to 2000 us while streaming"
    grep -q "^# pipedream bench transport: backend $backend, depth 4, $waits, 2 MPI ranks (.*, .*); reference: plain MPI_Send/MPI_Recv stream\$" \
        "$work/out" || fail "mpirun: bench --backend $backend: header line missing"
    awk '$1 == 65536 && NF == 6 && $3 > 0 && $4 > 0 && $5 > 0 && $6 > 0 { ok = 1 } END { exit !ok }' "$work/out" ||
        fail "mpirun: bench --backend $backend: no sound line"
    [ "$(grep -c '^  ' "$work/out")" = 1 ] || fail "mpirun: bench --backend $backend: more than one rank printed"
done

# topo --mpi --measure: the innermost level between the two ranks.
run2 120 "$pd" topo --mpi --measure >"$work/out" 2>"$work/err" ||
    { cat "$work/out" "$work/err"; fail "topo --mpi --measure"; }
grep -A1 "^  0 " "$work/out" | grep -q "measured .* (shm, host memory; .*), ranks 0 and 1 on " ||
    { cat "$work/out"; fail "topo --mpi --measure: level 0 not measured between ranks 0 and 1"; }
[ "$(grep -c "^measured with the transport" "$work/out")" = 1 ] || fail "topo --mpi --measure: not one table"
echo "mpirun -np 2 pipedream topo --mpi --measure: $(grep "^ \+measured " "$work/out" | sed 's/^ *//')"
