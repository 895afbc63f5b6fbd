#!/usr/bin/env python3
"""Every torch.distributed collective that PyTorch maps to NCCL, checked against expected values.

    torch_collectives.py [--nprocs N] [--backend nccl|gloo] [--require-shim]

N processes (torch.multiprocessing, spawn) share GPU 0 (real NCCL refuses that; ringcc's shim
does not) and run: all_reduce with every ReduceOp NCCL has (SUM, PRODUCT, MIN, MAX, AVG and
PREMUL_SUM) in every dtype, broadcast from each root, all_gather and all_gather_into_tensor,
reduce_scatter and reduce_scatter_tensor, reduce to each root with each op, all_to_all_single
(equal and unequal splits), all_to_all, gather, scatter, send/recv (blocking, isend/irecv and
batch_isend_irecv), barrier, new_group subgroups and split_group where torch has it.
Inputs are small integers, so every expected value is exact in every dtype.

Run it through tests/shim/run-torch.sh, which preloads the shim; --require-shim (set by that
script) fails when libringcc_nccl.so is not in the processes. Exit status 77 (skip) without
CUDA when the backend is nccl. --backend gloo runs the same checks on the CPU (what gloo lacks
is skipped), to test this script where there is no GPU.
"""
import argparse
import sys

import torch
import torch.distributed as dist

from torch_common import finish, init_rank, launch
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int32, torch.int64, torch.int8, torch.uint8]
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}
N = 37  # elements: odd, not a multiple of the rank count


class Checker:
    def __init__(self, rank, nranks, device, backend):
        self.rank, self.n, self.dev, self.backend = rank, nranks, device, backend
        self.passed, self.skipped = 0, []

    def value(self, r, dtype, numel=N, prod=False):
        """Rank r's input: 1..5 + r, or 1..2 for PRODUCT (so products stay exact)."""
        i = torch.arange(numel)
        v = (i % 2 + 1) if prod else (i % 5 + 1 + r)
        return v.to(dtype).to(self.dev)

    def same(self, what, got, want):
        got, want = got.cpu(), want.to(got.dtype).cpu()
        if not torch.equal(got, want):
            bad = (got != want).nonzero()
            first = bad[0].tolist() if len(bad) else []
            raise AssertionError(f"rank {self.rank}: {what}: {len(bad)} elements differ, first at "
                                 f"{first}: got {got.flatten()[:8].tolist()}, want "
                                 f"{want.flatten()[:8].tolist()}")
        self.passed += 1

    def run(self, what, fn):
        """fn() under gloo may hit what gloo lacks: skipped there, never under nccl."""
        try:
            fn()
        except RuntimeError as e:
            if self.backend == "nccl":
                raise
            self.skipped.append(f"{what} ({str(e).splitlines()[0][:60]})")

    # ---- the collectives ------------------------------------------------------------------

    def reduced(self, op, dtype, prod=False):
        """The expected all_reduce of value(r) over all ranks."""
        vals = [self.value(r, torch.int64, prod=prod).cpu() for r in range(self.n)]
        if op == dist.ReduceOp.SUM or op == dist.ReduceOp.AVG:
            out = sum(vals)
        elif op == dist.ReduceOp.PRODUCT:
            out = vals[0].clone()
            for v in vals[1:]:
                out *= v
        elif op == dist.ReduceOp.MAX:
            out = torch.stack(vals).max(0).values
        else:
            out = torch.stack(vals).min(0).values
        if op == dist.ReduceOp.AVG:
            return out.to(torch.float64) / self.n  # exact: n is a power of two or sums divide
        return out

    def all_reduce(self):
        for dtype in DTYPES:
            for name in ("SUM", "PRODUCT", "MIN", "MAX", "AVG"):
                op = getattr(dist.ReduceOp, name)
                if op == dist.ReduceOp.AVG and dtype not in FLOATS:
                    continue  # NCCL's integer AVG truncates; torch documents AVG for floats
                prod = op == dist.ReduceOp.PRODUCT
                t = self.value(self.rank, dtype, prod=prod)

                def call(t=t, op=op, dtype=dtype, prod=prod, name=name):
                    dist.all_reduce(t, op=op)
                    self.same(f"all_reduce {name} {dtype}", t, self.reduced(op, dtype, prod))
                self.run(f"all_reduce {name} {dtype}", call)
        # async form, several in flight
        works, ts = [], []
        for k in range(4):
            ts.append(self.value(self.rank, torch.float32) * (k + 1))
            works.append(dist.all_reduce(ts[-1], async_op=True))
        for k, w in enumerate(works):
            w.wait()
            self.same("async all_reduce", ts[k], self.reduced(dist.ReduceOp.SUM, None) * (k + 1))

    def premul_sum(self):
        """PREMUL_SUM: sum of factor * x. The shim refuses it on GPU buffers (README)."""
        if not hasattr(dist, "_make_nccl_premul_sum") or self.backend != "nccl":
            self.skipped.append("PREMUL_SUM (not this backend)")
            return
        # On a group of its own: a refused launch must not leave the world group unusable.
        group = dist.new_group(list(range(self.n)))
        t = self.value(self.rank, torch.float32)
        try:
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0), group=group)
        except RuntimeError as e:
            if "invalid usage" not in str(e).lower() and "PreMulSum" not in str(e):
                raise
            self.skipped.append("PREMUL_SUM (refused by the shim on GPU buffers, as documented)")
            return
        self.same("all_reduce PREMUL_SUM", t, self.reduced(dist.ReduceOp.SUM, None) * 2)

    def broadcast_gather(self):
        for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.uint8):
            mine = self.value(self.rank, dtype)

            def bcast(dtype=dtype):
                for root in range(self.n):
                    t = self.value(self.rank, dtype)
                    dist.broadcast(t, src=root)
                    self.same(f"broadcast from {root} {dtype}", t, self.value(root, dtype))
            self.run(f"broadcast {dtype}", bcast)

            def gather(mine=mine, dtype=dtype):
                outs = [torch.empty_like(mine) for _ in range(self.n)]
                dist.all_gather(outs, mine)
                for r in range(self.n):
                    self.same(f"all_gather block {r} {dtype}", outs[r], self.value(r, dtype))
            self.run(f"all_gather {dtype}", gather)
            whole = torch.empty(N * self.n, dtype=dtype, device=self.dev)
            want = torch.cat([self.value(r, dtype) for r in range(self.n)])

            def into_tensor(whole=whole, mine=mine, want=want, dtype=dtype):
                dist.all_gather_into_tensor(whole, mine)
                self.same(f"all_gather_into_tensor {dtype}", whole, want)
            self.run("all_gather_into_tensor", into_tensor)

    def reduce_scatter_reduce(self):
        for dtype in (torch.float32, torch.float16, torch.int32):
            # block j of rank r is value(r) * (j + 1); rank j gets the sum of its blocks
            blocks = [self.value(self.rank, dtype) * (j + 1) for j in range(self.n)]
            want = self.reduced(dist.ReduceOp.SUM, dtype) * (self.rank + 1)

            def lists(blocks=blocks, want=want, dtype=dtype):
                out = torch.empty_like(blocks[0])
                dist.reduce_scatter(out, blocks)
                self.same(f"reduce_scatter {dtype}", out, want)
            self.run("reduce_scatter", lists)

            def tensor(blocks=blocks, want=want, dtype=dtype):
                out = torch.empty_like(blocks[0])
                dist.reduce_scatter_tensor(out, torch.cat(blocks))
                self.same(f"reduce_scatter_tensor {dtype}", out, want)
            self.run("reduce_scatter_tensor", tensor)
            for k, name in enumerate(("SUM", "PRODUCT", "MIN", "MAX")):
                op = getattr(dist.ReduceOp, name)
                root = k % self.n
                prod = op == dist.ReduceOp.PRODUCT

                def reduce(dtype=dtype, op=op, root=root, prod=prod, name=name):
                    t = self.value(self.rank, dtype, prod=prod)
                    dist.reduce(t, dst=root, op=op)
                    if self.rank == root:
                        self.same(f"reduce {name} to {root} {dtype}", t,
                                  self.reduced(op, dtype, prod))
                self.run(f"reduce {dtype}", reduce)

    def all_to_all(self):
        n, r = self.n, self.rank
        # equal splits: block j of rank r is r * 100 + j * 10 + k
        k = torch.arange(5)
        src = torch.cat([r * 100 + j * 10 + k for j in range(n)]).float().to(self.dev)
        out = torch.empty_like(src)
        dist.all_to_all_single(out, src)
        want = torch.cat([j * 100 + r * 10 + k for j in range(n)]).float()
        self.same("all_to_all_single", out, want)
        # unequal splits: rank r sends j + 1 elements to rank j (torch's send/recv group)
        src = torch.cat([r * 100 + j * 10 + torch.arange(j + 1) for j in range(n)]).float()
        out = torch.empty((r + 1) * n, device=self.dev)
        dist.all_to_all_single(out, src.to(self.dev), output_split_sizes=[r + 1] * n,
                               input_split_sizes=[j + 1 for j in range(n)])
        want = torch.cat([j * 100 + r * 10 + torch.arange(r + 1) for j in range(n)]).float()
        self.same("all_to_all_single (unequal splits)", out, want)
        ins = [torch.full((3,), float(r * 10 + j), device=self.dev) for j in range(n)]
        outs = [torch.empty(3, device=self.dev) for _ in range(n)]

        def lists():
            dist.all_to_all(outs, ins)
            for j in range(n):
                self.same("all_to_all", outs[j], torch.full((3,), float(j * 10 + r)))
        self.run("all_to_all", lists)

    def gather_scatter(self):
        root = self.n // 2
        mine = self.value(self.rank, torch.float32)
        outs = [torch.empty_like(mine) for _ in range(self.n)] if self.rank == root else None
        dist.gather(mine, outs, dst=root)
        if self.rank == root:
            for r in range(self.n):
                self.same(f"gather block {r}", outs[r], self.value(r, torch.float32))
        ins = [self.value(r, torch.float32) * 3 for r in range(self.n)] if self.rank == root \
            else None
        got = torch.empty_like(mine)
        dist.scatter(got, ins, src=root)
        self.same("scatter", got, self.value(self.rank, torch.float32) * 3)

    def point_to_point(self):
        n, r = self.n, self.rank
        if n == 1:
            self.skipped.append("send/recv (one rank)")
            return
        nxt, prv = (r + 1) % n, (r - 1) % n
        out, got = self.value(r, torch.float32), torch.empty(N, device=self.dev)
        if r % 2 == 0:  # blocking, ordered so that the ring does not deadlock
            dist.send(out, nxt)
            dist.recv(got, prv)
        else:
            dist.recv(got, prv)
            dist.send(out, nxt)
        self.same("send/recv", got, self.value(prv, torch.float32))
        got = torch.empty(N, device=self.dev)
        reqs = [dist.isend(out * 2, nxt), dist.irecv(got, prv)]
        for q in reqs:
            q.wait()
        self.same("isend/irecv", got, self.value(prv, torch.float32) * 2)
        got = torch.empty(N, device=self.dev)
        ops = [dist.P2POp(dist.isend, out * 5, nxt), dist.P2POp(dist.irecv, got, prv)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        self.same("batch_isend_irecv", got, self.value(prv, torch.float32) * 5)

    def groups(self):
        dist.barrier()
        n, r = self.n, self.rank
        evens = list(range(0, n, 2))
        odds = list(range(1, n, 2))
        # every rank creates every group, in the same order (torch's rule)
        g_even = dist.new_group(evens)
        g_odd = dist.new_group(odds) if odds else None
        mine = g_even if r in evens else g_odd
        members = evens if r in evens else odds
        t = torch.tensor([float(r)], device=self.dev)
        dist.all_reduce(t, group=mine)
        self.same("all_reduce in a new_group", t, torch.tensor([float(sum(members))]))
        t = torch.tensor([float(r)], device=self.dev)
        dist.broadcast(t, src=members[-1], group=mine)
        self.same("broadcast in a new_group", t, torch.tensor([float(members[-1])]))
        if hasattr(dist, "split_group") and self.backend == "nccl":
            try:
                sub = dist.split_group(split_ranks=[evens] + ([odds] if odds else []))
            except (RuntimeError, TypeError, ValueError) as e:
                self.skipped.append(f"split_group ({str(e).splitlines()[0][:60]})")
                return
            if sub is not None:
                t = torch.tensor([1.0], device=self.dev)
                dist.all_reduce(t, group=sub)
                self.same("all_reduce in a split_group", t, torch.tensor([float(len(members))]))
        else:
            self.skipped.append("split_group (not in this torch)")


def worker(rank, nranks, port, backend, require_shim):
    device = init_rank(rank, nranks, port, backend, require_shim)
    c = Checker(rank, nranks, device, backend)
    c.all_reduce()
    c.broadcast_gather()
    c.reduce_scatter_reduce()
    c.all_to_all()
    c.gather_scatter()
    c.point_to_point()
    c.groups()
    c.premul_sum()
    if rank == 0:
        print(f"collectives: {c.passed} checks passed on {nranks} ranks ({backend})")
        for s in sorted(set(c.skipped)):
            print(f"  skipped: {s}")
    finish(backend)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--require-shim", action="store_true")
    args = ap.parse_args()
    return launch(worker, args.nprocs, args.backend, args.require_shim)


if __name__ == "__main__":
    sys.exit(main())
