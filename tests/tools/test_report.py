#!/usr/bin/env python3
"""ringcc-perf --json/--csv on a 2-rank sweep, and bench/plot_busbw.py drawing them with
the kept comparison tables (bench/results/) and a link line.

Usage: test_report.py RINGCC_RUN RINGCC_PERF SOURCE_ROOT [RINGCC_LINKPERF]
Checks: the JSON parses, holds the metadata and one row per size with the table's
numbers; the CSV has the same rows; '--json -' moves the table to stderr; the SVG parses
as XML and has both axis labels, a legend entry per series and link, and a line per series.
With RINGCC_LINKPERF: its --json/--csv rows equal its table, and the plot takes them too.
compare_report.py turns a made-up comparison CSV into the table and ratios worked out here.
"""
import csv
import json
import os
import pty
import socket
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

run, perf, root = sys.argv[1:4]
linkperf = sys.argv[4] if len(sys.argv) > 4 else None
plot = os.path.join(root, "bench", "plot_busbw.py")
results = os.path.join(root, "bench", "results")
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def job(*extra):
    return subprocess.run([run, "-n", "2", "-t", "60", "-q", perf, "-b", "1K", "-e", "256K",
                           "-f", "16", "-n", "2", "-w", "0"] + list(extra),
                          capture_output=True, text=True, timeout=90)


with tempfile.TemporaryDirectory() as tmp:
    js, cs = os.path.join(tmp, "r.json"), os.path.join(tmp, "r.csv")
    p = job("--json", js, "--csv", cs)
    check(p.returncode == 0, "ringcc-perf --json --csv ran (%d): %s" % (p.returncode, p.stderr))
    table = [line.split() for line in p.stdout.splitlines()
             if line.strip() and not line.startswith("#")]
    doc = json.load(open(js))
    rows = doc["rows"]
    check(doc["tool"] == "ringcc-perf" and doc["meta"]["nranks"] == 2
          and doc["meta"]["collective"] == "allreduce", "JSON metadata")
    check([r["size"] for r in rows] == [1024, 16384, 262144], "JSON rows: one per size")
    check(len(table) == len(rows) and all(
        int(t[0]) == r["size"] and abs(float(t[6]) - r["busbw_GBps"]) <= 0.0015
        for t, r in zip(table, rows)), "JSON rows hold the table's numbers")
    check(all(len(t) == 9 and r["loop_us"] > 0 and abs(float(t[8]) - r["loop_us"]) <= 0.006
              for t, r in zip(table, rows)), "the loop time: last column, in the JSON too")
    check(doc["summary"]["wrong"] == 0 and "RCC_SECRET" not in doc["meta"]["env"],
          "JSON summary; the job secret is left out")
    lines = open(cs).read().splitlines()
    crow = list(csv.DictReader(x for x in lines if not x.startswith("#")))
    check([int(r["size"]) for r in crow] == [r["size"] for r in rows]
          and all(float(c["busbw_GBps"]) == r["busbw_GBps"] for c, r in zip(crow, rows)),
          "CSV rows equal the JSON rows")
    check("# tool: ringcc-perf" in lines and "# nranks: 2" in lines, "CSV metadata lines")

    p = job("--json", "-")
    ok = p.returncode == 0
    try:
        ok = ok and len(json.loads(p.stdout)["rows"]) == 3 and "busbw(GB/s)" in p.stderr
    except ValueError:
        ok = False
    check(ok, "--json -: the JSON alone on stdout, the table on stderr")

    check("\033[K" not in p.stderr, "no progress line into a pipe")
    # One rank with its stderr on a terminal (a pseudo-terminal here): the progress line.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    master, slave = pty.openpty()
    env = dict(os.environ, RCC_RANK="0", RCC_NRANKS="1", RCC_ROOT="127.0.0.1:%d" % port)
    p = subprocess.run([perf, "-b", "1K", "-e", "64K", "-f", "4", "-n", "1", "-w", "0"], env=env,
                       stdout=subprocess.PIPE, stderr=slave, timeout=60)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the terminal's other side is gone: all read
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    check(p.returncode == 0 and b"[4/4] allreduce float32 sum 65536 bytes" in seen
          and seen.endswith(b"\r\033[K"), "a terminal gets the progress line, erased at the end")

    plotted = [js, cs]
    if linkperf:
        lj, lc = os.path.join(tmp, "l.json"), os.path.join(tmp, "l.csv")
        p = subprocess.run([run, "-n", "2", "-t", "60", "-q", linkperf, "-b", "1K", "-e", "1M",
                            "-f", "32", "-n", "4", "-w", "1", "--json", lj, "--csv", lc],
                           capture_output=True, text=True, timeout=90)
        check(p.returncode == 0, "ringcc-linkperf --json --csv ran (%d): %s"
              % (p.returncode, p.stderr))
        table = [line.split() for line in p.stdout.splitlines()
                 if line.strip() and not line.startswith("#")]
        ldoc = json.load(open(lj))
        lrows = ldoc["rows"]
        check(ldoc["tool"] == "ringcc-linkperf" and ldoc["meta"]["transport"] == "tcp"
              and [r["size"] for r in lrows] == [1024, 32768, 1048576]
              and ldoc["summary"]["result"] == "ok", "linkperf JSON: metadata, a row per size")
        check(len(table) == len(lrows) and all(
            int(t[0]) == r["size"] and abs(float(t[4]) - r["MBps"]) <= 0.006
            and abs(r["busbw_GBps"] * 1000 - r["MBps"]) < 1e-3 for t, r in zip(table, lrows)),
            "linkperf JSON rows hold the table's numbers")
        lcrow = list(csv.DictReader(x for x in open(lc).read().splitlines()
                                    if not x.startswith("#")))
        check([int(r["size"]) for r in lcrow] == [r["size"] for r in lrows],
              "linkperf CSV rows equal the JSON rows")
        plotted.append(lj)

    svg = os.path.join(tmp, "plot.svg")
    p = subprocess.run([sys.executable, plot, "-o", svg] + plotted + [
                        os.path.join(results, "netlab-1gbit-4.csv"),
                        os.path.join(results, "netlab-10gbit-4.md"),
                        "-l", "json run", "-l", "csv run"] + (["-l", "link run"] if linkperf else [])
                       + ["--link", "1 Gbit/s line rate=0.125"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, "plot_busbw.py ran: %s" % p.stderr)
    tree = ET.parse(svg)
    ns = "{http://www.w3.org/2000/svg}"
    texts = ["".join(t.itertext()) for t in tree.iter(ns + "text")]
    check(any("message size" in t for t in texts) and any("GB/s" in t and "bandwidth" in t
                                                          for t in texts), "both axis labels")
    for want in ("json run", "csv run", "ringcc", "ompi", "gloo", "1 Gbit/s line rate: 0.125 GB/s",
                 "iperf3-single") + (("link run",) if linkperf else ()):
        check(any(want in t for t in texts), "legend has %r" % want)
    check(any(t.endswith(" MiB") for t in texts) and any(t.endswith(" KiB") for t in texts),
          "size ticks in KiB and MiB")
    series = len(tree.findall(".//%spath" % ns))
    check(series >= 2 + 4 + 4, "a line per series (%d)" % series)
    bad = subprocess.run([sys.executable, plot, os.path.join(root, "README.md")],
                         capture_output=True, text=True)
    check(bad.returncode != 0, "a file with no table is refused")

    # compare_report.py: both figures per size, and ratios worked out here. Rounds 2 and 3 of
    # ringcc are read as medians (64 KiB: time 850, loop 826 us; ompi 836 and 841).
    cmp_csv, prefix = os.path.join(tmp, "cmp.csv"), os.path.join(tmp, "cmp")
    with open(cmp_csv, "w") as f:
        f.write("round,impl,bytes,time_us,busbw_gbs,wrong,loop_us\n"
                "1,iperf3-single,0,0,0.118,0,0\n1,iperf3-ring,0,0,0.117,0,0\n"
                "1,ringcc,65536,850,0.11566,0,826\n2,ringcc,65536,900,0.10923,0,900\n"
                "3,ringcc,65536,800,0.12288,0,800\n1,ompi,65536,836,0.11759,0,841\n")
    p = subprocess.run([sys.executable, os.path.join(root, "bench", "compare_report.py"), cmp_csv,
                        prefix, "4", "1gbit", "cmd", "in-place"], capture_output=True, text=True,
                       timeout=60)
    md = open(prefix + ".md").read() if p.returncode == 0 else p.stderr
    loop_ratio = 841 / 826  # busbw ratio = inverse time ratio
    check("| 64 KiB | 850.0 | 0.1157 | 826.0 | 836.0 | 0.1176 | 841.0 | 0.98 | %.2f |" % loop_ratio
          in md and "busbw by loop ratio: %.2f at 64 KiB" % loop_ratio in md,
          "compare_report.py: a row with both figures and both ratios: %s" % md)

sys.exit(1 if failures else 0)
