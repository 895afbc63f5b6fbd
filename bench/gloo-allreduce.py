#!/usr/bin/python3
"""gloo-allreduce: the Gloo side of bench/compare-netlab.sh.

torch.distributed all_reduce (backend "gloo", float32, sum) timed exactly as ringcc-perf times
rcc_allreduce: one untimed checked call, WARMUP untimed calls, ITERS calls timed one by one
with a monotonic clock; per-iteration times combined with a MAX all_reduce; the median of those
slowest-rank times is reported, with algbw = size/time and busbw = algbw * 2(n-1)/n; the last
column, loop(us), is the slowest rank's whole timed loop / ITERS (as ringcc-perf).

Ranks find each other through NETLAB_ROOT_ADDR/NETLAB_PORT, NETLAB_RANK and NETLAB_NRANKS
(set by tools/netlab run), e.g.
    tools/netlab run -n 4 -- env GLOO_SOCKET_IFNAME=lab0 bench/gloo-allreduce.py -b 8 -e 64M
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


def size_arg(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-b", type=size_arg, default=8, help="smallest size in bytes")
    ap.add_argument("-e", type=size_arg, default=64 << 20, help="largest size in bytes")
    ap.add_argument("-f", type=int, default=2, help="size factor between rows")
    ap.add_argument("-n", type=int, default=20, help="timed iterations per row")
    ap.add_argument("-w", type=int, default=3, help="untimed warm-up iterations per row")
    a = ap.parse_args()
    rank, n = int(os.environ["NETLAB_RANK"]), int(os.environ["NETLAB_NRANKS"])
    url = "tcp://%s:%s" % (os.environ["NETLAB_ROOT_ADDR"], os.environ["NETLAB_PORT"])
    dist.init_process_group("gloo", init_method=url, rank=rank, world_size=n)
    torch.set_num_threads(1)
    if rank == 0:
        print("# gloo-allreduce: torch %s all_reduce float32 sum, %d ranks" % (torch.__version__, n))
        print("#       size         count      type   redop    time(us)  algbw(GB/s)  busbw(GB/s)    #wrong    loop(us)")
    total_wrong = 0
    size = a.b
    while size <= a.e:
        count = size // 4
        idx = torch.arange(count, dtype=torch.int64)
        inp = ((idx * 7 + rank * 3) % 17).to(torch.float32)
        want = sum(((idx * 7 + r * 3) % 17).to(torch.float32) for r in range(n))
        t = inp.clone()
        dist.all_reduce(t)
        wrong = torch.tensor([int((t != want).sum())], dtype=torch.int64)
        dist.all_reduce(wrong)
        total_wrong += int(wrong)
        for _ in range(a.w):
            dist.all_reduce(t)
        times = torch.zeros(a.n + 1, dtype=torch.float64)  # per iteration, then the loop's
        loop0 = time.monotonic()
        for k in range(a.n):
            t0 = time.monotonic()
            dist.all_reduce(t)
            times[k] = time.monotonic() - t0
        times[a.n] = time.monotonic() - loop0
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        if rank == 0:
            med = statistics.median(times[:a.n].tolist())
            loop = float(times[a.n]) / a.n
            algbw = count * 4 / med / 1e9
            print("  %10d  %12d  %8s  %6s  %10.2f  %11.3f  %11.3f  %8d  %10.2f"
                  % (count * 4, count, "float32", "sum", med * 1e6, algbw,
                     algbw * 2 * (n - 1) / n, int(wrong), loop * 1e6), flush=True)
        size *= a.f
    dist.destroy_process_group()
    return 1 if total_wrong else 0


if __name__ == "__main__":
    sys.exit(main())
