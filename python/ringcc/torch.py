"""ringcc with PyTorch (CPU tensors): a DistributedDataParallel comm hook,
a communicator over a torch.distributed group, and the torch.distributed
backend "ringcc" (registered when this module is imported).

    import ringcc.torch
    dist.init_process_group("gloo")             # DDP needs a process group
    comm = ringcc.torch.init()                  # ringcc over the same ranks
    model = DistributedDataParallel(model)
    model.register_comm_hook(comm, ringcc.torch.allreduce_hook)

or, ringcc for everything: dist.init_process_group("ringcc").
"""
import warnings

import torch
import torch.distributed as dist

from ._comm import Communicator, unique_id
from ._world import default_communicator

try:  # written for torch 1.13's Python ProcessGroup; the hook needs none of it
    from . import _torch_backend

    _torch_backend.register()
except Exception as e:
    warnings.warn(f"ringcc: no torch.distributed backend 'ringcc' with torch {torch.__version__} "
                  f"({e}); the comm hook works without it")


def init(group=None, timeout=None):
    """A ringcc Communicator over the ranks of a torch.distributed group
    (default: the world), in the group's rank order. Rank 0's rendezvous
    id travels by torch.distributed, so no second port must be agreed on
    (ringcc.init() would take the job's MASTER_PORT, which torch's store
    may hold already)."""
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    global_rank = getattr(dist, "get_global_rank", None) or dist.distributed_c10d._get_global_rank
    src = 0 if group is None else global_rank(group, 0)
    box = [unique_id() if rank == 0 else None]
    dist.broadcast_object_list(box, src=src, group=group)
    return Communicator.from_unique_id(box[0], rank, size, timeout)


def allreduce_hook(state, bucket):
    """DDP comm hook with the semantics of PyTorch's default allreduce hook:
    each gradient bucket is averaged over the ranks (summed, divided by the
    rank count once), in place, by ringcc. `state` is the Communicator
    (None: ringcc.init()'s). Register with
    model.register_comm_hook(comm, ringcc.torch.allreduce_hook).

    The returned future completes on the communicator's waiter thread, so
    the backward pass goes on computing gradients while buckets travel."""
    comm = state if state is not None else default_communicator()
    tensor = bucket.buffer()
    fut = torch.futures.Future()

    def done(result, error):
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(tensor)

    comm.waiter().add(comm.iallreduce(tensor, op="avg"), done)
    return fut
