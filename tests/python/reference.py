"""Inputs every rank can compute for every rank, and the naive reductions
of them in numpy: the references the Python tests check ringcc against.

Float inputs are drawn from multiples of 0.5 in [-2, 2], so that sums and
products over up to 5 ranks are exact in every float type (bfloat16
included) and the order of reduction cannot change a bit; integers span
their whole range, so sums and products wrap as C's unsigned arithmetic
does."""
import numpy as np

OPS = ["sum", "prod", "max", "min", "avg"]
SIZES = [0, 1, 7, 1000, 65537]  # 65537 float64 is two 256 KiB chunks and one element


def rank_input(dtype, count, rank, seed=0):
    """Rank `rank`'s input of `count` elements (numpy dtype, or 'bfloat16' as float32)."""
    rng = np.random.default_rng([seed, rank, count])
    dt = np.dtype(np.float32 if dtype == "bfloat16" else dtype)
    if dt.kind == "f":
        return (rng.integers(-4, 5, count) / 2).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, count, dtype=dt, endpoint=True)


def reduce(inputs, op):
    """The elementwise reduction over ranks, in the inputs' dtype; avg is the
    sum divided once (integers: C division, toward zero)."""
    dt = inputs[0].dtype
    with np.errstate(over="ignore"):
        if op in ("sum", "avg"):
            out = inputs[0].copy()
            for x in inputs[1:]:
                out += x
        elif op == "prod":
            out = inputs[0].copy()
            for x in inputs[1:]:
                out *= x
        elif op == "max":
            out = np.maximum.reduce(inputs)
        else:
            out = np.minimum.reduce(inputs)
    if op != "avg":
        return out
    n = len(inputs)
    if dt.kind == "f":  # half types are divided in float32, as the library does
        wide = np.float32 if dt.itemsize < 4 else dt.type
        return (out.astype(wide) / wide(n)).astype(dt)
    if dt.kind == "u":
        return out // dt.type(n)
    wide = out.astype(np.int64)
    return np.where(wide < 0, -((-wide) // n), wide // n).astype(dt)


def rank_inputs(dtype, count, nranks, seed=0):
    return [rank_input(dtype, count, r, seed) for r in range(nranks)]
