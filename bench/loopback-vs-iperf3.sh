#!/usr/bin/env bash
# Headline figure: ringcc's 4-rank allreduce busbw on loopback against the
# loopback TCP throughput of 4 simultaneous ring-shaped iperf3 flows (rank i
# to rank i+1), measured alternately in the same run. Prints the medians and
# their ratio. Usage: bench/loopback-vs-iperf3.sh BUILD_DIR [ROUNDS] [BYTES]
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [ROUNDS] [BYTES]}
rounds=${2:-3}
bytes=${3:-64M}
nranks=4
command -v iperf3 >/dev/null || { echo "iperf3 is not installed (apt-get install iperf3)" >&2; exit 2; }
run="$build/tools/ringcc-run"
perf="$build/bench/ringcc-perf"
base=$((20000 + RANDOM % 20000))

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

ring_busbw() { # GB/s, from the single-size table row
    "$run" -q -n "$nranks" "$perf" -b "$bytes" -e "$bytes" -n 10 -w 3 -d float32 -o sum |
        awk '$1 ~ /^[0-9]+$/ && NF >= 8 {print $7}'
}

iperf_flow() { # GB/s per flow: the mean of the 4 simultaneous flows
    local pids=() files=()
    for i in $(seq 0 $((nranks - 1))); do
        timeout 60 iperf3 -s -1 -p $((base + i)) >/dev/null 2>&1 &
        pids+=($!)
    done
    sleep 0.3
    for i in $(seq 0 $((nranks - 1))); do
        f=$(mktemp)
        files+=("$f")
        # flow i: "rank i" sends to "rank i+1"'s server
        timeout 60 iperf3 -c 127.0.0.1 -p $((base + (i + 1) % nranks)) -t 4 -J >"$f" &
    done
    wait
    for f in "${files[@]}"; do
        python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 8e9)' "$f"
        rm -f "$f"
    done | awk '{s += $1} END {printf "%.3f\n", s / NR}'
}

ring=() flows=()
for r in $(seq 1 "$rounds"); do
    ring+=("$(ring_busbw)")
    flows+=("$(iperf_flow)")
    echo "round $r: ringcc busbw ${ring[-1]} GB/s, iperf3 per flow ${flows[-1]} GB/s" >&2
done
rb=$(printf '%s\n' "${ring[@]}" | median)
fb=$(printf '%s\n' "${flows[@]}" | median)
echo "ringcc allreduce $nranks ranks $bytes float32: busbw median $rb GB/s"
echo "iperf3 $nranks simultaneous ring flows: per-flow median $fb GB/s"
awk -v a="$rb" -v b="$fb" 'BEGIN {printf "ratio busbw / flow: %.2f\n", a / b}'
