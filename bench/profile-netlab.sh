#!/usr/bin/env bash
# Where the time of a large allreduce goes on a network lab (the "explain it"
# part of a comparison): a system-wide perf profile and one rank's syscall
# counts during a 4-rank 64 MiB allreduce, and whether more TCP connections
# per ring edge would carry more (iperf3 with 1 and with 4 parallel streams
# per edge, all edges at once).
#   bench/profile-netlab.sh [-n RANKS] [-r RATE] BUILD_DIR > report.md
# Needs root, perf, strace, iperf3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
netlab=$here/../tools/netlab
n=4 rate=10gbit
while getopts "n:r:h" opt; do
    case $opt in
    n) n=$OPTARG ;;
    r) rate=$OPTARG ;;
    *) sed -n '2,8p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
build=$(cd "${1:?usage: $0 [-n RANKS] [-r RATE] BUILD_DIR}" && pwd)
for tool in perf strace iperf3; do
    command -v $tool >/dev/null || { echo "profile-netlab: $tool is not installed" >&2; exit 2; }
done
lab=prof$$ work=$(mktemp -d)
trap '"$netlab" down "$lab"; rm -rf "$work"' EXIT
"$netlab" up -n "$n" -r "$rate" "$lab" >&2
# In place, as bench/compare-netlab.sh runs it; iterations enough that the
# run outlasts the profile's window (60 of 64 MiB: 6 s at 1 GB/s busbw).
perf_cmd=("$build/bench/ringcc-perf" -b 64M -e 64M -n 60 -w 1 -c 0 -i 1)

echo "# Where a 64 MiB allreduce spends its time: $n ranks, links $rate"
echo
echo "Made by \`bench/profile-netlab.sh -n $n -r $rate BUILD_DIR\`."
echo
"$netlab" run -q -L "$lab" -- "${perf_cmd[@]}" >"$work/run.txt" &
sleep 2
perf record -a -g -o "$work/perf.data" sleep 3 >/dev/null 2>&1
wait
echo "busbw during the profile: $(awk '$1 ~ /^[0-9]+$/ {print $7}' "$work/run.txt") GB/s"
echo
echo "## CPU, all processes, by symbol (perf record -a, 3 s)"
echo
echo '```'
perf report -i "$work/perf.data" --no-children --sort comm,sym -g none 2>/dev/null |
    grep -v "^#" | grep -v "^$" | head -25 || true
echo '```'
echo
echo "## One rank's system calls (strace -c -f, rank 1, the whole run)"
echo
cat >"$work/r1.sh" <<'EOS'
#!/bin/sh
if [ "$RCC_RANK" = 1 ]; then exec strace -f -c -o "$STRACE_OUT" "$@"; fi
exec "$@"
EOS
chmod +x "$work/r1.sh"
"$netlab" run -q -L "$lab" -- env STRACE_OUT="$work/strace.txt" "$work/r1.sh" \
    "$build/bench/ringcc-perf" -b 64M -e 64M -n 5 -w 1 -c 0 -i 1 >/dev/null
echo '```'
head -12 "$work/strace.txt" || true
echo '```'
echo
echo "## More connections per ring edge? iperf3, every edge i -> i+1 at once, 5 s"
echo
for streams in 1 4; do
    pids=()
    for ((i = 0; i < n; i++)); do
        "$netlab" exec "$lab" $(((i + 1) % n)) timeout 60 iperf3 -s -1 -p $((5400 + i)) >/dev/null 2>&1 &
    done
    sleep 0.5
    for ((i = 0; i < n; i++)); do
        "$netlab" exec "$lab" "$i" timeout 60 iperf3 -c "$("$netlab" addr "$lab" $(((i + 1) % n)))" \
            -p $((5400 + i)) -P "$streams" -t 5 -J >"$work/ip$i.json" &
        pids+=($!)
    done
    wait
    per_edge=$(for ((i = 0; i < n; i++)); do
        python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 8e9)' "$work/ip$i.json"
    done | awk '{s += $1} END {printf "%.3f", s / NR}')
    echo "- $streams TCP stream(s) per edge: $per_edge GB/s per edge"
done
