"""The default communicator (ringcc.init) and module-level collectives on it."""
import functools

from ._comm import Communicator

_default = None


def init(timeout=None):
    """Creates the default communicator from the launcher's environment
    (Communicator.from_env) and returns it. Call it once per process."""
    global _default
    if _default is not None:
        raise RuntimeError("ringcc: init() was already called (finalize() first)")
    _default = Communicator.from_env(timeout)
    return _default


def is_initialized():
    return _default is not None


def finalize():
    """Destroys the default communicator (also done at exit)."""
    global _default
    comm, _default = _default, None
    if comm is not None:
        comm.destroy()


def default_communicator():
    if _default is None:
        raise RuntimeError("ringcc: call ringcc.init() first")
    return _default


def rank():
    return default_communicator().rank


def size():
    return default_communicator().size


def _on_default(name):
    method = getattr(Communicator, name)

    @functools.wraps(method)
    def call(*args, comm=None, **kwargs):
        return method(comm or default_communicator(), *args, **kwargs)

    call.__doc__ = (f"{method.__doc__ or ''}\n\n"
                    "On `comm`, by default the communicator of ringcc.init().")
    return call


COLLECTIVES = ["allreduce", "iallreduce", "reduce_scatter", "ireduce_scatter", "allgather",
               "iallgather", "broadcast", "ibroadcast", "barrier", "ibarrier"]
globals().update({name: _on_default(name) for name in COLLECTIVES})
