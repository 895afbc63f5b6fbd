#!/usr/bin/env bash
# ringcc against itself under different settings, on one network lab, in
# one run: how RCC_* defaults are chosen by measurement.
#
#   bench/ab-netlab.sh [-n RANKS] [-r RATE] [-R ROUNDS] [-b MIN] [-e MAX] [-C COLL]
#                      [-i ITERS] [-I 0|1] BUILD_DIR SETTING...
#
# Each SETTING is a space-separated list of environment assignments given to
# every rank ("RCC_NSOCKS=2", "RCC_NSOCKS=4 RCC_SLOTS=8"; "-" for none). One
# lab (tools/netlab: RANKS namespaces, links shaped to RATE, "none" for
# unshaped) runs ringcc-perf -C COLL from MIN to MAX bytes (factor 2, ITERS
# timed iterations) once per setting per round, the settings alternating, so
# that the machine's noise falls on all of them alike. Prints a table: per
# size, each setting's median busbw (GB/s), time (us) and loop time (us, the
# throughput figure) over the rounds and its speed relative to the first
# setting's; every rank's results are
# checked (a wrong element fails the run). -I 1 runs in place (ringcc-perf -i 1,
# as bench/compare-netlab.sh does by default). Defaults: -n 4 -r none -R 3 -b 16M
# -e 64M -C allreduce -i 5 -I 0.
# Needs root (netlab).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
netlab=$here/../tools/netlab
n=4 rate=none rounds=3 min=16M max=64M coll=allreduce iters=5 inplace=0
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while getopts "n:r:R:b:e:C:i:I:h" opt; do
    case $opt in
    n) n=$OPTARG ;;
    r) rate=$OPTARG ;;
    R) rounds=$OPTARG ;;
    b) min=$OPTARG ;;
    e) max=$OPTARG ;;
    C) coll=$OPTARG ;;
    i) iters=$OPTARG ;;
    I) inplace=$OPTARG ;;
    h) usage 0 ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[[ $# -ge 2 ]] || usage
build=$(cd "$1" && pwd)
shift
perf=$build/bench/ringcc-perf
[[ -x $perf ]] || { echo "ab-netlab: $perf is not built" >&2; exit 2; }
"$netlab" check >/dev/null || exit $?

lab=ab$$
work=$(mktemp -d)
trap '"$netlab" down "$lab" >/dev/null 2>&1; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
"$netlab" up -n "$n" -r "$rate" "$lab" >&2

for ((round = 1; round <= rounds; round++)); do
    for ((s = 1; s <= $#; s++)); do
        setting=${!s}
        [[ $setting == - ]] && setting=""
        echo "ab-netlab: round $round/$rounds, setting $s: ${setting:-(defaults)}" >&2
        # shellcheck disable=SC2086 # the setting's assignments are words on purpose
        "$netlab" run -q -L "$lab" -t 900 -- env $setting "$perf" -C "$coll" -b "$min" -e "$max" \
            -f 2 -n "$iters" -w 1 -i "$inplace" >"$work/r$round-s$s.out"
    done
done

python3 - "$work" "$rounds" "$@" <<'EOF'
import re, statistics, sys
work, rounds, settings = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = {}  # (setting, size) -> [(time us, busbw GB/s, loop us) per round]
for r in range(1, rounds + 1):
    for s in range(1, len(settings) + 1):
        for line in open(f"{work}/r{r}-s{s}.out"):
            f = line.split()
            if len(f) >= 8 and re.fullmatch(r"\d+", f[0]) and re.fullmatch(r"\d+", f[1]):
                if f[7] != "0":
                    sys.exit(f"ab-netlab: wrong results at {f[0]} bytes, setting {settings[s-1]}")
                runs.setdefault((s, int(f[0])), []).append((float(f[4]), float(f[6]), float(f[8])))
sizes = sorted({size for (_, size) in runs})
names = [s if s != "-" else "(defaults)" for s in settings]
print("| size | " + " | ".join(names) + " |")
print("|---:|" + "---:|" * len(names))
med = lambda s, size, k: statistics.median(x[k] for x in runs[(s, size)])
for size in sizes:
    base, lbase = med(1, size, 0), med(1, size, 2)
    cells = []
    for s in range(1, len(settings) + 1):
        t, bw, loop = med(s, size, 0), med(s, size, 1), med(s, size, 2)
        cells.append(f"{bw:.3f} / {t:.1f}" + ("" if s == 1 else f" ({base / t:.2f}x)") +
                     f"; loop {loop:.1f}" + ("" if s == 1 else f" ({lbase / loop:.2f}x)"))
    print(f"| {size} | " + " | ".join(cells) + " |")
print(f"\nbusbw GB/s / time us, medians of {rounds} rounds; (ratio): the first setting's "
      "time over this one's (>1: faster); loop: ringcc-perf's loop(us), the slowest rank's "
      "whole timed loop / iterations (throughput), and its ratio.")
EOF
