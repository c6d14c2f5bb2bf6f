# shellcheck shell=bash disable=SC2034 # emu_* are for the caller
# An emulated cluster on this machine (sourced, bash): N "hosts", each a
# network namespace with one veth link to a bridge in the root namespace,
# every link limited by `tc` (a token bucket each way: the host's upload on
# its end, its download on the bridge's end), like N servers with one NIC
# each on a switch. The root namespace has an address on the bridge too, so
# that ranks started in the namespaces reach mpirun's PMIx server.
#
#   emu_up N BANDWIDTH   create pd-emu-$$-0 .. N-1 (10.213.K.1 .. N/24, the
#                        root 10.213.K.254) with links of BANDWIDTH
#                        (pipedream's units: 1Gb/s, 100Mb/s, 12.5MB/s)
#   emu_down             kill what runs in them, delete them (idempotent)
#   emu_tx_bytes         bytes sent so far by each host on its link, one
#                        line per host
#   emu_bits BANDWIDTH   BANDWIDTH in bits per second
#
# Sets emu_ns (the namespaces' prefix: $emu_ns-0 ...), emu_subnet (CIDR),
# emu_root (the root's address), emu_hosts and emu_tag (the interfaces'
# prefix: ${emu_tag}br the bridge, ${emu_tag}h<i>/${emu_tag}n<i> host i's
# veth ends in the root namespace and in its own).
emu_ns=pd-emu-$$
emu_tag=pde$$
emu_hosts=0
emu_subnet=
emu_root=

emu_bits() {
    awk -v s="$1" 'BEGIN {
        if (match(s, /^[0-9]+(\.[0-9]+)?/) == 0) exit 1
        v = substr(s, 1, RLENGTH); u = substr(s, RLENGTH + 1)
        f["b/s"] = 1; f["Kb/s"] = 1e3; f["Mb/s"] = 1e6; f["Gb/s"] = 1e9
        f["B/s"] = 8; f["KB/s"] = 8e3; f["MB/s"] = 8e6; f["GB/s"] = 8e9
        if (!(u in f) || v * f[u] < 8000) exit 1
        printf "%.0f\n", v * f[u]
    }'
}

emu_up() { # hosts bandwidth
    local n=$1 bits burst k i
    bits=$(emu_bits "$2") || { echo "bandwidth '$2': expected e.g. 1Gb/s, 100Mb/s or 12.5MB/s (at least 1KB/s)" >&2; return 1; }
    # 10 ms at the link's rate, at least 16 KiB: the bucket must hold a
    # few full-size frames, and not much more, or short bursts run unlimited.
    burst=$((bits / 800 > 16384 ? bits / 800 : 16384))
    # A /24 nobody here uses.
    k=$(($$ % 250 + 1))
    for _ in $(seq 250); do
        ip -4 -o addr show | grep -q " 10\.213\.$k\." || break
        k=$((k % 250 + 1))
    done
    emu_subnet=10.213.$k.0/24
    emu_root=10.213.$k.254
    emu_hosts=$n
    ip link add "${emu_tag}br" type bridge &&
        ip addr add "$emu_root/24" dev "${emu_tag}br" &&
        ip link set "${emu_tag}br" up || return 1
    for ((i = 0; i < n; i++)); do
        ip netns add "$emu_ns-$i" &&
            ip link add "${emu_tag}h$i" type veth peer name "${emu_tag}n$i" &&
            ip link set "${emu_tag}n$i" netns "$emu_ns-$i" &&
            ip link set "${emu_tag}h$i" master "${emu_tag}br" &&
            ip link set "${emu_tag}h$i" up &&
            ip -n "$emu_ns-$i" link set lo up &&
            ip -n "$emu_ns-$i" addr add "10.213.$k.$((i + 1))/24" dev "${emu_tag}n$i" &&
            ip -n "$emu_ns-$i" link set "${emu_tag}n$i" up &&
            tc -n "$emu_ns-$i" qdisc add dev "${emu_tag}n$i" root tbf rate "${bits}bit" burst "$burst" latency 100ms &&
            tc qdisc add dev "${emu_tag}h$i" root tbf rate "${bits}bit" burst "$burst" latency 100ms || return 1
    done
}

emu_down() {
    local ns pid i
    for ns in $(ip netns list 2>/dev/null | awk -v p="$emu_ns-" 'index($1, p) == 1 { print $1 }'); do
        # Our ranks, should any still run there (they are ours: nobody
        # else knows these namespaces).
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
        ip netns del "$ns" 2>/dev/null || true
    done
    for ((i = 0; i < emu_hosts; i++)); do
        ip link del "${emu_tag}h$i" 2>/dev/null || true
    done
    ip link del "${emu_tag}br" 2>/dev/null || true
    emu_hosts=0
}

emu_tx_bytes() {
    local i
    for ((i = 0; i < emu_hosts; i++)); do
        ip netns exec "$emu_ns-$i" cat "/sys/class/net/${emu_tag}n$i/statistics/tx_bytes"
    done
}
