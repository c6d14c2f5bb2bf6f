#!/bin/sh
# A short emulated cluster run: `experiments/reproduce --emulated --quick`
# trains LeNet on Fashion-MNIST (48 minibatches of 32) with PipeDream's plan
# and with data parallelism on 4 network namespaces, one rank each, joined
# by 100 Mb/s tc-limited veth links. Checks that both runs finished and
# wrote the CSV, the table and (with gnuplot) the plots; that the bytes
# went over the links (every host sent some, in each run) and match the
# simulator's bytes per sample for the same plan and cluster (within
# -20%/+50%: TCP/IP headers and MPI's start-up are on the links too), so
# that DP's bytes per sample exceed PipeDream's by the predicted ratio; and
# that no namespace or link is left afterwards. About 6 s on 2 cores.
# Skips (77) without MPI, Open MPI's mpirun, root, `ip netns`, tc or
# Fashion-MNIST.
set -u
: "${top_builddir:?run under make check}" "${top_srcdir:?run under make check}"
. "$top_srcdir/tests/integration/mpi_env.sh"
skip() {
    echo "SKIP: $*"
    exit 77
}
$openmpi || skip "mpirun is not Open MPI's (the emulated cluster's MCA and PMIx settings are Open MPI's)"
[ "$(id -u)" -eq 0 ] || skip "not root (network namespaces, veth links and tc need it)"
ip netns list >/dev/null 2>&1 || skip "'ip netns' does not work here (iproute2 with network namespaces)"
command -v tc >/dev/null 2>&1 || skip "tc is not installed (iproute2)"
data=/usr/share/datasets/fashion-mnist
[ -r "$data/train-images-idx3-ubyte.gz" ] || [ -r "$data/train-images-idx3-ubyte" ] ||
    skip "Fashion-MNIST is not installed ($data; apt install dataset-fashion-mnist)"

work=$(mktemp -d)
out=$work/out
pid=
finish() {
    # Stop the experiment if it still runs (its trap removes its cluster).
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    rm -rf "$work"
}
trap finish EXIT
trap 'exit 1' INT TERM
fail() {
    echo "FAIL: $*"
    exit 1
}

PIPEDREAM=$top_builddir/src/cli/pipedream "$top_srcdir/experiments/reproduce" --emulated --quick --data "$data" \
    --out "$out" >"$work/log" 2>&1 &
pid=$!
# The run takes seconds: a watchdog stops it (and the test fails) after
# 150; stopped itself, it stops its sleep.
(
    trap 'kill "$s" 2>/dev/null; exit 0' TERM
    sleep 150 &
    s=$!
    wait "$s" && kill -TERM "$pid" 2>/dev/null
) &
watchdog=$!
wait "$pid"
status=$?
kill -TERM "$watchdog" 2>/dev/null
wait "$watchdog" 2>/dev/null
cat "$work/log"
[ "$status" -eq 0 ] || fail "experiments/reproduce --emulated --quick exited with status $status"

# Namespaces pd-emu-<pid>-*, links pde<pid>*: gone (the kernel removes a
# namespace's links once its last process has left; give it 5 s).
gone=false
for _ in 1 2 3 4 5 6 7 8 9 10; do
    if ! ip netns list | grep -q "^pd-emu-$pid-" && ! ip -o link | grep -q ": pde${pid}[hnb]"; then
        gone=true
        break
    fi
    sleep 0.5
done
$gone || fail "namespaces or links of the run are left: $(ip netns list | grep "^pd-emu-$pid-") $(ip -o link | grep ": pde$pid")"

csv=$out/emulated.csv
for f in "$csv" "$out/accuracy.csv" "$out/emulated.md"; do
    [ -s "$f" ] || fail "$f is missing or empty"
done
if command -v gnuplot >/dev/null 2>&1; then
    for f in "$out/throughput.png" "$out/accuracy.png"; do
        [ "$(head -c 4 "$f" 2>/dev/null | tail -c 3)" = PNG ] || fail "$f is not a PNG"
    done
fi
grep -q '^| lenet | ' "$out/emulated.md" || fail "emulated.md has no row for lenet"

# Columns: 2 run, 4 config, 8 minibatches, 9 samples/s, 12 bytes sent,
# 13 bytes per sample, 14 bytes per host, 15 test accuracy, 19 predicted
# bytes per sample.
awk -F, '
    NR > 1 { rows++; run = $2
        if ($8 != 48) { print "FAIL: " run ": " $8 " minibatches, not 48"; bad = 1 }
        if (!($9 > 0)) { print "FAIL: " run ": no samples/s"; bad = 1 }
        if ($15 == "" || $15 < 0 || $15 > 1) { print "FAIL: " run ": no test accuracy"; bad = 1 }
        n = split($14, h, ":")
        for (i = 1; i <= n; i++) if (!(h[i] > 0)) { print "FAIL: " run ": host " i - 1 " sent no bytes"; bad = 1 }
        if (n != 4) { print "FAIL: " run ": bytes of " n " hosts, not 4"; bad = 1 }
        r = $13 / $19
        printf "%s (%s): %.0f bytes per sample measured on the links, %.0f predicted (%.2fx)\n", run, $4, $13, $19, r
        if (r < 0.8 || r > 1.5) { print "FAIL: " run ": measured bytes per sample off the prediction"; bad = 1 }
        m[run] = $13; p[run] = $19 }
    END {
        if (rows != 2 || !("pipedream" in m) || !("dp" in m)) { print "FAIL: expected a pipedream and a dp row"; exit 1 }
        printf "DP / PipeDream bytes per sample: %.2fx measured, %.2fx predicted\n", m["dp"] / m["pipedream"], p["dp"] / p["pipedream"]
        if (!(p["dp"] > 2 * p["pipedream"])) { print "FAIL: the plan does not predict fewer bytes than DP"; bad = 1 }
        if (!(m["dp"] > 2 * m["pipedream"])) { print "FAIL: DP did not send more bytes per sample than PipeDream"; bad = 1 }
        exit bad }' "$csv" || fail "see above"
echo "PASS"
