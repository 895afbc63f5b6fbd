#!/usr/bin/python3
"""Turns bench/compare-netlab.sh's CSV into a Markdown table and an SVG plot.

    compare_report.py CSV OUT_PREFIX RANKS RATE COMMAND

Medians over the rounds per implementation and size; writes OUT_PREFIX.md and OUT_PREFIX.svg.
Standard library only (no plotting package needed).
"""
import csv
import math
import statistics
import sys
from collections import defaultdict

IMPLS = ["ringcc", "ompi", "ompi-ring", "gloo"]
COLORS = {"ringcc": "#d62728", "ompi": "#1f77b4", "ompi-ring": "#17becf", "gloo": "#2ca02c"}


def human(nbytes):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= div and nbytes % div == 0:
            return "%d %s" % (nbytes // div, unit)
    return "%d B" % nbytes


def load(path):
    times, bws, link, wrong = defaultdict(list), defaultdict(list), defaultdict(list), 0
    with open(path) as f:
        for row in csv.DictReader(f):
            impl, size = row["impl"], int(row["bytes"])
            if impl.startswith("iperf3"):
                link[impl].append(float(row["busbw_gbs"]))
                continue
            times[impl, size].append(float(row["time_us"]))
            bws[impl, size].append(float(row["busbw_gbs"]))
            wrong += int(row["wrong"]) if row["wrong"].isdigit() else 0
    med = lambda d: {k: statistics.median(v) for k, v in d.items()}
    return med(times), med(bws), med(link), wrong, max(len(v) for v in times.values())


def table(times, bws, link, impls, sizes, nranks, rate, command, wrong, rounds):
    lines = ["# Allreduce on a network lab: %d ranks, links %s" % (nranks, rate), ""]
    lines.append("Made by `%s` (float32 sum; medians over %d rounds run alternately; each "
                 "round's figure is the median over its iterations of the slowest rank's time; "
                 "busbw = size/time x 2(n-1)/n). Elements wrong, all runs: %d." %
                 (command, rounds, wrong))
    lines.append("")
    single, ring = link.get("iperf3-single"), link.get("iperf3-ring")
    if single:
        lines.append("Link: one iperf3 TCP flow %.4f GB/s; %d simultaneous ring-shaped flows "
                     "%.4f GB/s each." % (single, nranks, ring or 0))
        lines.append("")
    head = "| size |" + "".join(" %s time (us) | %s busbw (GB/s) |" % (i, i) for i in impls)
    head += " ringcc / best busbw |"
    lines += [head, "|---:|" + "---:|" * (2 * len(impls) + 1)]
    for s in sizes:
        row = "| %s |" % human(s)
        best = max((bws.get((i, s), 0) for i in impls if i != "ringcc"), default=0)
        for i in impls:
            if (i, s) in times:
                row += " %.1f | %.4f |" % (times[i, s], bws[i, s])
            else:
                row += " - | - |"
        ratio = bws.get(("ringcc", s), 0) / best if best > 0 else float("nan")
        lines.append(row + " %.2f |" % ratio)
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
        worst = min(mid, key=lambda s: bws.get(("ringcc", s), 0) /
                    max(bws.get((p, s), 1e-12) for p in peers))
        best = max(bws.get((p, worst), 0) for p in peers)
        notes.append("from 64 KiB up, the lowest ringcc / best-peer busbw ratio: %.2f at %s" %
                     (bws.get(("ringcc", worst), 0) / best if best else float("nan"),
                      human(worst)))
    lines += ["- " + n for n in notes]
    return "\n".join(lines) + "\n"


def svg(bws, link, impls, sizes, nranks, rate):
    W, H, L, R, T, B = 820, 500, 70, 150, 40, 50
    xs = [math.log2(s) for s in sizes]
    vals = [v for v in bws.values() if v > 0] + [v for v in link.values() if v > 0]
    ylo = math.floor(math.log10(min(vals))) if vals else -4
    yhi = math.ceil(math.log10(max(vals))) if vals else 1
    x = lambda s: L + (math.log2(s) - xs[0]) / max(xs[-1] - xs[0], 1) * (W - L - R)
    y = lambda v: H - B - (math.log10(v) - ylo) / max(yhi - ylo, 1) * (H - T - B)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="15">allreduce busbw, %d ranks, links %s</text>'
           % (L, nranks, rate)]
    for d in range(ylo, yhi + 1):
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' %
                   (L, W - R, y(10 ** d), y(10 ** d)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (L - 6, y(10 ** d) + 4,
                                                                           10 ** d))
    for s in sizes:
        if int(math.log2(s)) % 3 == 0:
            out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#ddd"/>' %
                       (x(s), x(s), T, H - B))
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' %
                       (x(s), H - B + 16, human(s)))
    out.append('<text x="%d" y="%d" text-anchor="middle">message size (log)</text>' %
               ((L + W - R) // 2, H - 12))
    out.append('<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">'
               'busbw, GB/s (log)</text>' % ((T + H - B) // 2, (T + H - B) // 2))
    if link.get("iperf3-single"):
        v = link["iperf3-single"]
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#888" '
                   'stroke-dasharray="6,4"/>' % (L, W - R, y(v), y(v)))
        out.append('<text x="%d" y="%.1f" fill="#888">iperf3 1 flow</text>' % (W - R + 6, y(v) + 4))
    for k, i in enumerate(impls):
        pts = [(x(s), y(bws[i, s])) for s in sizes if bws.get((i, s), 0) > 0]
        if not pts:
            continue
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' %
                   (COLORS.get(i, "black"), " ".join("%.1f,%.1f" % p for p in pts)))
        ly = T + 20 + 18 * k
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/>' %
                   (W - R + 6, W - R + 30, ly + 20, ly + 20, COLORS.get(i, "black")))
        out.append('<text x="%d" y="%d">%s</text>' % (W - R + 36, ly + 24, i))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    path, prefix, nranks, rate, command = sys.argv[1:6]
    times, bws, link, wrong, rounds = load(path)
    impls = [i for i in IMPLS if any(k[0] == i for k in times)]
    sizes = sorted({k[1] for k in times})
    with open(prefix + ".md", "w") as f:
        f.write(table(times, bws, link, impls, sizes, int(nranks), rate, command, wrong, rounds))
    with open(prefix + ".svg", "w") as f:
        f.write(svg(bws, link, impls, sizes, int(nranks), rate))
    print(open(prefix + ".md").read())


if __name__ == "__main__":
    main()
