"""The ringcc package's collectives on numpy arrays, checked against the
naive reference (reference.py): every dtype, op and odd size, blocking and
nonblocking, in place and out of place. Run by a launcher on 1-5 ranks:

    RCC_LIBRARY=build/lib/libringcc.so PYTHONPATH=python:tests/python \\
        build/tools/ringcc-run -n 3 /usr/bin/python3 tests/python/test_collectives.py
"""
import tracebacks  # noqa: F401 (a rank stopped at the timeout prints its threads)
import sys

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not installed for", sys.executable)
    sys.exit(77)

import ringcc
from reference import OPS, SIZES, rank_input, rank_inputs, reduce

DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]


def same(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape,
                                                                 want.dtype, want.shape)
    # Bit for bit (NaN-free inputs): compare the bytes.
    assert got.tobytes() == want.tobytes(), (what, got[:8], want[:8])


def check_allreduce(comm):
    for dt in DTYPES:
        for count in SIZES:
            inputs = rank_inputs(dt, count, comm.size)
            for op in OPS:
                want = reduce(inputs, op)
                x = inputs[comm.rank].copy()
                out = np.full_like(x, 7)
                assert comm.allreduce(x, out, op=op) is out
                same(out, want, f"allreduce {dt} {op} {count}")
                same(x, inputs[comm.rank], "allreduce input untouched")
                comm.allreduce(x, op=op)  # in place
                same(x, want, f"allreduce in place {dt} {op} {count}")


def check_reduce_scatter(comm):
    n = comm.size
    for dt in DTYPES:
        for block in (0, 1, 333):
            inputs = rank_inputs(dt, block * n, n)
            for op in OPS:
                want = reduce(inputs, op)[comm.rank * block:][:block]
                got = comm.reduce_scatter(inputs[comm.rank], op=op)
                same(got, want, f"reduce_scatter {dt} {op} {block}")


def check_allgather_broadcast(comm):
    n = comm.size
    for dt in DTYPES:
        for count in (0, 1, 1001):
            inputs = rank_inputs(dt, count, n)
            same(comm.allgather(inputs[comm.rank]), np.concatenate(inputs),
                 f"allgather {dt} {count}")
            for root in range(n):
                x = inputs[comm.rank].copy()
                comm.broadcast(x, root=root)
                same(x, inputs[root], f"broadcast {dt} {count} root {root}")
    # In place, as in C: this rank's block of the gathered array, or of the scattered input.
    k = 5
    out = np.zeros(n * k, dtype=np.int64)
    out[comm.rank * k:(comm.rank + 1) * k] = comm.rank
    comm.allgather(out[comm.rank * k:(comm.rank + 1) * k], out)
    same(out, np.repeat(np.arange(n, dtype=np.int64), k), "allgather in place")
    x = np.arange(n * k, dtype=np.float64)
    mine = x[comm.rank * k:(comm.rank + 1) * k]
    comm.reduce_scatter(x, mine)
    same(mine, np.arange(comm.rank * k, (comm.rank + 1) * k, dtype=np.float64) * n,
         "reduce_scatter in place")
    # Shapes: blocks along the first axis.
    x = np.full((2, 3), comm.rank, dtype=np.int32)
    got = comm.allgather(x)
    assert got.shape == (2 * n, 3) and (got[2 * comm.rank:2 * comm.rank + 2] == comm.rank).all()
    got = comm.reduce_scatter(np.ones((2 * n, 3), dtype=np.float32))
    assert got.shape == (2, 3) and (got == n).all()


def check_nonblocking(comm):
    """Several requests in flight at once, waited for in another order, and test()."""
    reqs, wants = [], []
    for i, dt in enumerate(DTYPES):
        count = 1000 + i
        wants.append(reduce(rank_inputs(dt, count, comm.size, seed=i), "sum"))
        reqs.append(comm.iallreduce(rank_input(dt, count, comm.rank, seed=i)))
    gathered = comm.iallgather(np.array([comm.rank], dtype=np.int64))
    b = np.arange(5.0) if comm.rank == 0 else np.zeros(5)
    bcast = comm.ibroadcast(b)
    rs = comm.ireduce_scatter(np.ones(comm.size * 4, dtype=np.uint32), op="sum")
    barrier = comm.ibarrier()
    for req, want in reversed(list(zip(reqs, wants))):
        same(req.wait(), want, "iallreduce")
        assert req.done and req.test()
    assert list(gathered.wait()) == list(range(comm.size))
    same(bcast.wait(), np.arange(5.0), "ibroadcast")
    same(rs.wait(), np.full(4, comm.size, dtype=np.uint32), "ireduce_scatter")
    while not barrier.test():
        pass
    assert barrier.wait() is None


def check_buffers(comm):
    """Buffer-protocol objects are used in place; what cannot be is refused."""
    import array
    a = array.array("i", [comm.rank + 1] * 3)
    comm.allreduce(a)
    assert list(a) == [comm.size * (comm.size + 1) // 2] * 3
    ba = bytearray([1, 2, 3])
    comm.allreduce(ba, op="max")
    assert ba == bytearray([1, 2, 3])
    # Module-level functions run on ringcc.init()'s communicator.
    x = np.ones(4, dtype=np.float64)
    ringcc.allreduce(x, op="avg")
    assert (x == 1).all()


def expect(exc, fn, *words):
    try:
        fn()
    except exc as e:
        for w in words:
            assert w in str(e), (str(e), w)
        return e
    raise AssertionError(f"expected {exc.__name__} containing {words}")


def check_errors(comm):
    x = np.zeros(4, dtype=np.float32)
    # Refused by the library: the exception carries its message (rcc_last_error).
    e = expect(ringcc.RingccError, lambda: comm.broadcast(x, root=comm.size),
               "RCC_ERR_INVALID_ARGUMENT", f"root {comm.size} is not a rank")
    assert e.code == 4 and e.name == "RCC_ERR_INVALID_ARGUMENT" and "rcc_broadcast" in e.detail
    expect(ringcc.RingccError, lambda: comm.allreduce(x, op=99), "RCC_ERR_INVALID_ARGUMENT", "99")
    expect(ringcc.RingccError, lambda: comm.iallreduce(x, op=-1), "rcc_iallreduce")
    # Refused before the library (it cannot see sizes or types).
    expect(TypeError, lambda: comm.allreduce(np.zeros(3, dtype=bool)), "bool")
    expect(TypeError, lambda: comm.allreduce(np.zeros(3, dtype=np.complex64)), "complex64")
    expect(TypeError, lambda: comm.allreduce([1.0, 2.0]), "list")
    expect(TypeError, lambda: comm.allreduce(x, np.zeros(4, np.float64)), "float32", "float64")
    expect(ValueError, lambda: comm.allreduce(x, np.zeros(5, np.float32)), "4 elements into 5")
    expect(ValueError, lambda: comm.allreduce(np.zeros((4, 4), np.float32)[:, 1]), "contiguous")
    expect(TypeError, lambda: comm.allreduce(np.zeros(4, np.float32).view(">f4")), ">f4")
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    expect(ValueError, lambda: comm.allreduce(ro), "read-only")
    expect(ValueError, lambda: comm.allgather(x, np.zeros(1, np.float32)), "allgather")
    expect(ValueError, lambda: comm.allreduce(x, op="mean"), "mean")
    if comm.size > 1:
        expect(ValueError, lambda: comm.reduce_scatter(np.zeros(comm.size + 1, np.int8)),
               "first axis")
    # The communicator still works after the refusals (none reached the wire).
    comm.allreduce(x)


def fresh_communicator(comm, timeout=30):
    """A second communicator over the same ranks, its unique id sent by `comm`."""
    uid = np.frombuffer(ringcc.unique_id(), dtype=np.uint8).copy() if comm.rank == 0 else \
        np.zeros(128, dtype=np.uint8)
    comm.broadcast(uid)
    return ringcc.Communicator.from_unique_id(uid.tobytes(), comm.rank, comm.size, timeout=timeout)


def check_failure(comm):
    """A failure found while the operation runs (ranks calling different collectives) is
    raised by the request's wait() on every rank, with the library's message; the broken
    communicator keeps failing the same way and can be aborted."""
    other = fresh_communicator(comm)
    assert (other.rank, other.size) == (comm.rank, comm.size)
    x = np.arange(10, dtype=np.float32)
    same(other.allreduce(x.copy()), x * comm.size, "second communicator")
    if comm.size > 1:
        req = other.iallreduce(x) if comm.rank == 0 else other.iallgather(x)
        e = expect(ringcc.RingccError, req.wait, "RCC_ERR_MISMATCH")
        assert "allreduce" in e.detail and "allgather" in e.detail, e.detail
        expect(ringcc.RingccError, req.wait, "RCC_ERR_MISMATCH")  # raised again
        expect(ringcc.RingccError, lambda: other.barrier(), "RCC_ERR")
    other.abort()
    expect(ValueError, lambda: other.barrier(), "destroyed")


def main():
    comm = ringcc.init(timeout=60)
    assert ringcc.is_initialized() and ringcc.rank() == comm.rank and ringcc.size() == comm.size
    for check in (check_allreduce, check_reduce_scatter, check_allgather_broadcast,
                  check_nonblocking, check_buffers, check_errors, check_failure):
        check(comm)
    ringcc.finalize()
    assert not ringcc.is_initialized()
    print(f"rank {comm.rank}/{comm.size}: every collective matches the reference")


if __name__ == "__main__":
    main()
