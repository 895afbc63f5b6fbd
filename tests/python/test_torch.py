"""The ringcc package on CPU torch tensors (every torch dtype ringcc reduces,
bfloat16 included; every op; odd sizes; in place, without copies), and the
torch.distributed backend "ringcc" through torch.distributed's own calls.
References: reference.py's naive reductions.

    RCC_LIBRARY=build/lib/libringcc.so PYTHONPATH=python:tests/python \\
        build/tools/ringcc-run -n 2 /usr/bin/python3 tests/python/test_torch.py
"""
import tracebacks  # noqa: F401 (a rank stopped at the timeout prints its threads)
from torchjob import import_torch, torchrun_env

torch = import_torch()
import numpy as np  # noqa: E402
import torch.distributed as dist  # noqa: E402

import ringcc.torch  # noqa: E402
from reference import OPS, SIZES, rank_inputs, reduce  # noqa: E402
from test_collectives import fresh_communicator  # noqa: E402

DTYPES = ["int8", "uint8", "int32", "int64", "float16", "float32", "float64", "bfloat16"]


def tensor(values, dtype):
    """A tensor of dtype from reference.py's numpy values (bfloat16's come as float32)."""
    return torch.from_numpy(values).to(getattr(torch, dtype), copy=True)


def same(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, want.dtype)
    assert torch.equal(got, want), (what, got[:8], want[:8])


def check_collectives(comm):
    for dt in DTYPES:
        for count in SIZES:
            inputs = rank_inputs(dt, count, comm.size)
            for op in OPS:
                want = tensor(reduce(inputs, op), dt)
                x = tensor(inputs[comm.rank], dt)
                where = x.data_ptr()
                assert comm.allreduce(x, op=op) is x and x.data_ptr() == where  # in place
                same(x, want, f"allreduce {dt} {op} {count}")
        inputs = [tensor(v, dt) for v in rank_inputs(dt, 301 * comm.size, comm.size)]
        got = comm.reduce_scatter(inputs[comm.rank], op="max")
        want = tensor(reduce(rank_inputs(dt, 301 * comm.size, comm.size), "max"), dt)
        same(got, want[301 * comm.rank:301 * (comm.rank + 1)], f"reduce_scatter {dt}")
        assert isinstance(got, torch.Tensor)
        same(comm.iallgather(inputs[comm.rank]).wait(), torch.cat(inputs), f"allgather {dt}")
        x = inputs[comm.rank].clone()
        comm.broadcast(x, root=comm.size - 1)
        same(x, inputs[-1], f"broadcast {dt}")


def check_refusals(comm):
    for bad, word in ((torch.zeros(3, dtype=torch.bool), "torch.bool"),
                      (torch.zeros(3, dtype=torch.int16), "torch.int16"),
                      (torch.zeros(3, dtype=torch.complex64), "torch.complex64")):
        try:
            comm.allreduce(bad)
        except TypeError as e:
            assert word in str(e), str(e)
        else:
            raise AssertionError(f"{word} accepted")
    try:
        comm.allreduce(torch.zeros(4, 4)[:, 0])
    except ValueError as e:
        assert "contiguous" in str(e)
    else:
        raise AssertionError("a strided tensor was accepted")
    # A numpy array over a tensor's memory is the same memory.
    t = torch.ones(5)
    comm.allreduce(t.numpy())
    assert (t == comm.size).all()


class Bucket:
    """What the hook uses of DDP's GradBucket."""

    def __init__(self, tensor):
        self.tensor = tensor

    def buffer(self):
        return self.tensor


def check_hook(comm):
    """The hook averages in place; a failure reaches the future as the RingccError."""
    t = torch.full((9,), float(comm.rank), dtype=torch.float64)
    fut = ringcc.torch.allreduce_hook(comm, Bucket(t))
    assert fut.wait() is t and (t == (comm.size - 1) / 2).all(), t
    if comm.size == 1:
        return
    other = fresh_communicator(comm)
    fut = ringcc.torch.allreduce_hook(other, Bucket(torch.ones(10 + (comm.rank > 0))))
    try:
        fut.wait()
    except Exception as e:
        assert "RCC_ERR_MISMATCH" in str(e) and "count=11" in str(e), str(e)
    else:
        raise AssertionError("the hook's future did not fail")
    other.abort()


def check_backend(rank, size):
    dist.init_process_group("ringcc")
    assert dist.get_backend() == "ringcc" and dist.get_rank() == rank
    x = torch.full((1001,), float(rank + 1))
    dist.all_reduce(x)
    assert (x == size * (size + 1) / 2).all()
    for op, want in ((dist.ReduceOp.MAX, size), (dist.ReduceOp.MIN, 1),
                     (dist.ReduceOp.PRODUCT, float(np.prod(range(1, size + 1)))),
                     (dist.ReduceOp.AVG, (size + 1) / 2)):
        x = torch.full((7,), float(rank + 1), dtype=torch.float64)
        work = dist.all_reduce(x, op=op, async_op=True)
        work.wait()
        assert (x == want).all(), (op, x)
    x = torch.arange(10, dtype=torch.int64) * (rank + 1)
    fut = dist.all_reduce(x, async_op=True).get_future()
    assert torch.equal(fut.wait()[0], torch.arange(10) * (size * (size + 1) // 2))
    b = torch.arange(6.0) if rank == 1 % size else torch.zeros(6)
    dist.broadcast(b, src=1 % size)
    assert torch.equal(b, torch.arange(6.0))
    outs = [torch.zeros(2, 3, dtype=torch.int32) for _ in range(size)]
    dist.all_gather(outs, torch.full((2, 3), rank, dtype=torch.int32))
    assert all((o == r).all() for r, o in enumerate(outs))
    out = torch.zeros(4)
    dist.reduce_scatter(out, [torch.full((4,), float(r + rank)) for r in range(size)])
    assert (out == size * rank + size * (size - 1) / 2).all(), out
    dist.barrier()
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND)
    except Exception as e:
        assert "not supported" in str(e), str(e)
    else:
        raise AssertionError("BAND accepted")
    dist.destroy_process_group()


def main():
    rank, size = torchrun_env()
    comm = ringcc.init(timeout=60)
    check_collectives(comm)
    check_refusals(comm)
    check_hook(comm)
    ringcc.finalize()
    check_backend(rank, size)
    print(f"rank {rank}/{size}: tensors and the ringcc backend match the reference")


if __name__ == "__main__":
    main()
