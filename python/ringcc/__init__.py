"""ringcc for Python: collectives on numpy arrays and CPU torch tensors,
in place, through ctypes over libringcc (found through RCC_LIBRARY or the
library search path).

    import ringcc
    ringcc.init()                     # ringcc-run, torchrun, Slurm or mpirun environment
    ringcc.allreduce(grad, op="avg")  # in place
    req = ringcc.iallgather(x)        # nonblocking: req.wait() returns the gathered array

Failures raise ringcc.RingccError carrying the library's message.
ringcc.torch (imported on its own) has the DDP comm hook and the
torch.distributed backend "ringcc". See python/README.md.
"""
from ._comm import Communicator, unique_id
from ._errors import RingccError
from ._request import Request
from ._types import Dtype, Op
from ._world import (allgather, allreduce, barrier, broadcast, default_communicator, finalize,
                     iallgather, iallreduce, ibarrier, ibroadcast, init, ireduce_scatter,
                     is_initialized, rank, reduce_scatter, size)

__all__ = ["Communicator", "Dtype", "Op", "Request", "RingccError", "allgather", "allreduce",
           "barrier", "broadcast", "default_communicator", "finalize", "iallgather", "iallreduce",
           "ibarrier", "ibroadcast", "init", "ireduce_scatter", "is_initialized", "rank",
           "reduce_scatter", "size", "unique_id"]
