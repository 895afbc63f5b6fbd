#!/usr/bin/python3
"""Turns bench/compare-netlab.sh's CSV into a Markdown table and an SVG plot.

    compare_report.py CSV OUT_PREFIX RANKS RATE COMMAND

Medians over the rounds per implementation and size, of the time (median over iterations of the
slowest rank's) and of the loop time (the slowest rank's whole timed loop / iterations, the
throughput figure), each with its busbw; writes OUT_PREFIX.md and OUT_PREFIX.svg (the plot shows
the time's busbw).
Standard library only (no plotting package needed).
"""
import csv
import statistics
import sys
from collections import defaultdict

import plot_busbw  # bench/, beside this script
from plot_busbw import human

IMPLS = ["ringcc", "ompi", "ompi-ring", "gloo"]


def busbw(size, us, nranks):
    """An allreduce's bus bandwidth, GB/s, from its size in bytes and time in us."""
    return size / us / 1e3 * 2 * (nranks - 1) / nranks if us > 0 else 0.0


def load(path, nranks):
    times, bws, link, wrong = defaultdict(list), defaultdict(list), defaultdict(list), 0
    loops, loop_bws = defaultdict(list), defaultdict(list)
    with open(path) as f:
        for row in csv.DictReader(f):
            impl, size = row["impl"], int(row["bytes"])
            if impl.startswith("iperf3"):
                link[impl].append(float(row["busbw_gbs"]))
                continue
            # busbw from the time, not the CSV's rounded column: at 1 Gbit/s its three
            # decimals cannot tell 0.994x from 1.00x.
            t = float(row["time_us"])
            times[impl, size].append(t)
            bws[impl, size].append(busbw(size, t, nranks))
            loop = float(row.get("loop_us") or 0)  # tables before it have none
            if loop > 0:
                loops[impl, size].append(loop)
                loop_bws[impl, size].append(busbw(size, loop, nranks))
            wrong += int(row["wrong"]) if row["wrong"].isdigit() else 0
    med = lambda d: {k: statistics.median(v) for k, v in d.items()}
    return (med(times), med(bws), med(loops), med(loop_bws), med(link), wrong,
            max(len(v) for v in times.values()))


def ratio_to_best(bws, impls, s):
    """ringcc's busbw over the best peer's at size s (nan without a peer)."""
    best = max((bws.get((i, s), 0) for i in impls if i != "ringcc"), default=0)
    return bws.get(("ringcc", s), 0) / best if best > 0 else float("nan")


def table(times, bws, loops, loop_bws, link, impls, sizes, nranks, rate, command, wrong, rounds,
          mode):
    lines = ["# Allreduce on a network lab: %d ranks, links %s" % (nranks, rate), ""]
    lines.append("Made by `%s` (float32 sum, %s; medians over %d rounds run alternately; each "
                 "round's time is the median over its iterations of the slowest rank's time; "
                 "busbw = size/time x 2(n-1)/n; loop is the throughput figure, the slowest "
                 "rank's whole timed loop / iterations, as nccl-tests times, with its busbw). "
                 "Elements wrong, all runs: %d." % (command, mode, rounds, wrong))
    lines.append("")
    single, ring = link.get("iperf3-single"), link.get("iperf3-ring")
    if single:
        lines.append("Link: one iperf3 TCP flow %.4f GB/s; %d simultaneous ring-shaped flows "
                     "%.4f GB/s each." % (single, nranks, ring or 0))
        lines.append("")
    head = "| size |" + "".join(" %s time (us) | %s busbw (GB/s) | %s loop (us) |" % (i, i, i)
                                for i in impls)
    head += " ringcc / best busbw | the same by loop |"
    lines += [head, "|---:|" + "---:|" * (3 * len(impls) + 2)]
    for s in sizes:
        row = "| %s |" % human(s)
        for i in impls:
            if (i, s) in times:
                row += " %.1f | %.4f | %s |" % (times[i, s], bws[i, s],
                                                "%.1f" % loops[i, s] if (i, s) in loops else "-")
            else:
                row += " - | - | - |"
        lines.append(row + " %.2f | %.2f |" % (ratio_to_best(bws, impls, s),
                                               ratio_to_best(loop_bws, impls, s)))
    lines.append("")
    # The figures issue 4's acceptance asks for.
    peers = [i for i in impls if i != "ringcc"]
    notes = []
    if single:
        big = [s for s in sizes if s >= 16 << 20 and ("ringcc", s) in bws]
        if big:
            notes.append("ringcc busbw / single-flow goodput at >= 16 MiB: " + ", ".join(
                "%s %.3f" % (human(s), bws["ringcc", s] / single) for s in big))
    small = min(sizes)
    for p in peers:
        if (p, small) in times and ("ringcc", small) in times:
            notes.append("%s latency, ringcc / %s: %.2f (%.1f us vs %.1f us)" %
                         (human(small), p, times["ringcc", small] / times[p, small],
                          times["ringcc", small], times[p, small]))
    mid = [s for s in sizes if s >= 64 << 10]
    if mid and peers:
        for what, d in (("busbw", bws), ("busbw by loop", loop_bws)):
            if not d:  # a table from before loop times
                continue
            worst = min(mid, key=lambda s: ratio_to_best(d, impls, s))
            notes.append("from 64 KiB up, the lowest ringcc / best-peer %s ratio: %.2f at %s" %
                         (what, ratio_to_best(d, impls, worst), human(worst)))
    lines += ["- " + n for n in notes]
    return "\n".join(lines) + "\n"


def svg(bws, link, impls, sizes, nranks, rate):
    """The busbw plot, drawn by plot_busbw.py (the one plotter) with the link as a line."""
    data = plot_busbw.Data()
    for i in impls:
        data.add(i, {s: bws[i, s] for s in sizes if (i, s) in bws})
    if link.get("iperf3-single"):
        data.links.append(("iperf3, 1 flow", link["iperf3-single"]))
    return plot_busbw.svg(data, "allreduce busbw, %d ranks, links %s" % (nranks, rate), 900, 560)


def main():
    path, prefix, nranks, rate, command = sys.argv[1:6]
    mode = sys.argv[6] if len(sys.argv) > 6 else "out-of-place (Gloo in place)"
    times, bws, loops, loop_bws, link, wrong, rounds = load(path, int(nranks))
    impls = [i for i in IMPLS if any(k[0] == i for k in times)]
    sizes = sorted({k[1] for k in times})
    with open(prefix + ".md", "w") as f:
        f.write(table(times, bws, loops, loop_bws, link, impls, sizes, int(nranks), rate, command,
                      wrong, rounds, mode))
    with open(prefix + ".svg", "w") as f:
        f.write(svg(bws, link, impls, sizes, int(nranks), rate))
    print(open(prefix + ".md").read())


if __name__ == "__main__":
    main()
