"""The torch.distributed backend "ringcc": a ProcessGroup defined in Python
(torch's PyProcessGroup, torch >= 1.13) whose collectives run on a ringcc
communicator. Its rank 0 puts the ringcc rendezvous id in the group's store.

Tensors must be dense, contiguous CPU tensors. allreduce, broadcast and
barrier work in place; allgather and reduce_scatter take torch's lists of
tensors and copy them into and out of one contiguous buffer."""
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, Work

from ._comm import Communicator, unique_id

NAME = "ringcc"

_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "prod", dist.ReduceOp.MAX: "max",
        dist.ReduceOp.MIN: "min"}
if hasattr(dist.ReduceOp, "AVG"):
    _OPS[dist.ReduceOp.AVG] = "avg"


def _op(reduce_op):
    for key, name in _OPS.items():
        if reduce_op == key:
            return name
    raise ValueError(f"ringcc backend: reduction {reduce_op} is not supported")


def _single(tensors, what):
    if len(tensors) != 1:
        raise ValueError(f"ringcc backend: {what} takes one tensor per rank (got {len(tensors)})")
    return tensors[0]


class RingccWork(Work):
    """A ringcc request as torch's Work; its future's value is `value`
    once `finish` (copies out, if any) has run on the waiter thread."""

    def __init__(self, comm, request, value, finish=None):
        super().__init__()
        self._future = torch.futures.Future()

        def done(_, error):
            try:
                if error is not None:
                    raise error
                if finish is not None:
                    finish()
            except Exception as e:  # the future must complete, or its waiter waits forever
                self._future.set_exception(e)
            else:
                self._future.set_result(value)

        comm.waiter().add(request, done)

    def wait(self, timeout=None):
        self._future.wait()  # raises the ringcc failure, if any
        return True

    def is_completed(self):
        return self._future.done()

    def get_future(self):
        return self._future


class ProcessGroupRingcc(ProcessGroup):
    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        key = "ringcc/unique_id"
        if rank == 0:
            store.set(key, unique_id())
        seconds = timeout.total_seconds() if timeout is not None else None
        self.comm = Communicator.from_unique_id(store.get(key), rank, size, seconds)

    def getBackendName(self):
        return NAME

    def allreduce(self, tensors, opts=None):
        t = _single(tensors, "allreduce")
        op = _op(opts.reduceOp) if opts is not None else "sum"
        return RingccWork(self.comm, self.comm.iallreduce(t, op=op), tensors)

    def broadcast(self, tensors, opts):
        t = _single(tensors, "broadcast")
        return RingccWork(self.comm, self.comm.ibroadcast(t, root=opts.rootRank), tensors)

    def allgather(self, output_lists, input_tensors, opts=None):
        t = _single(input_tensors, "allgather")
        outs = _single(output_lists, "allgather")
        flat = torch.empty((self.comm.size,) + tuple(t.shape), dtype=t.dtype)

        def finish():
            for r, out in enumerate(outs):
                out.copy_(flat[r])

        req = self.comm.iallgather(t.contiguous(), flat)
        return RingccWork(self.comm, req, output_lists, finish)

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        out = _single(output_tensors, "reduce_scatter")
        flat = torch.stack([x.reshape(out.shape) for x in _single(input_lists, "reduce_scatter")])
        op = _op(opts.reduceOp) if opts is not None else "sum"
        return RingccWork(self.comm, self.comm.ireduce_scatter(flat, out, op=op), output_tensors)

    def barrier(self, opts=None):
        return RingccWork(self.comm, self.comm.ibarrier(), [])


def _create(store, rank, size, timeout):
    return ProcessGroupRingcc(store, rank, size, timeout)


def register():
    """Makes "ringcc" a torch.distributed backend (once per process)."""
    if NAME not in dist.Backend._plugins and NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(NAME, _create)
