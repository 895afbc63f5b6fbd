#!/usr/bin/env bash
# ringcc-linkperf's goodput on one lab link against iperf3's on the same
# link in the same run: a 2-rank netlab (tools/netlab, root) shaped to RATE,
# rounds alternating one iperf3 TCP flow rank 0 -> rank 1 for SECS seconds
# and ringcc-linkperf streaming messages of SIZE over TRANSPORT for about as
# long. Neither counts its connection's start: iperf3 omits its first 2 s
# (-O 2), linkperf times after its warmup (128 MiB). Prints each round, the
# medians and their ratio.
# Usage: bench/linkperf-vs-iperf3.sh BUILD_DIR [RATE] [ROUNDS] [SECS] [SIZE] [TRANSPORT]
#   defaults: 1gbit, 3 rounds, 10 s, 4M, tcp
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [RATE] [ROUNDS] [SECS] [SIZE] [TRANSPORT]}
rate=${2:-1gbit}
rounds=${3:-3}
secs=${4:-10}
size=${5:-4M}
transport=${6:-tcp}
here=$(cd "$(dirname "$0")" && pwd)
netlab="$here/../tools/netlab"
linkperf=$(realpath "$build/bench/ringcc-linkperf")
command -v iperf3 >/dev/null || { echo "iperf3 is not installed (apt-get install iperf3)" >&2; exit 2; }
"$netlab" check >/dev/null || exit $?

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
bytes_of() { numfmt --from=iec "$1"; }
bits_of_rate() { numfmt --from=si "$(sed -E 's/bit$//I; s/([kmgt])$/\U\1/' <<<"$1")"; }

lab=lpk$$
work=$(mktemp -d)
trap '"$netlab" down "$lab" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
"$netlab" up -n 2 -r "$rate" "$lab" >/dev/null

iperf_flow() { # Mbit/s received
    local port=$((5201 + RANDOM % 1000))
    "$netlab" exec "$lab" 1 timeout $((secs + 40)) iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
    sleep 0.5
    "$netlab" exec "$lab" 0 timeout $((secs + 40)) iperf3 -c "$("$netlab" addr "$lab" 1)" -p "$port" \
        -t "$secs" -O 2 -J >"$work/iperf.json"
    wait
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 1e6)' \
        "$work/iperf.json" | xargs printf "%.1f\n"
}

linkperf_flow() { # Mbit/s of payload, messages enough for about `secs` seconds at the rate
    local msgs=$(($(bits_of_rate "$rate") * secs / 8 / $(bytes_of "$size")))
    "$netlab" run -q -L "$lab" -t $((secs * 3 + 60)) -- env RCC_TRANSPORT="$transport" \
        "$linkperf" -b "$size" -e "$size" -n "$msgs" |
        awk '$1 ~ /^[0-9]+$/ {printf "%.1f\n", $5 * 8}'
}

lp=() ip=()
for ((r = 1; r <= rounds; r++)); do
    lp+=("$(linkperf_flow)")
    ip+=("$(iperf_flow)")
    echo "round $r: ringcc-linkperf ($transport, $size messages) ${lp[-1]} Mbit/s, iperf3 ${ip[-1]} Mbit/s" >&2
done
lm=$(printf '%s\n' "${lp[@]}" | median)
im=$(printf '%s\n' "${ip[@]}" | median)
echo "link $rate, $rounds rounds of ${secs} s"
echo "ringcc-linkperf ($transport, $size messages): median $lm Mbit/s"
echo "iperf3 (one TCP flow): median $im Mbit/s"
awk -v a="$lm" -v b="$im" 'BEGIN {printf "ratio linkperf / iperf3: %.3f\n", a / b}'
