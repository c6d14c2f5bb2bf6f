#!/bin/sh
# `pipedream topo` end to end: live discovery of whatever machine runs the
# test (it must say plainly whether it found GPUs and RDMA NICs), a DGX-2
# cluster from hwloc XML written, re-read and printed, every shipped cluster
# file read, and bad input (XML, cluster files, options) rejected with one
# line on stderr and exit status 2.
set -u

PIPEDREAM="${top_builddir:?top_builddir is not set}/src/cli/pipedream"
SRC="${top_srcdir:?top_srcdir is not set}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pd-topo-cli.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# expect_bad WHAT ARGS...: exit 2 and exactly one line on stderr.
expect_bad() {
    what=$1
    shift
    "$PIPEDREAM" topo "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ]; then
        fail "$what: exit $rc with $lines lines on stderr (want 2 and 1)"
        cat "$tmp/err"
    else
        echo "ok: $what: $(cat "$tmp/err")"
    fi
}

# ---- live ----
if "$PIPEDREAM" topo >"$tmp/live.txt" 2>"$tmp/err"; then
    cat "$tmp/live.txt"
    grep -Eq '^GPUs: (none \(no NVIDIA GPU on the PCI bus\)|[0-9]+)$' "$tmp/live.txt" ||
        fail "live: no line saying how many GPUs there are"
    if grep -q '^  .* RDMA ' "$tmp/live.txt"; then :; else
        grep -q '^RDMA NICs: none (no OpenFabrics device)$' "$tmp/live.txt" ||
            fail "live: neither an RDMA NIC nor a line saying there is none"
    fi
    grep -q '^levels inside the node' "$tmp/live.txt" || fail "live: no levels"
else
    fail "live discovery failed: $(cat "$tmp/err")"
fi

# ---- a DGX-2 cluster from XML ----
xml="$SRC/tests/topology/nvidiaDGX2.xml"
if "$PIPEDREAM" topo --xml "$xml" --nodes 4 --network 100Gb/s -o "$tmp/dgx2.cluster.json" >"$tmp/dgx2.txt"; then
    grep -q '^GPUs: 16$' "$tmp/dgx2.txt" || fail "dgx2: not 16 GPUs"
    grep -Eq '^  1 network +fanout 4 +12.5 GB/s, latency 5e-05 s \(user\)$' "$tmp/dgx2.txt" ||
        fail "dgx2: no network level of 4 x 12.5 GB/s"
    "$PIPEDREAM" topo --cluster "$tmp/dgx2.cluster.json" >"$tmp/reread.txt" || fail "dgx2: re-reading the file failed"
    grep -q '^cluster .*: 4 x 16 = 64 workers' "$tmp/reread.txt" || fail "dgx2: re-read cluster differs"
    "$PIPEDREAM" topo --cluster "$tmp/dgx2.cluster.json" --json >"$tmp/again.json" || fail "dgx2: --json failed"
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert [l["fanout"] for l in d["levels"]] == [16, 4]' \
            "$tmp/again.json" || fail "dgx2: --json output is not the cluster"
    fi
else
    fail "topo --xml nvidiaDGX2.xml failed"
fi

# ---- shipped cluster files ----
for f in "$SRC"/topology/clusters/*.cluster.json; do
    "$PIPEDREAM" topo --cluster "$f" >"$tmp/shipped.txt" 2>"$tmp/err" || fail "$(basename "$f"): $(cat "$tmp/err")"
done

# ---- bad input ----
printf '<topology version="2.0"><object type="Machine"' >"$tmp/bad.xml"
expect_bad "truncated XML" --xml "$tmp/bad.xml"
expect_bad "missing XML" --xml "$tmp/missing.xml"
expect_bad "a JSON file as XML" --xml "$SRC/topology/clusters/cluster-a.cluster.json"
printf '{"levels": [{"name": "gpu", "fanout": 4, "bandwidth_bytes_per_s": -3}]}\n' >"$tmp/bad.cluster.json"
expect_bad "negative bandwidth" --cluster "$tmp/bad.cluster.json"
grep -q 'levels\[0\].bandwidth_bytes_per_s' "$tmp/err" || fail "negative bandwidth: the field is not named"
printf '{"levels": [{"name": "gpu", "fanout": 4, "bandwidth": 1}]}\n' >"$tmp/bad.cluster.json"
expect_bad "misspelt field" --cluster "$tmp/bad.cluster.json"
printf '{"levels": [\n' >"$tmp/bad.cluster.json"
expect_bad "truncated JSON" --cluster "$tmp/bad.cluster.json"
expect_bad "bad --network" --xml "$xml" --nodes 2 --network fast
expect_bad "no NIC and no --network" --xml "$xml" --nodes 2
expect_bad "--nodes 0" --nodes 0
expect_bad "--measure with --xml (it measures this machine)" --measure --xml "$xml"
expect_bad "--cluster with --xml" --cluster "$SRC/topology/clusters/cluster-a.cluster.json" --xml "$xml"
expect_bad "unknown option" --frobnicate

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
