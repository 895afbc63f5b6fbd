#!/usr/bin/env python3
"""DistributedDataParallel through the shim equals single-process training.

    torch_ddp.py [--nprocs N] [--steps S] [--dtype float32|float64] [--backend nccl|gloo]
                 [--require-shim]

N processes (torch.multiprocessing, spawn) share GPU 0 and train a small MLP with DDP for S
steps (SGD with momentum, MSE loss). Step s uses global batch s (drawn from a seed), of which
each rank takes an equal slice; DDP averages the gradients, so the result must be what one
process gets training on the whole global batches. Rank 0 then trains that reference itself,
from the same initial parameters, and compares: every parameter within rtol/atol (float32:
1e-4/1e-5, float64: 1e-9/1e-11), and the parameters of all ranks bit for bit equal.

Run it through tests/shim/run-torch.sh (preloads the shim); exit status 77 (skip) without CUDA
for the nccl backend. --backend gloo runs on the CPU, to test this script without a GPU.
"""
import argparse
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from torch_common import finish, init_rank, launch
IN, HIDDEN, OUT, PER_RANK = 16, 64, 4, 8
TOLERANCE = {"float32": (1e-4, 1e-5), "float64": (1e-9, 1e-11)}


def make_model(dtype, device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
                          nn.Linear(HIDDEN, OUT))
    return model.to(dtype=dtype, device=device)


def global_batch(step, nranks, dtype, device):
    """The same global batch on every rank and in the reference."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(PER_RANK * nranks, IN, generator=g, dtype=torch.float64)
    y = torch.sin(x[:, :OUT] * 2) + 0.1 * torch.randn(PER_RANK * nranks, OUT, generator=g,
                                                      dtype=torch.float64)
    return x.to(dtype=dtype, device=device), y.to(dtype=dtype, device=device)


def train(model, steps, nranks, rank, dtype, device):
    """rank None: the whole global batch (the single-process reference)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.MSELoss()
    for step in range(steps):
        x, y = global_batch(step, nranks, dtype, device)
        if rank is not None:
            mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
            x, y = x[mine], y[mine]
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return loss.item()


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def worker(rank, nranks, port, backend, args):
    dtype = getattr(torch, args.dtype)
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference must be float32 too
    # Unbound: torch makes the communicator at the first collective (torch_collectives.py
    # binds the device, for the eager path).
    device = init_rank(rank, nranks, port, backend, args.require_shim, bind_device=False)
    model = make_model(dtype, device)
    # Rank 0's parameters are broadcast at construction; the others start
    # elsewhere to prove it (DDP must overwrite them).
    if rank != 0:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    ddp = DDP(model, device_ids=[0] if backend == "nccl" else None)
    loss = train(ddp, args.steps, nranks, rank, dtype, device)
    params = flat(model)
    every = [torch.empty_like(params) for _ in range(nranks)]
    dist.all_gather(every, params)
    for r in range(nranks):
        if not torch.equal(every[r], params):
            raise AssertionError(f"rank {rank}: rank {r}'s parameters differ from mine")
    if rank == 0:
        ref = make_model(dtype, device)
        ref_loss = train(ref, args.steps, nranks, None, dtype, device)
        want = flat(ref)
        rtol, atol = TOLERANCE[args.dtype]
        diff = (params - want).abs()
        worst = (diff - rtol * want.abs()).max().item()
        print(f"ddp: {nranks} ranks, {args.steps} steps, {args.dtype}: loss {loss:.6f} "
              f"(single process {ref_loss:.6f}), largest parameter difference "
              f"{diff.max().item():.3e} over {params.numel()} parameters")
        if worst > atol or params.numel() != want.numel():
            raise AssertionError(f"DDP differs from single-process training beyond rtol {rtol} "
                                 f"atol {atol}: {diff.max().item():.3e}")
        moved = (want - flat(make_model(dtype, device))).abs().max().item()
        if moved < 1e-3:
            raise AssertionError("training did not move the parameters; the check proves nothing")
    del ddp  # before its group: see tests/python/test_ddp.py
    finish(backend)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--dtype", default="float32", choices=sorted(TOLERANCE))
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--require-shim", action="store_true")
    args = ap.parse_args()
    return launch(worker, args.nprocs, args.backend, args)


if __name__ == "__main__":
    sys.exit(main())
