#!/usr/bin/env python3
"""Draw bus bandwidth against message size, log-log, as an SVG a browser opens.

    bench/plot_busbw.py -o plot.svg ringcc.json ompi.csv bench/results/netlab-1gbit-4.csv \
        --link "1 Gbit/s link=0.125" --title "allreduce, 4 ranks"

Each input adds one or more series, by what it holds:
  - ringcc-perf --json or --csv output (bench/report.h): one series, named by --label or
    by its metadata (impl, collective, ranks);
  - bench/compare-netlab.sh's CSV (round,impl,bytes,time_us,busbw_gbs,...): one series per
    implementation, the median over the rounds; its iperf3 rows become link lines;
  - compare_report.py's Markdown table (bench/results/*.md): one series per "X busbw (GB/s)"
    column, and its iperf3 figure as a link line.
--link "LABEL=GBPS" adds a horizontal line (the link limit). Points with no size or no
bandwidth (count 0 rows, 0.000 at small sizes) have no place on log axes and are left out.
Standard library only.
"""
import argparse
import csv
import json
import math
import re
import statistics
import sys
from xml.sax.saxutils import escape

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
          "#17becf", "#7f7f7f", "#bcbd22"]
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def human(nbytes):
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if nbytes >= UNITS[unit] and nbytes % UNITS[unit] == 0:
            return "%d %s" % (nbytes // UNITS[unit], unit)
    return "%d B" % nbytes


class Data:
    """What the inputs hold: series {label: {size: busbw}} and link lines [(label, GB/s)]."""

    def __init__(self):
        self.series = {}
        self.links = []

    def add(self, label, points):
        base, n = label, 2
        while label in self.series:  # two files of one implementation stay apart
            label, n = "%s (%d)" % (base, n), n + 1
        self.series[label] = points


def report_label(meta, path):
    parts = [meta.get("impl", "ringcc"), meta.get("collective", "")]
    if meta.get("nranks"):
        parts.append("%s ranks" % meta["nranks"])
    return " ".join(p for p in parts if p) or path


def load_json(path, label, data):
    with open(path) as f:
        doc = json.load(f)
    points = {}
    for row in doc.get("rows", []):
        points[int(row["size"])] = row.get("busbw_GBps")
    data.add(label or report_label(doc.get("meta", {}), path), points)


def load_csv(path, label, data):
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    meta = {}
    for line in lines:
        m = re.match(r"# ([A-Za-z_]+): (.*)$", line)
        if m:
            meta[m.group(1)] = m.group(2)
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    if rows and "busbw_GBps" in rows[0]:  # ringcc-perf --csv
        data.add(label or report_label(meta, path),
                 {int(r["size"]): float(r["busbw_GBps"]) for r in rows})
        return
    if not rows or "impl" not in rows[0] or "busbw_gbs" not in rows[0]:
        sys.exit("%s: neither ringcc-perf --csv output nor a compare-netlab.sh table" % path)
    per_impl = {}
    for r in rows:
        per_impl.setdefault(r["impl"], {}).setdefault(int(r["bytes"]), []).append(
            float(r["busbw_gbs"]))
    for impl, sizes in per_impl.items():
        med = {size: statistics.median(v) for size, v in sizes.items()}
        if impl.startswith("iperf3"):  # a link measurement, not a size sweep
            data.links.append(("%s (%s)" % (impl, label or path), max(med.values())))
        else:
            data.add(impl if not label else "%s %s" % (label, impl), med)


def parse_size(text):
    m = re.match(r"\s*(\d+)\s*(B|KiB|MiB|GiB|TiB)\s*$", text)
    return int(m.group(1)) * UNITS[m.group(2)] if m else None


def load_markdown(path, label, data):
    with open(path) as f:
        lines = f.read().splitlines()
    header = None
    for line in lines:
        m = re.search(r"one iperf3 TCP flow ([0-9.]+) GB/s", line)
        if m:
            data.links.append(("iperf3 single flow (%s)" % (label or path), float(m.group(1))))
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|"):
            continue
        if header is None and cells and cells[0] == "size":
            header = cells
            columns = {i: c[:-len(" busbw (GB/s)")] for i, c in enumerate(cells)
                       if c.endswith(" busbw (GB/s)")}
            series = {name: {} for name in columns.values()}
            continue
        if header and len(cells) == len(header):
            size = parse_size(cells[0])
            if size is None:
                continue
            for i, name in columns.items():
                try:
                    series[name][size] = float(cells[i])
                except ValueError:
                    pass
    if header is None:
        sys.exit("%s: no table with a 'size' column" % path)
    for name, points in series.items():
        data.add(name if not label else "%s %s" % (label, name), points)


def load(path, label, data):
    if path.endswith(".json"):
        load_json(path, label, data)
    elif path.endswith(".md"):
        load_markdown(path, label, data)
    else:
        load_csv(path, label, data)


def log_ticks(lo, hi):
    """1-2-5 ticks covering [lo, hi] on a log axis."""
    ticks = []
    e = math.floor(math.log10(lo))
    while 10 ** e <= hi * 1.0001:
        for m in (1, 2, 5):
            v = m * 10 ** e
            if lo * 0.9999 <= v <= hi * 1.0001:
                ticks.append(v)
        e += 1
    return ticks


def fmt_gbps(v):
    return ("%.4f" % v).rstrip("0").rstrip(".") if v < 1 else "%g" % v


def svg(data, title, width, height):
    pts = [(s, b) for p in data.series.values() for s, b in p.items()
           if s and s > 0 and b and b > 0]
    if not pts:
        sys.exit("no points with a size and a bandwidth above 0 to plot")
    xs = [s for s, _ in pts]
    ys = [b for _, b in pts] + [v for _, v in data.links if v > 0]
    x0, x1 = math.log2(min(xs)), math.log2(max(xs))
    if x1 - x0 < 1:
        x0, x1 = x0 - 1, x1 + 1
    y0 = math.floor(math.log10(min(ys)) * 2) / 2  # half decades: room above and below
    y1 = math.ceil(math.log10(max(ys)) * 2) / 2
    if y1 - y0 < 1:
        y0, y1 = y0 - 0.5, y1 + 0.5
    left, right, top, bottom = 90, 30, 50, 70
    pw, ph = width - left - right, height - top - bottom

    def px(size):
        return left + (math.log2(size) - x0) / (x1 - x0) * pw

    def py(bw):
        return top + (y1 - math.log10(bw)) / (y1 - y0) * ph

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">'
           % (width, height, width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="28" text-anchor="middle" font-size="16" font-weight="bold">%s</text>'
           % (left + pw // 2, escape(title))]
    # Grid and ticks: every power of 4 bytes, of 16 on wide ranges.
    step = 2 if x1 - x0 <= 28 else 4
    e = math.ceil(x0)
    while e <= x1:
        if e % step == 0:
            x = px(2 ** e)
            out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>'
                       % (x, top, x, top + ph))
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>'
                       % (x, top + ph + 20, human(2 ** e)))
        e += 1
    for v in log_ticks(10 ** y0, 10 ** y1):
        y = py(v)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>'
                   % (left, y, left + pw, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>'
                   % (left - 8, y + 4, fmt_gbps(v)))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="black"/>'
               % (left, top, pw, ph))
    out.append('<text x="%d" y="%d" text-anchor="middle">message size (bytes, log scale)</text>'
               % (left + pw // 2, height - 22))
    out.append('<text transform="translate(24,%d) rotate(-90)" text-anchor="middle">'
               'bus bandwidth (GB/s, log scale)</text>' % (top + ph // 2))
    legend = []
    for i, (label, value) in enumerate(data.links):
        y = py(value)
        color = "#555" if i == 0 else COLORS[(len(data.series) + i) % len(COLORS)]
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="1.5" '
                   'stroke-dasharray="6,4"/>' % (left, y, left + pw, y, color))
        legend.append(("%s: %s GB/s" % (label, fmt_gbps(value)), color, True))
    for i, (label, points) in enumerate(data.series.items()):
        color = COLORS[i % len(COLORS)]
        good = sorted((s, b) for s, b in points.items() if s and s > 0 and b and b > 0)
        if not good:
            continue
        path = " ".join("%s%.1f,%.1f" % ("M" if k == 0 else "L", px(s), py(b))
                        for k, (s, b) in enumerate(good))
        out.append('<path d="%s" fill="none" stroke="%s" stroke-width="2"/>' % (path, color))
        for s, b in good:
            out.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s, %s GB/s'
                       '</title></circle>' % (px(s), py(b), color, escape(label), human(s),
                                              fmt_gbps(b)))
        legend.append((label, color, False))
    # Legend: bottom right inside the plot, where large sizes at low bandwidth would be
    # (the corner curves rarely reach).
    lw = 70 + 7 * max(len(t) for t, _, _ in legend)
    lh = 8 + 20 * len(legend)
    lx, ly = left + pw - lw - 10, top + ph - lh - 10
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="white" fill-opacity="0.9" '
               'stroke="#999"/>' % (lx, ly, lw, lh))
    for k, (text, color, dashed) in enumerate(legend):
        y = ly + 14 + 20 * k
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>'
                   % (lx + 8, y, lx + 32, y, color,
                      ' stroke-dasharray="6,4"' if dashed else ""))
        out.append('<text x="%d" y="%d">%s</text>' % (lx + 40, y + 4, escape(text)))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="+", metavar="FILE",
                    help="ringcc-perf --json/--csv output, compare-netlab CSV or Markdown")
    ap.add_argument("-o", "--output", default="-", help="the SVG file (default: stdout)")
    ap.add_argument("-l", "--label", action="append", default=[],
                    help="name of the series of the n-th input (repeat, in input order)")
    ap.add_argument("--link", action="append", default=[], metavar="LABEL=GBPS",
                    help="a horizontal line at GBPS GB/s, e.g. '10 Gbit/s link=1.25'")
    ap.add_argument("--title", default="Bus bandwidth against message size")
    ap.add_argument("--width", type=int, default=900)
    ap.add_argument("--height", type=int, default=560)
    args = ap.parse_args()
    data = Data()
    for i, path in enumerate(args.inputs):
        load(path, args.label[i] if i < len(args.label) else None, data)
    for spec in args.link:
        label, sep, value = spec.rpartition("=")
        try:
            data.links.append((label if sep else "link limit", float(value)))
        except ValueError:
            ap.error("--link %r: expected LABEL=GBPS, e.g. '1 Gbit/s link=0.125'" % spec)
    text = svg(data, args.title, args.width, args.height)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
