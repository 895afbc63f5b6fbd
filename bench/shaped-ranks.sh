#!/usr/bin/env bash
# Runs N ranks of a ringcc job in N network namespaces joined by a bridge,
# every link shaped with tbf to RATE in both directions (no netem here, so
# no delay or loss), then tears everything down (also on failure/Ctrl-C).
# Addresses are 10.77.0.1..N, private to the namespaces; nothing leaves
# the machine. Rank 0's output is printed; the others' are in $TMPDIR.
#   bench/shaped-ranks.sh [-n N] [-r RATE] PROGRAM ARGS...
#   e.g. bench/shaped-ranks.sh -n 4 -r 1gbit build/bench/ringcc-perf -C reducescatter -b 64M -e 64M
# A first step toward the network lab of issue 4.
set -euo pipefail
n=4 rate=1gbit
while getopts "n:r:h" opt; do
    case $opt in
    n) n=$OPTARG ;;
    r) rate=$OPTARG ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || { sed -n '2,9p' "$0"; exit 2; }
if ! ip netns add rcc-probe-$$ 2>/dev/null; then
    echo "shaped-ranks: cannot create network namespaces (needs root / CAP_NET_ADMIN)" >&2
    exit 77
fi
ip netns del rcc-probe-$$
tag=rs$$ br=rsb$$ logs=$(mktemp -d)
# shellcheck disable=SC2317 # called by the trap
cleanup() {
    for i in $(seq 0 $((n - 1))); do ip netns del "$tag-$i" 2>/dev/null || true; done
    ip link del "$br" 2>/dev/null || true
}
trap cleanup EXIT INT TERM
ip link add "$br" type bridge
ip link set "$br" up
for i in $(seq 0 $((n - 1))); do
    ns=$tag-$i
    ip netns add "$ns"
    ip link add "v$tag$i" type veth peer name "b$tag$i"
    ip link set "v$tag$i" netns "$ns"
    ip link set "b$tag$i" master "$br" up
    ip netns exec "$ns" ip addr add "10.77.0.$((i + 1))/24" dev "v$tag$i"
    ip netns exec "$ns" ip link set "v$tag$i" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" tc qdisc add dev "v$tag$i" root tbf rate "$rate" burst 512kb latency 100ms
    tc qdisc add dev "b$tag$i" root tbf rate "$rate" burst 512kb latency 100ms
done
secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$((30000 + RANDOM % 20000))
pids=()
for i in $(seq 0 $((n - 1))); do
    ip netns exec "$tag-$i" env RCC_RANK="$i" RCC_NRANKS="$n" RCC_ROOT="10.77.0.1:$port" \
        RCC_SECRET="$secret" timeout 600 "$@" >"$logs/rank$i.log" 2>&1 &
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
cat "$logs/rank0.log"
[[ $rc -eq 0 ]] || echo "shaped-ranks: a rank failed (status $rc); logs in $logs" >&2
exit $rc
