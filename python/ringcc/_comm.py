"""Communicator: one rank's member of a ringcc communicator, and its
collectives on numpy arrays and CPU torch tensors (in place, no copies)."""
import atexit
import ctypes
import threading
import weakref

from ._buffers import as_buffer, same_dtype
from ._errors import check
from ._lib import UNIQUE_ID_BYTES, UniqueId, lib
from ._request import Request
from ._types import as_op
from ._waiter import Waiter

_CONFIG_MAGIC = 0x72636366  # RCC_CONFIG_MAGIC
_HEADER_VERSION = 100  # RCC_VERSION_CODE of the ringcc.h these fields follow (0.1.0)


class _Config(ctypes.Structure):  # rcc_config_t
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("timeout_ms", ctypes.c_int), ("blocking", ctypes.c_int),
                ("chunk_bytes", ctypes.c_int)]


def _config(timeout):
    """An rcc_config_t pointer for `timeout` seconds, or None for the defaults."""
    if timeout is None:
        return None
    cfg = _Config(ctypes.sizeof(_Config), _CONFIG_MAGIC, _HEADER_VERSION,
                  int(round(timeout * 1000)), 1, 0)
    return ctypes.byref(cfg)


def unique_id():
    """A fresh rendezvous token (128 bytes) for Communicator.from_unique_id.
    This process serves the rendezvous; share the bytes with every rank as
    you would a password."""
    uid = UniqueId()
    check(lib.rcc_get_unique_id(ctypes.byref(uid)))
    return ctypes.string_at(ctypes.addressof(uid), UNIQUE_ID_BYTES)  # .internal stops at a NUL


_live = weakref.WeakSet()


@atexit.register
def _destroy_live():
    # Ranks that exit with operations queued would leave their peers waiting.
    for comm in list(_live):
        try:
            comm.destroy()
        except Exception:  # a broken communicator: its failure was reported when it broke
            pass


class Communicator:
    """Use Communicator.from_env() (the launcher's environment, as
    rcc_comm_init_env) or Communicator.from_unique_id(). Collectives must
    be called in the same order on every rank."""

    def __init__(self, handle):
        self._handle = handle  # ctypes.c_void_p
        self._waiter = None
        self._waiter_lock = threading.Lock()
        _live.add(self)
        rank, size = ctypes.c_int(), ctypes.c_int()
        check(lib.rcc_comm_rank(handle, ctypes.byref(rank)), handle)
        check(lib.rcc_comm_size(handle, ctypes.byref(size)), handle)
        self.rank, self.size = rank.value, size.value

    @classmethod
    def from_env(cls, timeout=None):
        """rcc_comm_init_env: rank, size and rendezvous from ringcc-run
        (RCC_RANK, RCC_NRANKS, RCC_ROOT), torchrun (RANK, WORLD_SIZE,
        MASTER_ADDR, MASTER_PORT), Slurm or Open MPI. `timeout`: seconds
        any wait may last (default RCC_TIMEOUT)."""
        handle = ctypes.c_void_p()
        check(lib.rcc_comm_init_env(ctypes.byref(handle), _config(timeout)))
        return cls(handle)

    @classmethod
    def from_unique_id(cls, uid, rank, size, timeout=None):
        """rcc_comm_init_rank: every rank passes the same unique_id() bytes."""
        if len(uid) != UNIQUE_ID_BYTES:
            raise ValueError(f"ringcc: a unique id has {UNIQUE_ID_BYTES} bytes (got {len(uid)})")
        handle = ctypes.c_void_p()
        token = UniqueId.from_buffer_copy(bytes(uid))
        check(lib.rcc_comm_init_rank(ctypes.byref(handle), size, token, rank, _config(timeout)))
        return cls(handle)

    def destroy(self):
        """Finishes queued operations, then frees the communicator (rcc_comm_destroy)."""
        self._close(lib.rcc_comm_destroy)

    def abort(self):
        """Frees the communicator without waiting; pending operations fail."""
        self._close(lib.rcc_comm_abort)

    def _close(self, fn):
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        _live.discard(self)
        code = fn(handle)
        if self._waiter is not None:  # its requests have finished now (or failed, aborted)
            self._waiter.close()
            self._waiter = None
        check(code)

    def __del__(self):
        # Dropped without destroy(): free the connections and the progress thread all the same.
        try:
            self.destroy()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def waiter(self):
        """The thread that completes this communicator's requests in the
        background (used by ringcc.torch)."""
        with self._waiter_lock:  # the first hook and a backend call may race here
            if self._waiter is None:
                self._waiter = Waiter(f"ringcc-waiter-{self.rank}")
            return self._waiter

    # -- collectives -----------------------------------------------------------------
    # Each builds (C arguments, buffers to keep alive, result) and runs blocking or not.

    def _run(self, name, args, keep, result, nonblocking):
        if self._handle is None:
            raise ValueError("ringcc: the communicator was destroyed")
        if nonblocking:
            req = ctypes.c_void_p()
            code = getattr(lib, "rcc_i" + name)(*args, self._handle, ctypes.byref(req))
            check(code, self._handle)
            return Request(req, keep, result)
        check(getattr(lib, "rcc_" + name)(*args, self._handle), self._handle)
        return result

    def _io(self, name, x, out):
        """(input, output, result) for a collective whose output has the input's
        size; out=None means in place."""
        src = as_buffer(x, "input", writable=out is None)
        if out is None:
            return src, src, x
        dst = as_buffer(out, "out", writable=True)
        same_dtype(src, dst)
        if dst.count != src.count:
            raise ValueError(f"ringcc: {name} of {src.count} elements into {dst.count}")
        return src, dst, out

    def _allreduce(self, x, out, op, nonblocking):
        src, dst, result = self._io("allreduce", x, out)
        args = (src.ptr, dst.ptr, src.count, src.dtype, as_op(op))
        return self._run("allreduce", args, (src, dst), result, nonblocking)

    def _reduce_scatter(self, x, out, op, nonblocking):
        src = as_buffer(x, "input", writable=False)
        if out is None:
            shape = src.shape
            if not shape or shape[0] % self.size:
                raise ValueError(f"ringcc: reduce_scatter splits the first axis into {self.size} "
                                 f"blocks, but the input's shape is {shape}")
            out = src.new((shape[0] // self.size,) + shape[1:])
        dst = as_buffer(out, "out", writable=True)
        same_dtype(src, dst)
        if dst.count * self.size != src.count:
            raise ValueError(f"ringcc: reduce_scatter of {src.count} elements over {self.size} "
                             f"ranks into {dst.count} (needs {src.count / self.size:g})")
        args = (src.ptr, dst.ptr, dst.count, src.dtype, as_op(op))
        return self._run("reduce_scatter", args, (src, dst), out, nonblocking)

    def _allgather(self, x, out, nonblocking):
        src = as_buffer(x, "input", writable=False)
        if out is None:
            shape = src.shape or (1,)
            out = src.new((shape[0] * self.size,) + shape[1:])
        dst = as_buffer(out, "out", writable=True)
        same_dtype(src, dst)
        if dst.count != src.count * self.size:
            raise ValueError(f"ringcc: allgather of {src.count} elements from {self.size} ranks "
                             f"into {dst.count} (needs {src.count * self.size})")
        args = (src.ptr, dst.ptr, src.count, src.dtype)
        return self._run("allgather", args, (src, dst), out, nonblocking)

    def _broadcast(self, x, root, out, nonblocking):
        src, dst, result = self._io("broadcast", x, out)
        args = (src.ptr, dst.ptr, src.count, src.dtype, int(root))
        return self._run("broadcast", args, (src, dst), result, nonblocking)

    def allreduce(self, x, out=None, op="sum"):
        """out[i] = op over ranks of x[i]; in place (into x) when out is None.
        op: "sum", "prod", "max", "min", "avg" (or ringcc.Op). Returns the result."""
        return self._allreduce(x, out, op, False)

    def iallreduce(self, x, out=None, op="sum"):
        """allreduce without waiting: returns a Request (wait() gives the result)."""
        return self._allreduce(x, out, op, True)

    def reduce_scatter(self, x, out=None, op="sum"):
        """x's first axis holds `size` blocks; out receives block `rank` reduced
        over ranks (a new array of x's kind when out is None)."""
        return self._reduce_scatter(x, out, op, False)

    def ireduce_scatter(self, x, out=None, op="sum"):
        return self._reduce_scatter(x, out, op, True)

    def allgather(self, x, out=None):
        """out holds every rank's x, rank r's as block r along the first axis
        (a new array of x's kind when out is None)."""
        return self._allgather(x, out, False)

    def iallgather(self, x, out=None):
        return self._allgather(x, out, True)

    def broadcast(self, x, root=0, out=None):
        """Every rank receives root's x, in place (into x) when out is None."""
        return self._broadcast(x, root, out, False)

    def ibroadcast(self, x, root=0, out=None):
        return self._broadcast(x, root, out, True)

    def barrier(self):
        """Returns when every rank has entered the barrier."""
        return self._run("barrier", (), (), None, False)

    def ibarrier(self):
        return self._run("barrier", (), (), None, True)
