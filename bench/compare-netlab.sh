#!/usr/bin/env bash
# ringcc against Open MPI and Gloo, on one network lab, in one run.
#
#   bench/compare-netlab.sh [-n RANKS] [-r RATE] [-R ROUNDS] [-b MIN] [-e MAX] [-I 0|1]
#                           [-o DIR] BUILD_DIR
#
# Makes one lab (tools/netlab: RANKS namespaces on a bridge, links shaped to
# RATE both ways; "none" leaves them unshaped), then measures on it:
#   - the link: one iperf3 TCP flow rank 0 -> rank 1 (single-flow goodput), and
#     RANKS simultaneous ring-shaped flows rank i -> i+1 (goodput per flow);
#   - a float32 sum allreduce from MIN to MAX bytes (factor 2) by
#       ringcc         build/bench/ringcc-perf (default library parameters)
#       ompi           Open MPI's MPI_Allreduce, default algorithm selection
#       ompi-ring      the same, ring forced (coll_tuned_allreduce_algorithm 4)
#       gloo           torch.distributed all_reduce, backend gloo
#     all timed the same way (median over iterations of the slowest rank's
#     time; busbw = size/time * 2(n-1)/n) and checked against exact sums;
#     beside it the throughput figure, loop: the slowest rank's whole timed
#     loop / iterations (as nccl-tests times), and its busbw.
#   -I 1 (the default) runs ringcc and Open MPI in place (the result over the
#     input: MPI_IN_PLACE, ringcc-perf -i 1), as torch's all_reduce, and so
#     Gloo, always runs and as frameworks call it; -I 0 gives ringcc and Open
#     MPI a separate output buffer (Gloo stays in place). Where the CPU is the
#     limit, out of place costs memory traffic (bench/results/README.md).
# ROUNDS rounds alternate the four; the table gives each one's median per
# size. Open MPI runs with mpi_yield_when_idle 1: its ranks otherwise spin
# without yielding, and with more ranks than cores an 8-byte allreduce then
# takes milliseconds (measured here: 8-11 ms).
# Writes DIR/netlab-RATE-RANKS.{md,csv,svg} (default DIR: bench/results).
# Progress goes to stderr, with the share of CPU time the hypervisor took
# (steal, /proc/stat) while each implementation ran: a round that jumps for
# one of them and shows steal there is the host's, not the library's.
# Defaults: -n 4 -r 1gbit -R 3 -b 8 -e 64M.
# Needs root, iperf3, openmpi-bin + libopenmpi-dev (BUILD_DIR/bench/mpi-allreduce
# is built when MPI is found) and python3-torch; a missing peer is skipped
# with a note.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
netlab=$here/../tools/netlab
n=4 rate=1gbit rounds=3 min=8 max=64M inplace=1 outdir=$here/results
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while getopts "n:r:R:b:e:I:o:h" opt; do
    case $opt in
    n) n=$OPTARG ;;
    r) rate=$OPTARG ;;
    R) rounds=$OPTARG ;;
    b) min=$OPTARG ;;
    e) max=$OPTARG ;;
    I) inplace=$OPTARG ;;
    o) outdir=$OPTARG ;;
    h) usage 0 ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[[ $# -eq 1 ]] || usage
[[ $inplace == 0 || $inplace == 1 ]] || { echo "compare-netlab: -I takes 0 or 1, not '$inplace'" >&2; exit 2; }
build=$(cd "$1" && pwd)
perf=$build/bench/ringcc-perf
mpibench=$build/bench/mpi-allreduce
[[ -x $perf ]] || { echo "compare-netlab: $perf is not built" >&2; exit 2; }
"$netlab" check >/dev/null || exit $?
command -v iperf3 >/dev/null || { echo "compare-netlab: iperf3 is not installed" >&2; exit 2; }
python=/usr/bin/python3 # Debian's, which has python3-torch

peers=(ringcc)
if [[ -x $mpibench ]] && command -v mpirun >/dev/null; then
    peers+=(ompi ompi-ring)
else
    echo "compare-netlab: no Open MPI (openmpi-bin, libopenmpi-dev, then rebuild): skipped" >&2
fi
if $python -c 'import torch.distributed' 2>/dev/null; then
    peers+=(gloo)
else
    echo "compare-netlab: no torch for $python (python3-torch): Gloo skipped" >&2
fi

mkdir -p "$outdir"
tag=netlab-$rate-$n
csv=$outdir/$tag.csv
lab=cmp$$
work=$(mktemp -d)
trap '"$netlab" down "$lab"; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
"$netlab" up -n "$n" -r "$rate" "$lab" >&2

# Small sizes get many iterations (latency medians), large ones few (a
# 64 MiB allreduce takes about a second at 1 Gbit/s).
to_bytes() {
    local v=${1^^}
    case $v in
    *K) echo $((${v%K} << 10)) ;;
    *M) echo $((${v%M} << 20)) ;;
    *G) echo $((${v%G} << 30)) ;;
    *) echo $((v)) ;;
    esac
}
minb=$(to_bytes "$min") maxb=$(to_bytes "$max") split=$((256 << 10))
ranges=()
[[ $minb -le $split ]] && ranges+=(small)
[[ $maxb -gt $split ]] && ranges+=(large)
small_args=(-b "$minb" -e "$((maxb < split ? maxb : split))" -f 2 -n 100 -w 10)
large_args=(-b "$((minb > split ? minb : 2 * split))" -e "$maxb" -f 2 -n 5 -w 1)
mode_args=(-i "$inplace") # ringcc-perf and mpi-allreduce; gloo-allreduce.py is in place

hosts=""
for ((i = 0; i < n; i++)); do hosts+="$("$netlab" addr "$lab" "$i"):1,"; done
hosts=${hosts%,}
mpi_common=(mpirun --allow-run-as-root -np "$n" --host "$hosts"
    --mca plm_rsh_agent "$netlab rsh" --mca btl tcp,self
    --mca btl_tcp_if_include lab0 --mca oob_tcp_if_include lab0 --mca mpi_yield_when_idle 1)

run_impl() { # IMPL ARGS... -> the benchmark's table on stdout
    local impl=$1
    shift
    case $impl in
    ringcc) "$netlab" run -q -L "$lab" -t 900 -- "$perf" "$@" ;;
    ompi) "$netlab" exec "$lab" 0 timeout 900 "${mpi_common[@]}" "$mpibench" "$@" ;;
    ompi-ring)
        "$netlab" exec "$lab" 0 timeout 900 "${mpi_common[@]}" --mca coll_tuned_use_dynamic_rules 1 \
            --mca coll_tuned_allreduce_algorithm 4 "$mpibench" "$@"
        ;;
    gloo) "$netlab" run -q -L "$lab" -t 900 -- env GLOO_SOCKET_IFNAME=lab0 $python "$here/gloo-allreduce.py" "$@" ;;
    esac
}

# "STEAL TOTAL": the CPU time the hypervisor took from this VM and all CPU
# time, in ticks since boot (/proc/stat; 0 0 where there is none). Rounds in
# which the host took CPU are where one implementation's figure jumps.
cpu_ticks() {
    awk '$1 == "cpu" {t = 0; for (i = 2; i <= 9; i++) t += $i; print $9 + 0, t; exit}' \
        /proc/stat 2>/dev/null || echo "0 0"
}

iperf_flows() { # FLOWS... as "from:to" -> mean goodput per flow, GB/s
    local pids=() files=() f base=$((5201 + RANDOM % 1000)) k=0
    for flow in "$@"; do
        local to=${flow#*:}
        "$netlab" exec "$lab" "$to" timeout 60 iperf3 -s -1 -p $((base + k)) >/dev/null 2>&1 &
        pids+=($!)
        k=$((k + 1))
    done
    sleep 0.5
    k=0
    for flow in "$@"; do
        local from=${flow%:*} to=${flow#*:}
        f=$work/iperf$k.json
        files+=("$f")
        "$netlab" exec "$lab" "$from" timeout 60 iperf3 -c "$("$netlab" addr "$lab" "$to")" -p $((base + k)) \
            -t 5 -J >"$f" &
        k=$((k + 1))
    done
    wait
    for f in "${files[@]}"; do
        $python -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 8e9)' "$f"
    done | awk '{s += $1} END {printf "%.4f\n", s / NR}'
}

echo "round,impl,bytes,time_us,busbw_gbs,wrong,loop_us" >"$csv"
single=() ring=()
for ((r = 1; r <= rounds; r++)); do
    single+=("$(iperf_flows 0:1)")
    ringflows=()
    for ((i = 0; i < n; i++)); do ringflows+=("$i:$(((i + 1) % n))"); done
    ring+=("$(iperf_flows "${ringflows[@]}")")
    echo "round $r: iperf3 single flow ${single[-1]} GB/s, ring flows ${ring[-1]} GB/s each" >&2
    echo "$r,iperf3-single,0,0,${single[-1]},0,0" >>"$csv"
    echo "$r,iperf3-ring,0,0,${ring[-1]},0,0" >>"$csv"
    for impl in "${peers[@]}"; do
        read -r steal0 total0 < <(cpu_ticks)
        for range in "${ranges[@]}"; do
            if [[ $range == small ]]; then args=("${small_args[@]}"); else args=("${large_args[@]}"); fi
            [[ $impl == gloo ]] || args+=("${mode_args[@]}")
            out=$work/$impl.$r.$range.txt
            if ! run_impl "$impl" "${args[@]}" >"$out" 2>&1; then
                # Open MPI's launch over its out-of-band TCP now and then
                # fails to connect here; one retry, said aloud.
                echo "compare-netlab: $impl failed in round $r, retrying once; its output:" >&2
                tail -n 8 "$out" >&2
                if ! run_impl "$impl" "${args[@]}" >"$out" 2>&1; then
                    echo "compare-netlab: $impl failed again; its output:" >&2
                    tail -n 20 "$out" >&2
                    exit 1
                fi
            fi
            awk -v r="$r" -v impl="$impl" '$1 ~ /^[0-9]+$/ && NF >= 9 {print r "," impl "," $1 "," $5 "," $7 "," $8 "," $9}' "$out" >>"$csv"
        done
        read -r steal1 total1 < <(cpu_ticks)
        echo "round $r: $impl done (host steal $(awk -v s=$((steal1 - steal0)) \
            -v t=$((total1 - total0)) 'BEGIN {printf "%.1f", (t > 0 ? 100 * s / t : 0)}')% of CPU time)" >&2
    done
done

cmdline="bench/compare-netlab.sh -n $n -r $rate -R $rounds -b $min -e $max -I $inplace BUILD_DIR"
mode=in-place
[[ $inplace == 1 ]] || mode="out-of-place (Gloo in place)"
$python "$here/compare_report.py" "$csv" "$outdir/$tag" "$n" "$rate" "$cmdline" "$mode"
echo "compare-netlab: wrote $outdir/$tag.md, .csv, .svg" >&2
