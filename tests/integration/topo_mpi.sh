#!/bin/sh
# `pipedream topo --mpi` under mpirun with two ranks on this machine: rank 0
# gathers both ranks' descriptions and writes a cluster of one node with the
# workers `pipedream topo` finds alone, both ranks hold the same cluster, a
# 16-GPU node read from hwloc XML gives 1 x 16, a rank that fails makes
# every rank fail instead of hanging, and options that do not fit are
# refused. Skips (77) without mpirun or in a build without MPI.
set -eu
: "${top_builddir:?run under make check}" "${top_srcdir:?run under make check}"
pd="$top_builddir/src/cli/pipedream"
dgx2="$top_srcdir/tests/topology/nvidiaDGX2.xml"

. "$top_srcdir/tests/integration/mpi_env.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run2() {
    timeout 120 mpirun $mpirun_flags -np 2 "$@"
}
fail() {
    echo "FAIL: $*"
    exit 1
}
# A top-level integer member of a cluster file (written indented by two).
member() {
    sed -n "s/^  \"$1\": \\([0-9]*\\),\$/\\1/p" "$2"
}

"$pd" topo -o "$work/alone.json" >/dev/null || fail "pipedream topo alone"
workers=$(member workers_per_node "$work/alone.json")
[ -n "$workers" ] || fail "no workers_per_node in the cluster of this node alone"

status=0
PD_LOG_LEVEL=debug run2 "$pd" topo --mpi -o "$work/mpi.json" >"$work/out" 2>"$work/err" || status=$?
[ "$status" -ne 124 ] || fail "mpirun -np 2 pipedream topo --mpi hung (killed after 120 s)"
[ "$status" -eq 0 ] || { cat "$work/out" "$work/err"; fail "pipedream topo --mpi exited $status"; }
[ "$(member nodes "$work/mpi.json")" = 1 ] || fail "the gathered cluster has not 1 node: $(member nodes "$work/mpi.json")"
[ "$(member workers_per_node "$work/mpi.json")" = "$workers" ] ||
    fail "the gathered cluster has $(member workers_per_node "$work/mpi.json") workers per node, this node $workers"
grep -q '"description": "1 node of .*, gathered from 2 MPI ranks"' "$work/mpi.json" ||
    fail "the description does not say 2 ranks: $(grep description "$work/mpi.json")"
grep -q "gathered from 2 MPI ranks" "$work/out" || fail "rank 0 did not print the cluster"
[ "$(grep -c '^cluster ' "$work/out")" = 1 ] || fail "more than one rank printed the cluster"
# Both ranks hold the cluster, the same one.
grep "holds cluster" "$work/err" | sed 's/.*rank [01] holds/holds/' | sort | uniq -c >"$work/held"
[ "$(grep -c "r0\\].*rank 0 holds cluster" "$work/err")" = 1 ] || { cat "$work/err"; fail "rank 0 holds no cluster"; }
[ "$(grep -c "r1\\].*rank 1 holds cluster" "$work/err")" = 1 ] || { cat "$work/err"; fail "rank 1 holds no cluster"; }
[ "$(wc -l <"$work/held")" = 1 ] && grep -q "^ *2 holds cluster .*: 1 x $workers workers" "$work/held" ||
    { cat "$work/held"; fail "the ranks do not hold the same cluster"; }
echo "mpirun -np 2 pipedream topo --mpi: 1 node x $workers workers, both ranks agree"

# A node read from XML: the DGX-2's 16 GPUs on NVSwitch.
run2 "$pd" topo --mpi --xml "$dgx2" --json >"$work/dgx2.json" 2>"$work/err" || { cat "$work/err"; fail "--mpi --xml"; }
[ "$(member nodes "$work/dgx2.json")" = 1 ] && [ "$(member workers_per_node "$work/dgx2.json")" = 16 ] ||
    fail "--mpi --xml nvidiaDGX2.xml: not 1 x 16 workers"
grep -q '"nvlink"' "$work/dgx2.json" || fail "--mpi --xml nvidiaDGX2.xml: no nvlink level"
echo "mpirun -np 2 pipedream topo --mpi --xml nvidiaDGX2.xml: 1 node x 16 workers"

# Rank 1 cannot describe its node: both ranks fail, none waits.
status=0
run2 sh -c 'if [ "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}" = 1 ]; then x=/nonexistent.xml; else x=$1; fi
            exec "$0" topo --mpi --xml "$x" --json' "$pd" "$dgx2" >"$work/out" 2>"$work/err" || status=$?
[ "$status" -ne 124 ] || fail "a failing rank made the others hang"
[ "$status" -ne 0 ] || fail "a failing rank went unnoticed"
grep -q "rank 1 has no description of its node" "$work/err" || { cat "$work/err"; fail "rank 0 did not name rank 1"; }
echo "a rank without a description: every rank fails, naming it"

# Options that do not fit, refused before MPI starts.
for bad in "--mpi --nodes 2" "--mpi --cluster $work/mpi.json"; do
    status=0
    "$pd" topo $bad >/dev/null 2>"$work/err" || status=$?
    [ "$status" -eq 2 ] || fail "pipedream topo $bad: exit $status, expected 2"
done
echo "--mpi with --nodes or --cluster: refused"
