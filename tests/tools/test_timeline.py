#!/usr/bin/env python3
"""RCC_TIMELINE on 4 ranks, and tools/ringcc-timeline merging the files.

Usage: test_timeline.py RINGCC_RUN RINGCC_PERF SOURCE_ROOT
  1. An allreduce sweep that takes each algorithm (recursive doubling, Rabenseifner, ring)
     and an alltoall (point-to-point): every rank's file parses as JSON and holds every
     operation, and sends, receives and reductions of its steps; no row holds overlapping
     slices (trace viewers draw those badly).
  2. The merge: one process per rank, every event kept, times from 0; on one host the
     clocks are shared, and the 'ops' alignment (for several hosts) agrees with that.
  3. A crash: rank 1 is killed (SIGKILL) in the middle of a long run; every file still
     parses, and rank 1's holds the operations it had finished.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

run, perf, root = sys.argv[1:4]
merge = [sys.executable, os.path.join(root, "tools", "ringcc-timeline")]
draw = [sys.executable, os.path.join(root, "tools", "ringcc-timeline-svg")]
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def job(tmp, name, *args, wait=True):
    env = dict(os.environ, RCC_TIMELINE=os.path.join(tmp, name + "-%r.json"))
    cmd = [run, "-n", "4", "-t", "120", "-q", perf] + list(args)
    if not wait:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)


def files(tmp, name):
    return [os.path.join(tmp, "%s-%d.json" % (name, r)) for r in range(4)]


def rows_overlap(events):
    """The first pair of X slices on one row that overlap without nesting, or None."""
    rows = {}
    for e in events:
        if e.get("ph") == "X":
            rows.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], e))
    for slices in rows.values():
        slices.sort(key=lambda s: s[0])
        for a, b in zip(slices, slices[1:]):
            if b[0] < a[1] - 0.002:  # printed to the nanosecond
                return a[2], b[2]
    return None


with tempfile.TemporaryDirectory() as tmp:
    # 8 B: rd; 256 KiB: rabenseifner (2^k ranks); 8 MiB: the pipelined ring.
    p = job(tmp, "ar", "-b", "8", "-e", "8M", "-f", "32", "-n", "2", "-w", "1")
    check(p.returncode == 0, "4-rank allreduce sweep with RCC_TIMELINE (%s)" % p.stderr[-300:])
    p = job(tmp, "a2a", "-C", "alltoall", "-b", "64K", "-e", "64K", "-n", "2", "-w", "0")
    check(p.returncode == 0, "4-rank alltoall with RCC_TIMELINE (%s)" % p.stderr[-300:])
    per_rank = {}
    for rank, path in enumerate(files(tmp, "ar")):
        events = json.load(open(path))
        per_rank[rank] = events
        x = [e for e in events if e.get("ph") == "X"]
        names = {e["name"] for e in x}
        ops = [e for e in x if e.get("cat") == "op"]
        algos = {e["args"]["algo"] for e in ops}
        check(all(k in e for e in x for k in ("ts", "dur", "pid", "tid")) and
              all(e["pid"] == rank and e["dur"] >= 0 for e in x),
              "rank %d: every slice has ts, dur >= 0, pid = rank, tid" % rank)
        # 4 sizes x (1 check + 1 warmup + 2 timed + 1 time exchange), plus the summaries.
        check(len(ops) >= 20 and {"rd", "rabenseifner", "ring"} <= algos,
              "rank %d: %d operations, algorithms %s" % (rank, len(ops), sorted(algos)))
        check({"send", "recv", "reduce"} <= names, "rank %d: send, recv and reduce steps" % rank)
        steps = [e for e in x if e["name"] in ("send", "recv")]
        check(all(e["args"]["bytes"] > 0 and 0 <= e["args"].get("to", e["args"].get("from", -1)) < 4
                  for e in steps), "rank %d: each step names its peer and bytes" % rank)
        meta = {e["name"] for e in events if e.get("ph") == "M"}
        check({"process_name", "thread_name"} <= meta, "rank %d: process and row names" % rank)
        check(rows_overlap(events) is None,
              "rank %d: no row holds overlapping slices %s" % (rank, rows_overlap(events) or ""))
    for rank, path in enumerate(files(tmp, "a2a")):
        events = json.load(open(path))
        kinds = {e["name"] for e in events if e.get("cat") == "step"}
        check({"send", "recv"} <= kinds and any(e.get("cat") == "op" and
                                                e["name"].startswith("alltoall") for e in events),
              "rank %d: alltoall with its point-to-point sends and receives" % rank)

    out = os.path.join(tmp, "merged.json")
    p = subprocess.run(merge + ["-o", out] + files(tmp, "ar"), capture_output=True, text=True)
    check(p.returncode == 0, "ringcc-timeline merged the files (%s)" % p.stderr.strip())
    doc = json.load(open(out))
    ev = doc["traceEvents"]
    check(sorted({e["pid"] for e in ev if "pid" in e}) == [0, 1, 2, 3]
          and len(ev) == sum(len(v) for v in per_rank.values()),
          "merged: 4 ranks, every event")
    check(min(e["ts"] for e in ev if "ts" in e) == 0 and doc["otherData"]["clock"] == "same",
          "merged: times from 0, one host's shared clock")
    p = subprocess.run(merge + ["--clock", "ops"] + files(tmp, "ar"), capture_output=True,
                       text=True)
    off = json.loads(p.stdout)["otherData"]["offsets_us"]
    spread = max(off.values()) - min(off.values())
    check(spread < 5000, "--clock ops agrees with the shared clock within %.0f us" % spread)

    svg = os.path.join(tmp, "op.svg")
    ring_op = [e["name"] for e in per_rank[0] if e.get("cat") == "op" and e["args"]["algo"] == "ring"]
    p = subprocess.run(draw + [out, "-o", svg, "--op", ring_op[0]], capture_output=True, text=True)
    texts = ["".join(t.itertext()) for t in ET.parse(svg).iter("{http://www.w3.org/2000/svg}text")]
    check(p.returncode == 0 and all(any(t.startswith("rank %d (" % r) for t in texts)
                                    for r in range(4)) and "send 0" in texts and "recv 0" in texts,
          "ringcc-timeline-svg draws a ring allreduce with every rank's rows")

    p = subprocess.run(merge + ["--summary"] + files(tmp, "ar"), capture_output=True, text=True)
    table = [line.split() for line in p.stdout.splitlines()[1:]]
    check(p.returncode == 0 and [int(t[0]) for t in table] == [0, 1, 2, 3] and
          all(float(t[6]) > 8 and float(t[7]) > 8 for t in table),
          "--summary: a line per rank, with the 8 MiB allreduces' bytes sent and received")

    # A file that cannot be made: a warning, and the job runs without a timeline.
    p = subprocess.run([run, "-n", "2", "-t", "60", perf, "-b", "1K", "-e", "1K", "-n", "1"],
                       env=dict(os.environ, RCC_TIMELINE=os.path.join(tmp, "no", "such", "x.json")),
                       capture_output=True, text=True, timeout=90)
    check(p.returncode == 0 and "RCC_TIMELINE: cannot write" in p.stderr,
          "an unwritable RCC_TIMELINE path warns and the job runs")

    # A crash in the middle of a run.
    proc = job(tmp, "crash", "-b", "1M", "-e", "1M", "-n", "100000", "-w", "0", wait=False)
    victim, deadline = None, time.time() + 60
    while victim is None and time.time() < deadline:
        time.sleep(0.3)
        try:
            events = json.load(open(files(tmp, "crash")[1]))
        except (OSError, ValueError):
            continue  # not made yet
        if sum(e.get("cat") == "op" for e in events) >= 5:
            name = [e for e in events if e.get("name") == "process_name"][0]["args"]["name"]
            victim = int(name.rsplit("pid ", 1)[1].rstrip(")"))
    check(victim is not None, "the crash run got going")
    if victim:
        os.kill(victim, signal.SIGKILL)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
    check(proc.returncode != 0, "the job failed when rank 1 was killed")
    for rank, path in enumerate(files(tmp, "crash")):
        try:
            events = json.load(open(path))
            ok = sum(e.get("cat") == "op" for e in events) >= (5 if rank == 1 else 1)
        except ValueError as e:
            ok = False
            print(e)
        check(ok, "after the crash rank %d's file parses and holds its operations" % rank)

sys.exit(1 if failures else 0)
