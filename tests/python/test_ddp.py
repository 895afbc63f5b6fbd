"""DistributedDataParallel training of a small model on CPU, three ways from
the same start: gloo alone (the reference), gloo with ringcc's allreduce
hook, and the torch.distributed backend "ringcc". The ringcc models must be
bitwise identical across ranks and within 1e-5 (relative) of gloo's.

    RCC_LIBRARY=build/lib/libringcc.so PYTHONPATH=python:tests/python \\
        build/tools/ringcc-run -n 4 /usr/bin/python3 tests/python/test_ddp.py
"""
import tracebacks  # noqa: F401 (a rank stopped at the timeout prints its threads)
import time

from torchjob import import_torch, torchrun_env

torch = import_torch()
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import ringcc.torch  # noqa: E402

STEPS = 6
RTOL = 1e-5


def make_model():
    torch.manual_seed(0)  # the same start everywhere (DDP also broadcasts rank 0's)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                               torch.nn.Tanh(), torch.nn.Linear(64, 3))


def train(model, rank):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(1000 + rank)  # every rank its own data
    for _ in range(STEPS):
        x = torch.randn(16, 32, generator=gen)
        y = torch.randint(0, 3, (16,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


class Counting:
    """The communicator, counting the hook's allreduces (proof that DDP used the hook)."""

    def __init__(self, comm):
        self.comm, self.calls = comm, 0

    def iallreduce(self, *args, **kwargs):
        self.calls += 1
        return self.comm.iallreduce(*args, **kwargs)

    def waiter(self):
        return self.comm.waiter()


def same_on_every_rank(flat, what):
    got = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(got, flat)
    for r, g in enumerate(got):
        assert torch.equal(g, got[0]), f"{what}: rank {r}'s parameters differ from rank 0's"


def close_to(flat, ref, what):
    rel = ((flat - ref).abs().max() / ref.abs().max()).item()
    assert torch.allclose(flat, ref, rtol=RTOL, atol=RTOL * ref.abs().max().item()), \
        f"{what}: max difference {rel:.3g} of the largest parameter"
    return rel


def main():
    rank, size = torchrun_env()
    dist.init_process_group("gloo")
    # Several buckets per step even for this tiny model (DDP's first bucket is 1 MiB otherwise),
    # so that hooks overlap the backward pass and each other.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 4096
    t0 = time.perf_counter()
    ref = train(DDP(make_model(), bucket_cap_mb=0.01), rank)
    t1 = time.perf_counter()

    comm = ringcc.torch.init()
    hooked = DDP(make_model(), bucket_cap_mb=0.01)
    counting = Counting(comm)
    hooked.register_comm_hook(counting, ringcc.torch.allreduce_hook)
    flat = train(hooked, rank)
    assert counting.calls > STEPS, f"the hook ran {counting.calls} times in {STEPS} steps"
    t2 = time.perf_counter()
    same_on_every_rank(flat, "gloo + ringcc hook")
    rel_hook = close_to(flat, ref, "gloo + ringcc hook vs gloo")

    group = dist.new_group(backend="ringcc")
    assert dist.get_backend(group) == "ringcc"
    flat_pg = train(DDP(make_model(), process_group=group, bucket_cap_mb=0.01), rank)
    t3 = time.perf_counter()
    same_on_every_rank(flat_pg, "ringcc backend")
    rel_pg = close_to(flat_pg, ref, "ringcc backend vs gloo")
    if rank == 0:
        print(f"{size} ranks, {ref.numel()} parameters, {STEPS} steps, {counting.calls} "
              f"hooked buckets: ringcc hook max rel diff "
              f"{rel_hook:.3g}, ringcc backend {rel_pg:.3g} (bitwise equal across ranks); "
              f"train s: gloo {t1 - t0:.2f}, hook {t2 - t1:.2f}, backend {t3 - t2:.2f}")
    comm.destroy()
    # The models go before their gloo group. A DDP model that outlives the group frees it when
    # it goes, and torch 1.13 (Debian's) then joins gloo's worker threads holding the GIL while
    # a worker may still need the GIL to free the last all_gather's tensors: a deadlock, seen
    # under load in about one run of forty.
    del hooked
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
