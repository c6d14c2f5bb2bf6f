#!/bin/bash
# `pipedream topo --mpi --measure` between two "nodes": two network
# namespaces of this machine on a bridge, each link limited to 200 Mb/s
# each way by tc (experiments/lib/netns.sh), one rank in each
# (experiments/lib/netns-rank with PD_NETNS_UTS=1: a host name per
# namespace, which is how the gather tells nodes apart). Checks that the
# gathered cluster has 2 nodes (and 1 without the host names), that the
# network level is measured between the two hosts over tcp at 50%..110% of
# the links' 200 Mb/s and printed beside the given --network, that the
# stream's bytes crossed the sending host's link and its tc limiter, that
# this machine's host name is unchanged, and that no namespace or link is
# left. About 20 s (the stream is 320 MiB at 25 MB/s). Skips (77) without
# MPI, Open MPI's mpirun, root, `ip netns`, tc or unshare.
# shellcheck disable=SC2154 # openmpi, mpirun_flags, emu_*: set by the sourced files
set -u
: "${top_builddir:?run under make check}" "${top_srcdir:?run under make check}"
skip() {
    echo "SKIP: $*"
    exit 77
}
# netns.sh is bash; make check runs tests with sh.
if [ -z "${BASH_VERSION-}" ]; then
    command -v bash >/dev/null 2>&1 || skip "bash is not installed (experiments/lib/netns.sh needs it)"
    exec bash "$0" "$@"
fi
. "$top_srcdir/tests/integration/mpi_env.sh"
$openmpi || skip "mpirun is not Open MPI's (the namespaces' MCA and PMIx settings are Open MPI's)"
[ "$(id -u)" -eq 0 ] || skip "not root (network namespaces, veth links, tc and host names need it)"
ip netns list >/dev/null 2>&1 || skip "'ip netns' does not work here (iproute2 with network namespaces)"
command -v tc >/dev/null 2>&1 || skip "tc is not installed (iproute2)"
unshare --uts true 2>/dev/null || skip "'unshare --uts' does not work here (util-linux, UTS namespaces)"

. "$top_srcdir/experiments/lib/netns.sh"
pd=$top_builddir/src/cli/pipedream
bandwidth=200Mb/s
stream_bytes=$(((16 + 64) * 4194304)) # topo_measure.c: warm-up and stream of 4 MiB messages
host=$(hostname)
work=$(mktemp -d)
job=
finish() {
    # mpirun (under timeout) if it still runs, then the namespaces and what
    # runs in them.
    if [ -n "$job" ]; then
        kill -TERM "$job" 2>/dev/null
        wait "$job" 2>/dev/null
    fi
    emu_down
    rm -rf "$work"
}
trap finish EXIT
trap 'exit 1' INT TERM
fail() {
    echo "FAIL: $*"
    exit 1
}
# mpirun -np 2, a rank in each namespace, killed after $1 seconds; in the
# background, so that a signal reaches the trap at once.
run2() {
    local limit=$1
    shift
    # shellcheck disable=SC2086 # mpirun_flags: words
    timeout "$limit" mpirun $mpirun_flags -np 2 "$top_srcdir/experiments/lib/netns-rank" "$@" &
    job=$!
    wait "$job"
    local status=$?
    job=
    return "$status"
}
member() {
    sed -n "s/^  \"$1\": \\([0-9]*\\),\$/\\1/p" "$2"
}

emu_up 2 "$bandwidth" || fail "could not create the namespaces (ip netns, veth, bridge, tc)"
echo "2 hosts $emu_ns-0 and -1 ($emu_subnet), links of $bandwidth each way"
# As experiments/lib/emulated.sh: MPI over TCP on the links, PMIx's server
# reachable from the namespaces.
export OMPI_MCA_btl=tcp,self OMPI_MCA_pml=ob1 OMPI_MCA_btl_tcp_if_include="$emu_subnet"
export PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include="$emu_subnet"
export PD_EMU_PIPEDREAM="$pd" PD_EMU_NETNS="$emu_ns"

# Without host names of their own the namespaces are one node.
status=0
PD_NETNS_UTS=0 run2 60 topo --mpi -o "$work/one.json" >"$work/one.out" 2>&1 || status=$?
[ "$status" -eq 0 ] || { cat "$work/one.out"; fail "topo --mpi in the namespaces (no PD_NETNS_UTS) exited $status"; }
[ "$(member nodes "$work/one.json")" = 1 ] ||
    fail "two namespaces sharing the host name gave $(member nodes "$work/one.json") nodes, expected 1"
echo "without PD_NETNS_UTS: 1 node (the host name is shared)"

# What host 1's tc limiter has passed so far.
limited() {
    tc -n "$emu_ns-1" -s qdisc show dev "${emu_tag}n1" | sed -n 's/^ *Sent \([0-9]*\) bytes.*/\1/p' | head -n 1
}
read -r tx0 tx1 < <(emu_tx_bytes | paste -sd' ')
limited0=$(limited)
status=0
PD_NETNS_UTS=1 run2 90 topo --mpi --measure --network "$bandwidth" -o "$work/two.json" >"$work/out" 2>"$work/err" ||
    status=$?
read -r tx0_after tx1_after < <(emu_tx_bytes | paste -sd' ')
[ "$status" -ne 124 ] || { cat "$work/out" "$work/err"; fail "topo --mpi --measure hung (killed after 90 s)"; }
[ "$status" -eq 0 ] || { cat "$work/out" "$work/err"; fail "topo --mpi --measure exited $status"; }
sed -n '/^measured with the transport/,$p' "$work/out" >"$work/table"
cat "$work/table"
[ "$(hostname)" = "$host" ] || fail "this machine's host name changed from $host to $(hostname)"

[ "$(member nodes "$work/two.json")" = 2 ] ||
    fail "the gathered cluster has $(member nodes "$work/two.json") nodes, expected 2"
grep -q '"description": "2 nodes of .*, gathered from 2 MPI ranks"' "$work/two.json" ||
    fail "the description does not say 2 nodes from 2 ranks: $(grep description "$work/two.json")"
echo "with PD_NETNS_UTS=1: 2 nodes ($emu_ns-0, $emu_ns-1)"

# The network level: given, then measured between the two hosts.
net=$(grep -A1 '^  [0-9] network ' "$work/table")
echo "$net" | head -n 1 | grep -q " given  *25 MB/s = 200 Mb/s, .* (user: --network)" ||
    fail "the network level does not show the given 200 Mb/s: $net"
measured=$(echo "$net" | sed -n 's/^ *measured  *//p')
[ -n "$measured" ] || fail "the network level was not measured: $net"
case $measured in
*"(tcp; "*) ;;
*) fail "the network level was not measured over tcp: $measured" ;;
esac
case $measured in
*"ranks 0 ($emu_ns-0) and 1 ($emu_ns-1)"*) ;;
*) fail "the network level was not measured between the two hosts: $measured" ;;
esac
# Its bandwidth against the links' limit.
awk -v m="$measured" -v limit="$(emu_bits "$bandwidth")" 'BEGIN {
    split(m, w, " "); f["B/s"] = 8; f["KB/s"] = 8e3; f["MB/s"] = 8e6; f["GB/s"] = 8e9
    if (!(w[2] in f)) { print "FAIL: no bandwidth in: " m; exit 1 }
    r = w[1] * f[w[2]] / limit
    printf "measured %.1f Mb/s between the hosts, %.0f%% of the links %.0f Mb/s\n", w[1] * f[w[2]] / 1e6, 100 * r, limit / 1e6
    if (r < 0.5 || r > 1.1) { print "FAIL: outside 50%..110% of the links"; exit 1 } }' || fail "see above"

# The stream went from rank 1 (host 1) to rank 0 over host 1's link, and
# through its tc limiter.
awk -v a="$tx1" -v b="$tx1_after" -v c="$tx0" -v d="$tx0_after" -v s="$stream_bytes" 'BEGIN {
    printf "bytes sent on the links: host 1 %.0f (the stream: %.0f), host 0 %.0f\n", b - a, s, d - c
    if (b - a < s) { print "FAIL: host 1 sent fewer bytes on its link than the stream"; exit 1 }
    if (b - a > 1.5 * s) { print "FAIL: host 1 sent far more bytes than the stream"; exit 1 } }' || fail "see above"
limited=$(($(limited) - ${limited0:-0}))
[ "$limited" -ge "$stream_bytes" ] ||
    fail "host 1's tc limiter passed $limited bytes during the measurement, fewer than the stream's $stream_bytes"
echo "host 1's tbf qdisc passed $limited bytes"

emu_down
if ip netns list | grep -q "^$emu_ns-" || ip -o link | grep -q ": ${emu_tag}[hnb]"; then
    fail "namespaces or links are left: $(ip netns list | grep "^$emu_ns-") $(ip -o link | grep ": $emu_tag")"
fi
echo "PASS"
